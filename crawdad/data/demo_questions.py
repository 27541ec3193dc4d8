"""Small CLadder-format datasets written by crawdad itself, for the demo, tests and benchmarks.

The questions follow CLadder's schema and its prompt layout (a causal model's background, the
given information, the question): rungs 1-3, eleven query types, commonsensical,
anti-commonsensical and nonsensical stories, balanced yes/no answers, each answer computed from
the numbers (or the graph, or the stated rule) the question shows. They are not CLadder: the
stories, wording and numbers are crawdad's own. Use them to try crawdad, never to report results.

`make_cladder(n, seed)` is deterministic: question i depends only on (seed, i).
`crawdad/examples/` holds `make_cladder(EXAMPLES_N)`, the demo's questions
(`python -m crawdad.data.demo_questions` writes them again).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawdad.safe_files import write_file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLES_STEM = "crawdad-example"
EXAMPLES_N = 360


@dataclass(frozen=True)
class Var:
    name: str  # in the background: "Gene has a direct effect on ..."
    on: str  # the variable at 1, read after "those with" / "the probability of"
    off: str  # the variable at 0


@dataclass(frozen=True)
class Story:
    story_id: str
    x: Var  # treatment
    y: Var  # outcome
    c: Var  # a confounder of x and y
    m: Var  # a mediator from x to y
    k: Var  # a collider, caused by x and y


def _v(name: str, on: str, off: str) -> Var:
    return Var(name, on, off)


STORIES = [
    Story(
        "smoking",
        _v("smoking", "a smoking habit", "no smoking habit"),
        _v("lung cancer", "lung cancer", "healthy lungs"),
        _v("gene", "a risk gene", "no risk gene"),
        _v("tar", "tar deposits", "clean airways"),
        _v("doctor visit", "a doctor visit", "no doctor visit"),
    ),
    Story(
        "vaccine",
        _v("vaccination", "a vaccination", "no vaccination"),
        _v("recovery", "recovery", "no recovery"),
        _v("age", "old age", "young age"),
        _v("antibodies", "antibodies", "no antibodies"),
        _v("hospital stay", "a hospital stay", "no hospital stay"),
    ),
    Story(
        "exercise",
        _v("exercise", "regular exercise", "no exercise"),
        _v("heart health", "a healthy heart", "a weak heart"),
        _v("diet", "a balanced diet", "a poor diet"),
        _v("blood pressure", "low blood pressure", "high blood pressure"),
        _v("marathon", "a marathon finish", "no marathon finish"),
    ),
    Story(
        "studying",
        _v("studying", "daily studying", "no studying"),
        _v("exam result", "a passed exam", "a failed exam"),
        _v("motivation", "high motivation", "low motivation"),
        _v("knowledge", "solid knowledge", "patchy knowledge"),
        _v("scholarship", "a scholarship", "no scholarship"),
    ),
    Story(
        "sprinkler",
        _v("sprinkler", "the sprinkler on", "the sprinkler off"),
        _v("grass", "wet grass", "dry grass"),
        _v("season", "a dry season", "a rainy season"),
        _v("soil", "damp soil", "dry soil"),
        _v("slippery path", "a slippery path", "a safe path"),
    ),
    Story(
        "fertilizer",
        _v("fertilizer", "fertilizer use", "no fertilizer"),
        _v("harvest", "a large harvest", "a small harvest"),
        _v("farm size", "a large farm", "a small farm"),
        _v("nitrogen", "nitrogen-rich soil", "nitrogen-poor soil"),
        _v("farm award", "a farm award", "no farm award"),
    ),
    Story(
        "advertising",
        _v("advertising", "an ad campaign", "no ad campaign"),
        _v("sales", "high sales", "low sales"),
        _v("holiday", "a holiday season", "an ordinary season"),
        _v("brand awareness", "brand awareness", "no brand awareness"),
        _v("news story", "a news story", "no news story"),
    ),
    Story(
        "training",
        _v("training", "job training", "no job training"),
        _v("productivity", "high productivity", "low productivity"),
        _v("experience", "long experience", "short experience"),
        _v("skills", "new skills", "no new skills"),
        _v("promotion", "a promotion", "no promotion"),
    ),
]

# Anti-commonsense: one variable of a commonsense story swapped for one it cannot plausibly cause
# or be caused by (CLadder marks such models with an `anticommonsense` key).
ANTI = [
    ("y", _v("freckles", "freckles", "no freckles")),
    ("y", _v("eye color", "blue eyes", "brown eyes")),
    ("x", _v("left-handedness", "left-handedness", "right-handedness")),
    ("y", _v("shoe size", "large feet", "small feet")),
    ("x", _v("birth month", "a winter birthday", "a summer birthday")),
    ("y", _v("curly hair", "curly hair", "straight hair")),
    ("x", _v("ear shape", "pointed ears", "round ears")),
    ("y", _v("music taste", "a love of jazz", "no love of jazz")),
]

_NONSENSE_WORDS = [
    ("zory", "gwet", "kwox", "plim", "drab"),
    ("jyka", "lirp", "xevo", "quan", "huft"),
    ("yupt", "muvy", "tasp", "wibe", "skor"),
    ("vorn", "kelb", "rixy", "fump", "zalt"),
    ("blen", "qiro", "dusk", "naff", "pewl"),
    ("grix", "hosa", "lumt", "yorp", "cabe"),
]


def _nonsense(i: int, words: tuple[str, ...]) -> Story:
    x, y, c, m, k = (_v(w, w, f"no {w}") for w in words)
    return Story(f"nonsense{i}", x, y, c, m, k)


NONSENSE = [_nonsense(i, w) for i, w in enumerate(_NONSENSE_WORDS)]

# Query types by rung, in CLadder's proportions (about 31% / 31% / 38%): one cycle of 32.
CYCLE = (
    ["marginal"] * 4
    + ["correlation"] * 4
    + ["exp_away"] * 2
    + ["ate"] * 4
    + ["backadj"] * 4
    + ["collider_bias"] * 2
    + ["ett"] * 4
    + ["nie"] * 3
    + ["nde"] * 3
    + ["det-counterfactual"] * 2
)
RUNG = {
    "marginal": 1,
    "correlation": 1,
    "exp_away": 1,
    "ate": 2,
    "backadj": 2,
    "collider_bias": 2,
    "ett": 3,
    "nie": 3,
    "nde": 3,
    "det-counterfactual": 3,
}
# A cycle of 7 (coprime with 32): 3/7 commonsense, 2/7 anti-commonsense, 2/7 nonsense.
ALIGNMENTS = ("commonsense", "anticommonsense", "nonsense") * 2 + ("commonsense",)

_HYPOTHETICAL = (
    "Imagine a self-contained, hypothetical world with only the following conditions, and "
    "without any unmentioned factors or causal relationships: "
)
EDGES = {
    "confounding": [("c", "x"), ("c", "y"), ("x", "y")],
    "mediation": [("x", "m"), ("x", "y"), ("m", "y")],
    "chain": [("x", "m"), ("m", "y")],
    "collision": [("x", "k"), ("y", "k")],
    "fork": [("x", "y"), ("c", "y")],
}


@dataclass
class Draft:
    """One question before it is written out: its text, answer and what the meta records."""

    graph: str
    given: str
    question: str
    answer: str
    polarity: bool
    formal: str
    values: dict[str, Any]


def _pct(p: float) -> str:
    return f"{round(p * 100)}%"


def _p(rng: random.Random, low: float = 0.05, high: float = 0.95) -> float:
    """A probability as the text states it (whole percents), so answers follow from the text."""
    return round(rng.uniform(low, high), 2)


def _apart(rng: random.Random, gap: float = 0.06) -> tuple[float, float]:
    a, b = _p(rng), _p(rng)
    while abs(a - b) < gap:
        b = _p(rng)
    return a, b


def _pick(target: str, truth: bool, positive: str, negative: str) -> tuple[str, bool, str]:
    """(wording, polarity, answer): the polarity whose answer is `target`, given the truth of
    the positive wording."""
    polarity = truth == (target == "yes")
    return (positive if polarity else negative), polarity, target


def _given_y_by_x(s: Story, a: float, b: float) -> str:
    return (
        f"For those with {s.x.off}, the probability of {s.y.on} is {_pct(b)}. "
        f"For those with {s.x.on}, the probability of {s.y.on} is {_pct(a)}."
    )


def _marginal(s: Story, rng: random.Random, target: str) -> Draft:
    px, (a, b) = _p(rng, 0.15, 0.85), _apart(rng)
    py = px * a + (1 - px) * b
    while abs(py - 0.5) < 0.02:
        px = _p(rng, 0.15, 0.85)
        py = px * a + (1 - px) * b
    given = f"The overall probability of {s.x.on} is {_pct(px)}. " + _given_y_by_x(s, a, b)
    word, pol, ans = _pick(target, py > 0.5, "more", "less")
    q = f"Is {s.y.on} {word} likely than {s.y.off} overall?"
    return Draft(
        "chain", given, q, ans, pol, "P(Y)", {"P(X=1)": px, "P(Y=1|X)": [b, a], "P(Y=1)": py}
    )


def _correlation(s: Story, rng: random.Random, target: str) -> Draft:
    a, b = _apart(rng)
    word, pol, ans = _pick(target, a > b, "larger", "smaller")
    q = f"Is the chance of {s.y.on} {word} when observing {s.x.on}?"
    return Draft(
        "confounding",
        _given_y_by_x(s, a, b),
        q,
        ans,
        pol,
        "P(Y | X)",
        {"P(Y=1|X)": [b, a]},
    )


def _exp_away(s: Story, rng: random.Random, target: str) -> Draft:
    p0, p1 = _apart(rng)
    given = (
        f"For those with {s.k.on}, the probability of {s.x.on} is {_pct(p0)}. For those with "
        f"{s.k.on} and {s.y.on}, the probability of {s.x.on} is {_pct(p1)}."
    )
    word, pol, ans = _pick(target, p1 < p0, "decrease", "increase")
    q = f"If we look at those with {s.k.on}, does the chance of {s.x.on} {word} when {s.y.on}?"
    formal = "P(X=1 | Y=1, K=1) - P(X=1 | K=1)"
    return Draft("collision", given, q, ans, pol, formal, {"P(X=1|K=1)": p0, "P(X=1|Y,K)": p1})


def _ate(s: Story, rng: random.Random, target: str) -> Draft:
    pc = _p(rng, 0.15, 0.85)
    y = {(x, c): _p(rng) for x in (0, 1) for c in (0, 1)}
    ate = sum((pc if c else 1 - pc) * (y[1, c] - y[0, c]) for c in (0, 1))
    while abs(ate) < 0.03:
        y[1, 1] = _p(rng)
        ate = sum((pc if c else 1 - pc) * (y[1, c] - y[0, c]) for c in (0, 1))
    xs, cs = (s.x.off, s.x.on), (s.c.off, s.c.on)
    rows = [
        f"For those with {cs[c]} and {xs[x]}, the probability of {s.y.on} is {_pct(y[x, c])}."
        for c in (0, 1)
        for x in (0, 1)
    ]
    given = " ".join(rows) + f" The overall probability of {s.c.on} is {_pct(pc)}."
    word, pol, ans = _pick(target, ate > 0, "increase", "decrease")
    q = f"Will {s.x.on} {word} the chance of {s.y.on}?"
    values = {"P(C=1)": pc, "P(Y=1|X,C)": [[y[0, 0], y[0, 1]], [y[1, 0], y[1, 1]]], "ATE": ate}
    return Draft("confounding", given, q, ans, pol, "E[Y | do(X=1)] - E[Y | do(X=0)]", values)


def _backadj(s: Story, rng: random.Random, target: str) -> Draft:
    # Adjusting for a confounder is right; adjusting for a mediator is wrong.
    graph = rng.choice(["confounding", "mediation"])
    z = s.c if graph == "confounding" else s.m
    by_z = (
        f"We look at how {s.x.name} correlates with {s.y.name} case by case according to {z.name}."
    )
    direct = f"We look directly at how {s.x.name} correlates with {s.y.name} in general."
    first_is_by_z = (graph == "confounding") == (target == "yes")
    one, two = (by_z, direct) if first_is_by_z else (direct, by_z)
    given = f"Method 1: {one} Method 2: {two}"
    q = f"To understand how {s.x.name} affects {s.y.name}, is it more correct to use the Method 1 than Method 2?"
    return Draft(
        graph, given, q, target, first_is_by_z, "[backdoor adjustment set for Y given X]", {}
    )


def _collider_bias(s: Story, rng: random.Random, target: str) -> Draft:
    # x and y are independent causes of k: selecting on k makes them look related, no more.
    px, r = _p(rng, 0.15, 0.85), round(rng.uniform(-0.6, -0.05), 2)
    given = (
        f"The overall probability of {s.x.on} is {_pct(px)}. For those with {s.k.on}, the "
        f"correlation between {s.x.on} and {s.y.on} is {r}."
    )
    word, pol, ans = _pick(target, False, "affects", "does not affect")
    q = f"If we look at those with {s.k.on}, does it mean that {s.x.on} {word} {s.y.on}?"
    formal = "E[Y=1 | do(X=1), K=1] - E[Y=1 | do(X=0), K=1]"
    return Draft("collision", given, q, ans, pol, formal, {"P(X=1)": px, "corr(X,Y|K=1)": r})


def _ett(s: Story, rng: random.Random, target: str) -> Draft:
    a, b = _apart(rng)
    word, pol, ans = _pick(target, b > a, "more", "less")
    q = f"For those with {s.x.on}, would it be {word} likely to see {s.y.on} if they had {s.x.off}?"
    return Draft(
        "chain",
        _given_y_by_x(s, a, b),
        q,
        ans,
        pol,
        "E[Y_{X=1} - Y_{X=0} | X=1]",
        {"P(Y=1|X)": [b, a]},
    )


def _mediation_numbers(s: Story, rng: random.Random) -> tuple[str, dict[str, Any]]:
    m0, m1 = _apart(rng, 0.1)
    y = {(x, m): _p(rng) for x in (0, 1) for m in (0, 1)}
    xs, ms = (s.x.off, s.x.on), (s.m.off, s.m.on)
    rows = [
        f"For those with {xs[x]} and {ms[m]}, the probability of {s.y.on} is {_pct(y[x, m])}."
        for x in (0, 1)
        for m in (0, 1)
    ]
    given = (
        " ".join(rows) + f" For those with {s.x.off}, the probability of {s.m.on} is {_pct(m0)}."
        f" For those with {s.x.on}, the probability of {s.m.on} is {_pct(m1)}."
    )
    nie = (y[0, 1] - y[0, 0]) * (m1 - m0)
    nde = sum((m0 if m else 1 - m0) * (y[1, m] - y[0, m]) for m in (0, 1))
    values = {"P(M=1|X)": [m0, m1], "P(Y=1|X,M)": [[y[0, 0], y[0, 1]], [y[1, 0], y[1, 1]]]}
    return given, {**values, "NIE": nie, "NDE": nde}


def _nie(s: Story, rng: random.Random, target: str) -> Draft:
    given, values = _mediation_numbers(s, rng)
    while abs(values["NIE"]) < 0.02:
        given, values = _mediation_numbers(s, rng)
    word, pol, ans = _pick(target, values["NIE"] > 0, "positively", "negatively")
    q = f"Does {s.x.on} {word} affect {s.y.on} through {s.m.name}?"
    return Draft("mediation", given, q, ans, pol, "E[Y_{X=0, M=1} - Y_{X=0, M=0}]", values)


def _nde(s: Story, rng: random.Random, target: str) -> Draft:
    given, values = _mediation_numbers(s, rng)
    while abs(values["NDE"]) < 0.02:
        given, values = _mediation_numbers(s, rng)
    word, pol, ans = _pick(target, values["NDE"] > 0, "positively", "negatively")
    q = f"If we disregard the mediation effect through {s.m.name}, would {s.x.on} {word} affect {s.y.on}?"
    return Draft("mediation", given, q, ans, pol, "E[Y_{X=1, M=0} - Y_{X=0, M=0}]", values)


def _det_counterfactual(s: Story, rng: random.Random, target: str) -> Draft:
    # y holds exactly when x and/or c hold; c was observed; what if x had been different?
    rule = rng.choice(["or", "and"])
    seen_c, seen_x = rng.random() < 0.5, rng.random() < 0.5
    new_x = not seen_x
    y_cf = (new_x or seen_c) if rule == "or" else (new_x and seen_c)
    joined = "either" if rule == "or" else "both"
    link = "or" if rule == "or" else "and"
    given = (
        f"{s.y.on.capitalize()} happens exactly when there is {joined} {s.x.on} {link} "
        f"{s.c.on}. We observed {s.c.on if seen_c else s.c.off} and "
        f"{s.x.on if seen_x else s.x.off}."
    )
    outcome, pol, ans = _pick(target, y_cf, s.y.on, s.y.off)
    now, then = (s.x.on, s.x.off) if seen_x else (s.x.off, s.x.on)
    q = f"Would there be {outcome} if there had been {then} instead of {now}?"
    values = {"rule": rule, "C": int(seen_c), "X": int(seen_x), "Y_cf": int(y_cf)}
    return Draft("fork", given, q, ans, pol, "Y_{X=x'} | C=c, X=x", values)


QUERIES: dict[str, Callable[[Story, random.Random, str], Draft]] = {
    "marginal": _marginal,
    "correlation": _correlation,
    "exp_away": _exp_away,
    "ate": _ate,
    "backadj": _backadj,
    "collider_bias": _collider_bias,
    "ett": _ett,
    "nie": _nie,
    "nde": _nde,
    "det-counterfactual": _det_counterfactual,
}


def _story(alignment: str, rng: random.Random) -> tuple[Story, dict[str, Any] | None]:
    if alignment == "nonsense":
        return rng.choice(NONSENSE), None
    story = rng.choice(STORIES)
    if alignment == "commonsense":
        return story, None
    which, var = rng.choice(ANTI)
    swapped = Story(
        story.story_id,
        var if which == "x" else story.x,
        var if which == "y" else story.y,
        story.c,
        story.m,
        story.k,
    )
    return swapped, {"variable": which.upper(), "change": var.name}


def _background(s: Story, graph: str) -> str:
    effects: dict[str, list[str]] = {}
    for a, b in EDGES[graph]:
        effects.setdefault(getattr(s, a).name, []).append(getattr(s, b).name)
    sentences = [
        f"{cause.capitalize()} has a direct effect on {' and '.join(ys)}."
        for cause, ys in effects.items()
    ]
    return _HYPOTHETICAL + " ".join(sentences)


def make_question(i: int, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Question i and its causal model (model_id i), in CLadder's published format."""
    rng = random.Random(f"synthetic:{seed}:{i}")
    kind = CYCLE[i % len(CYCLE)]
    alignment = ALIGNMENTS[i % len(ALIGNMENTS)]
    target = ("yes", "no")[(i + i // len(CYCLE)) % 2]
    story, anti = _story(alignment, rng)
    draft = QUERIES[kind](story, rng, target)
    model: dict[str, Any] = {
        "model_id": i,
        "story_id": story.story_id,
        "graph_id": draft.graph,
        "structure": ",".join(f"{a.upper()}->{b.upper()}" for a, b in EDGES[draft.graph]),
        "background": _background(story, draft.graph),
        "variable_mapping": {
            f"{k.upper()}{suffix}": text
            for k in ("x", "y", "c", "m", "k")
            for suffix, text in zip(
                ("name", "1", "0"), vars(getattr(story, k)).values(), strict=True
            )
        },
    }
    if anti is not None:
        model["anticommonsense"] = anti
    question = {
        "question_id": i,
        "desc_id": f"{story.story_id}-{draft.graph}-{kind}-model{i}-q{i}",
        "given_info": draft.given,
        "question": draft.question,
        "answer": draft.answer,
        "meta": {
            "rung": RUNG[kind],
            "query_type": kind,
            "story_id": story.story_id,
            "graph_id": draft.graph,
            "model_id": i,
            "polarity": draft.polarity,
            "formal_form": draft.formal,
            "given_info": draft.values,
            "treatment": "X",
            "outcome": "Y",
        },
        "reasoning": {},
    }
    return question, model


def make_cladder(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """n questions and their causal models, in CLadder's published format."""
    pairs = [make_question(i, seed) for i in range(n)]
    return [q for q, _ in pairs], [m for _, m in pairs]


def write_cladder(folder: Path, n: int, seed: int = 0, stem: str = "synthetic") -> Path:
    """Write `{stem}-q-balanced.json` and `{stem}-meta-models.json` into `folder`."""
    questions, models = make_cladder(n, seed)
    folder.mkdir(parents=True, exist_ok=True)
    write_file(folder, f"{stem}-q-balanced.json", _dump(questions))
    write_file(folder, f"{stem}-meta-models.json", _dump(models))
    return folder


def _dump(items: list[dict[str, Any]]) -> str:
    """One object per line: small files that still diff well."""
    return "[\n" + ",\n".join(json.dumps(x, ensure_ascii=False) for x in items) + "\n]\n"


if __name__ == "__main__":  # regenerate the shipped examples
    print(write_cladder(EXAMPLES, EXAMPLES_N, stem=EXAMPLES_STEM))
