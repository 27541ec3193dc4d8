"""Plausible reasoning text for the seeded fake debaters.

Sentences are built from the question itself (the variables of its causal graph, its numbers,
its likely query type) and from fresh random numbers with correct arithmetic, so traces read like
causal reasoning, vary in vocabulary and do not repeat verbatim. Everything is drawn from the
`random.Random` passed in, so the same seed writes the same text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from crawdad.fake.parsing import Answer

_CONNECTIVES = (
    "Wait,",
    "Hmm,",
    "Okay,",
    "So",
    "Now",
    "Alternatively,",
    "Let me see:",
    "Right,",
    "Actually,",
    "Then",
    "Also,",
    "Next,",
    "Hold on,",
    "On second thought,",
    "In other words,",
    "Still,",
    "Hence",
    "Note that",
    "Importantly,",
    "Again,",
)
_TAILS = (
    " I think.",
    ", if I'm reading this correctly.",
    ", which seems consistent.",
    ", at least on paper.",
    ", as far as I can tell.",
    " That part checks out.",
    " Let me keep that in mind.",
    ", unless I misread the setup.",
)
_EDGE = re.compile(r"([A-Za-z][\w' -]{0,40}?) has a direct effect on ([\w' ,-]{1,80}?)\.")
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)%")

QUERY_TYPES = (
    "marginal probability",
    "conditional probability",
    "explaining away effect",
    "backdoor adjustment set",
    "average treatment effect",
    "collider bias",
    "normal counterfactual question",
    "average treatment effect on treated",
    "natural direct effect",
    "natural indirect effect",
)
_QUERY_HINTS = (
    ("method 1", "backdoor adjustment set"),
    ("case by case", "backdoor adjustment set"),
    ("would", "normal counterfactual question"),
    ("for those who", "average treatment effect on treated"),
    ("through", "natural indirect effect"),
    ("directly", "natural direct effect"),
    ("on average", "average treatment effect"),
    ("overall", "marginal probability"),
    ("given that", "conditional probability"),
)


@dataclass(slots=True)
class QuestionContext:
    """What the writer knows of the question: variable names, edges, numbers, query type."""

    variables: list[str] = field(default_factory=lambda: ["X", "Y", "Z"])
    edges: list[tuple[str, str]] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)
    query_type: str = "average treatment effect"
    question: str = ""

    @classmethod
    def from_prompt(cls, prompt: str, question_line: str = "") -> QuestionContext:
        edges: list[tuple[str, str]] = []
        # The regex backtracks a lot: run it only on the lines that can match.
        lines = "\n".join(x for x in prompt[:4000].split("\n") if "direct effect" in x)
        for cause, effects in _EDGE.findall(lines):
            cause = _short(cause)
            for effect in re.split(r",\s*(?:and\s+)?|\s+and\s+", effects):
                if effect.strip():
                    edges.append((cause, _short(effect)))
        names: list[str] = []
        seen: set[str] = set()
        for a, b in edges:
            for name in (a, b):
                if name.lower() not in seen:
                    seen.add(name.lower())
                    names.append(name)
        # The variables the question names come first: they are the cause and effect asked about.
        asked = question_line.lower()
        names.sort(key=lambda n: asked.find(n.lower()) if n.lower() in asked else 10_000)
        numbers = [float(n) / 100 for n in _PERCENT.findall(prompt[:4000])][:12]
        lowered = question_line.lower()
        query = next((q for hint, q in _QUERY_HINTS if hint in lowered), "")
        return cls(
            variables=names or ["X", "Y", "Z"],
            edges=edges[:8],
            numbers=numbers,
            query_type=query or QUERY_TYPES[len(question_line) % len(QUERY_TYPES)],
            question=question_line.removeprefix("Question: ").strip(),
        )


def _short(name: str) -> str:
    words = name.strip().split()
    return " ".join(words[-3:]) if words else "X"


class Writer:
    """Writes thinking traces and final texts for one reply."""

    def __init__(self, rng: random.Random, ctx: QuestionContext) -> None:
        self.rng = rng
        self.ctx = ctx
        names = ctx.variables
        self.x = names[0]
        self.y = names[1] if len(names) > 1 else "the outcome"
        self.z = names[2] if len(names) > 2 else "a third factor"
        # Symbols fixed up front, in the variables' order, so every reply uses the same ones.
        self._letters: dict[str, str] = {}
        for name in [*names, self.x, self.y, self.z]:
            self._assign(name)
        self.lx, self.ly, self.lz = (self.letter(n) for n in (self.x, self.y, self.z))
        self._formal = self._formalise()

    # ---- small pieces

    def p(self) -> float:
        if self.ctx.numbers and self.rng.random() < 0.6:
            return self.rng.choice(self.ctx.numbers)
        return round(self.rng.uniform(0.04, 0.96), 2)

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def _assign(self, name: str) -> None:
        """Give a variable a short symbol, distinct from the other variables' symbols."""
        key = name.lower()
        if key in self._letters:
            return
        used = set(self._letters.values())
        words = name.split() or ["X"]
        options = [words[0][:1].upper(), "".join(w[:1].upper() for w in words)]
        options += [words[0][:2].capitalize(), words[0][:3].capitalize()]
        self._letters[key] = next((o for o in options if o and o not in used), key)

    def letter(self, name: str) -> str:
        key = name.lower()
        if key not in self._letters:
            self._assign(name)
        return self._letters[key]

    def graph(self) -> str:
        edges = self.ctx.edges or [(self.x, self.y), (self.z, self.x), (self.z, self.y)]
        return ", ".join(f"{self.letter(a)} -> {self.letter(b)}" for a, b in edges)

    def formal(self) -> str:
        return self._formal

    def _formalise(self) -> str:
        x, y, z = self.lx, self.ly, self.lz
        return {
            "average treatment effect": f"E[{y} | do({x}=1)] - E[{y} | do({x}=0)]",
            "backdoor adjustment set": f"P({y} | do({x})) = sum_{z} P({y} | {x}, {z}) P({z})",
            "normal counterfactual question": f"P({y}_{{{x}=1}} = 1 | {x}=0)",
            "average treatment effect on treated": f"E[{y}_{{{x}=1}} - {y}_{{{x}=0}} | {x}=1]",
            "natural direct effect": f"E[{y}_{{{x}=1, {z}_{{{x}=0}}}} - {y}_{{{x}=0}}]",
            "natural indirect effect": f"E[{y}_{{{x}=0, {z}_{{{x}=1}}}} - {y}_{{{x}=0}}]",
            "marginal probability": f"P({y}=1) = sum_{x} P({y}=1 | {x}) P({x})",
            "conditional probability": f"P({y}=1 | {x}=1)",
            "explaining away effect": f"P({x}=1 | {y}=1, {z}=1) - P({x}=1 | {y}=1)",
            "collider bias": f"P({y}=1 | {x}=1, {z}=1) - P({y}=1 | {x}=0, {z}=1)",
        }.get(self.ctx.query_type, f"P({y}=1 | do({x}=1))")

    def arithmetic(self) -> str:
        x, y = self.lx, self.ly
        a, b, w = self.p(), self.p(), round(self.rng.uniform(0.1, 0.9), 2)
        kind = self.rng.randrange(4)
        if kind == 0:
            return f"P({y}=1 | {x}=1) - P({y}=1 | {x}=0) = {a} - {b} = {a - b:.2f}"
        if kind == 1:
            return f"{a} * {w} + {b} * {1 - w:.2f} = {a * w + b * (1 - w):.4f}"
        if kind == 2 and a + b:  # both may be 0 (a question's stated numbers): no ratio then
            return f"{a} / ({a} + {b}) = {a / (a + b):.3f}"
        return f"({a} - {b}) * {w} = {(a - b) * w:.4f}"

    def answer_line(self, answer: Answer, confidence: float) -> str:
        c = f"{confidence:.2f}".rstrip("0").rstrip(".") if confidence < 1 else "1.0"
        style = self.rng.randrange(10)
        if style < 5:
            return f"Answer: {answer} (Confidence: {c})"
        if style == 5:
            return f"Answer: **{answer}** (confidence: {c})"
        if style == 6:
            return f"**Answer: {answer}** (Confidence: {c})"
        if style == 7:
            return f"Final Answer: {answer} (confidence: {c})"
        if style == 8:
            return f"Answer: {answer.capitalize()} (Confidence: {c})"
        return f"Answer: {answer} (Confidence: {round(confidence * 100)}%)"

    # ---- thinking

    def thinking(
        self,
        words: int,
        answer: Answer,
        opponent: tuple[Answer | None, float | None] | None = None,
    ) -> str:
        openers = [self._opening()]
        if opponent is not None:
            openers.append(self._opponent_thought(opponent))
        parts = openers
        count = sum(part.count(" ") + 1 for part in parts)
        generators = self._thought_generators(opponent)
        while count < words:
            sentence = self.sentence(generators)
            parts.append(sentence)
            count += sentence.count(" ") + 1
        parts.append(self._conclusion(answer))
        return self._paragraphs(parts)

    def loop_span(self) -> str:
        x, y = self.lx, self.ly
        return self.pick(
            f"Wait, let me recompute P({y}=1 | do({x}=1)) once more. ",
            f"Hmm, so the effect of {self.x} on {self.y} is {self.p()}, but wait, let me check again. ",
            "So the answer is yes. But wait, maybe the answer is no. Let me recheck. ",
        )

    def sentence(self, generators: list[Callable[[], str]]) -> str:
        """One sentence from a random generator, with a random connective and tail."""
        core = self.rng.choice(generators)()
        roll = self.rng.random()
        if roll < 0.55:
            word = self.rng.choice(_CONNECTIVES)
            lowered = (
                core if core[:2].isupper() or core[:1] in "P(E" else core[:1].lower() + core[1:]
            )
            core = f"{word} {lowered}"
        if roll > 0.75 and core.endswith("."):
            core = core[:-1] + self.rng.choice(_TAILS)
        return core

    def _paragraphs(self, sentences: list[str]) -> str:
        out: list[str] = []
        line: list[str] = []
        for sentence in sentences:
            line.append(sentence)
            if self.rng.random() < 0.25:
                out.append(" ".join(line))
                line = []
        if line:
            out.append(" ".join(line))
        return "\n\n".join(out)

    def _opening(self) -> str:
        question = self.ctx.question or f"how {self.x} affects {self.y}"
        return self.pick(
            f"Okay, let's see. The question asks: {question}",
            f"Alright, the question is: {question} Let me think.",
            "Let me read the setup carefully before calculating anything.",
            f"So this is about {self.x} and {self.y}. Let me work through it step by step.",
        )

    def _opponent_thought(self, opponent: tuple[Answer | None, float | None]) -> str:
        answer, confidence = opponent
        said = f"'{answer}'" if answer else "something I can't quite pin down"
        sure = f" with confidence {confidence}" if confidence is not None else ""
        return self.pick(
            f"The other model answered {said}{sure}. I need to check their reasoning.",
            f"My opponent says {said}{sure}. Let me see whether their argument holds up.",
            f"Now the opponent claims {said}{sure}; is there a flaw in their calculation?",
        )

    def _thought_generators(
        self, opponent: tuple[Answer | None, float | None] | None
    ) -> list[Callable[[], str]]:
        x, y, z = self.x, self.y, self.z
        gens: list[Callable[[], str]] = [
            lambda: f"The causal graph should be {self.graph()}.",
            lambda: (
                f"{z} affects both {x} and {y}, so it could confound the relationship; "
                f"the backdoor path {self.lx} <- {self.lz} -> {self.ly} "
                "needs to be blocked."
            ),
            lambda: f'The query type is probably "{self.ctx.query_type}", given how it is phrased.',
            lambda: f"Formally, I need {self.formal()}.",
            lambda: (
                f"We have P({self.ly}=1 | {self.lx}=0) = {self.p()} and "
                f"P({self.ly}=1 | {self.lx}=1) = {self.p()}."
            ),
            lambda: f"Computing: {self.arithmetic()}.",
            lambda: (
                f"If {x} were set to 1 for everyone, {y} would occur with probability "
                f"{self.p()}; set to 0, with probability {self.p()}."
            ),
            lambda: f"Weighting by P({self.lz}=1) = {self.p()}: {self.arithmetic()}.",
            lambda: f"Let me restate the data: {self._data()}.",
            lambda: self.pick(
                "A collider blocks the path unless we condition on it or on its descendants.",
                f"Conditioning on a mediator such as {z} would remove part of the effect we want.",
                "The adjustment formula only holds if every backdoor path is blocked.",
                f"Observing {y} tells us something about {x} only through the open paths.",
                "The counterfactual needs the structural equations, not just the correlations.",
            ),
            lambda: f"Let me double-check the arithmetic: {self.arithmetic()}.",
            lambda: self.pick(
                f"Wait, is {z} observed? That changes which adjustment is valid.",
                "Hmm, I might be confusing the conditional probability with the interventional one.",
                "Actually, hold on. Let me re-read the question to be sure of the direction.",
                "No, that's not right, I swapped the two conditions. Let me redo it.",
                f"But what if {x} also affects {y} through {z}? Then the direct and indirect "
                "parts differ.",
            ),
            lambda: self.pick(
                "This goes against intuition, but the numbers are what matter here.",
                "The story sounds odd, but in this hypothetical world only the stated "
                "relationships exist.",
                "Commonsense would say otherwise, but I should trust the calculation.",
            ),
            lambda: (
                f"So conditioning on {z} gives {self.arithmetic()}, which is "
                f"{self.pick('positive', 'negative', 'close to zero')}."
            ),
            lambda: (
                f"By do-calculus, intervening on {x} cuts the edges into {x}, so "
                f"P({self.ly} | do({self.lx})) differs from the observational "
                "conditional unless there is no confounding."
            ),
            lambda: (
                f"The total effect splits into a direct effect {x} -> {y} and an indirect "
                f"effect through {z}."
            ),
        ]
        if opponent is not None:
            gens += [
                lambda: self.pick(
                    "Their step 3 formalization looks right, but the calculation afterwards "
                    "doesn't follow from it.",
                    "They treated the observational correlation as if it were causal.",
                    "Their argument is about feasibility, but the question is about correctness.",
                    "I agree with their graph, so the disagreement must be in the arithmetic.",
                ),
                lambda: f"If I recompute with their numbers: {self.arithmetic()}.",
            ]
        return gens

    def _conclusion(self, answer: Answer) -> str:
        return self.pick(
            f"So the answer should be {answer}.",
            f"Therefore, {answer}.",
            f"Putting it together, the answer is {answer}.",
            f"I'm fairly sure it's {answer}.",
        )

    # ---- final texts

    def initial_text(self, words: int, answer: Answer, confidence: float) -> str:
        steps = [
            f"Step 1) Extract the causal graph: {self.graph()}",
            f'Step 2) Determine the query type: "{self.ctx.query_type}"',
            f"Step 3) Formalize the query: {self.formal()}",
            f"Step 4) Gather all relevant data: {self._data()}",
            f"Step 5) Deduce the estimand using causal inference: {self._deduction(words)}",
            f"Step 6) Calculate the estimand: {self.arithmetic()}",
            f"Step 7) Final yes/no answer: **{answer}**",
        ]
        body = "\n\n".join(steps)
        if self.rng.random() < 0.3:
            body = f"{self.answer_line(answer, confidence)}\n\nReasoning:\n\n{body}"
        return f"{body}\n\n{self.answer_line(answer, confidence)}"

    def debate_text(
        self,
        words: int,
        answer: Answer,
        confidence: float,
        opponent_answer: Answer | None,
        *,
        short: bool = False,
    ) -> str:
        line = self.answer_line(answer, confidence)
        if short:
            return line if self.rng.random() < 0.6 else f"**{answer}**\n\n{line}"
        agree = opponent_answer == answer
        opening = (
            self.pick(
                "After reviewing my opponent's argument, I agree with their conclusion.",
                "My opponent's reasoning is sound, and I revise my answer accordingly.",
                "I accept the critique: my earlier calculation overlooked a key step.",
            )
            if agree
            else self.pick(
                "My opponent's response contains a flaw.",
                "I disagree with my opponent's conclusion.",
                "The opponent's argument conflates correlation with causation.",
                "I maintain my answer; the critique does not hold.",
            )
        )
        sentences = [opening]
        count = opening.count(" ") + 1
        gens = self._thought_generators((opponent_answer, None))
        while count < words:
            sentence = self.sentence(gens)
            sentences.append(sentence)
            count += sentence.count(" ") + 1
        return f"{self._paragraphs(sentences)}\n\n{line}"

    def _data(self) -> str:
        x, y = self.lx, self.ly
        return f"P({x}=1)={self.p()}; P({y}=1 | {x}=0)={self.p()}; P({y}=1 | {x}=1)={self.p()}"

    def _deduction(self, words: int) -> str:
        parts: list[str] = []
        count = 0
        gens = self._thought_generators(None)
        budget = max(20, words - 60)
        while count < budget:
            sentence = self.sentence(gens)
            parts.append(sentence)
            count += sentence.count(" ") + 1
        return " ".join(parts)
