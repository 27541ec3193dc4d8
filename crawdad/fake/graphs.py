"""The fakes on whole-graph causal discovery (the discovery-graph task) and on MAC's coding agents.

A graph debater answers an item with an edge list: for every unordered pair of the graph's
variables it believes the true state (no edge, A -> B, B -> A) with the profile's accuracy, or
else a wrong one, drawn once per (seed, model, graph, pair) so its later turns keep its beliefs.
In a debate it reads the opponent's last graph and, pair by pair where they differ, takes the
opponent's state with the profile's switch chance (the opponent's stated confidence over the
threshold, more often when the opponent is right), as the pairwise fakes switch answers. It ends
with `Final graph:`, the edges one per line (or `no edges`), and `Confidence: c`. A graph whose
truth is unknown (Auto MPG, or two graphs whose prompts cannot be told apart) is believed at
random.

A coding agent (a prompt asking for a plan {"algorithm", "params"}) reads the data's kind from
the prompt's data summary (discrete or continuous columns) and picks a plan that suits it, drawn
once per (seed, model, graph); at `BAD_PLAN_RATE` a plan the runner refuses (an algorithm not
offered, a parameter out of range, a test for the wrong kind of data). In a debate it may take
the opponent's plan, more readily when its own was a bad one, so debates reach one graph.

A plan judge (a request whose schema asks for a "plan", the coding protocol's judge) picks, among
the final plans the prompt lists, one that suits the data where there is one, drawn by the
request's seed.

`read_final_graph` is how the fake extractor (and a fake debater reading its opponent) reads an
edge list back from a response.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from crawdad.causal.edge_text import NO_EDGES, parse_edges
from crawdad.fake.answer_key import KeyEntry
from crawdad.fake.behaviour import FakeReply, FakeRequest, seeded_rng
from crawdad.fake.parsing import opponent_section, to_confidence

# `params` below are a ProfileParams (crawdad/fake/profile.py, which imports this module).
ProfileParams = Any

Edge = tuple[str, str]
State = int  # 0: no edge; 1: a -> b; 2: b -> a; 3: both (a truth with a 2-cycle)

_FINAL = re.compile(r"final (?:causal )?graph\s*:?", re.IGNORECASE)
_CONF = re.compile(r"confidence[^0-9\n]{0,15}?(\d+(?:\.\d+)?|\.\d+)\s*(%?)", re.IGNORECASE)
_DATA_LINE = re.compile(r"^- (.+?): (discrete|continuous)\b", re.MULTILINE)
_ROWS = re.compile(r"([\d,]+) rows, (\d+) columns\.")
_FINAL_PLAN = re.compile(r"^Debater (\d+)'s plan: (.*)$", re.MULTILINE)
PLAN_MARKER = '{"algorithm"'
BAD_PLAN_RATE = 0.15
ADOPT_CHANCE = 0.5  # taking the opponent's plan in a debate turn (its own was a good one)
FIX_CHANCE = 0.8  # dropping its own bad plan for the opponent's (or a good one) when criticised


# --- reading graphs back -----------------------------------------------------------------------


def read_final_graph(text: str) -> tuple[list[Edge] | None, float | None]:
    """The edges after the last `Final graph:` of a response (or all its `A -> B` lines when it
    has no such heading; [] for `no edges`), and the confidence stated after them; None when
    it gives no graph."""
    marks = list(_FINAL.finditer(text))
    body = text[marks[-1].end() :] if marks else text
    conf = _CONF.search(body)
    confidence = to_confidence(*conf.groups()) if conf else None
    graph_part = body[: conf.start()] if conf else body
    edges = parse_edges(graph_part)
    if edges:
        return edges, confidence
    if NO_EDGES in graph_part.lower():
        return [], confidence
    return None, confidence


def _pairs(variables: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(variables) for b in variables[i + 1 :]]


def _state(edges: set[Edge], a: str, b: str) -> State:
    return ((a, b) in edges) + 2 * ((b, a) in edges)


def _edges_of(states: dict[tuple[str, str], State]) -> list[Edge]:
    out: list[Edge] = []
    for (a, b), s in states.items():
        if s & 1:
            out.append((a, b))
        if s & 2:
            out.append((b, a))
    return out


def _norm(name: str) -> str:
    return " ".join(name.casefold().split())


# --- the graph debater -------------------------------------------------------------------------


def believed_graph(
    params: ProfileParams,
    seed: int,
    model: str,
    entry: KeyEntry,
    accuracy: float,
    sample_seed: int | None = None,
) -> dict[tuple[str, str], State]:
    """What the model believes of each unordered pair of the entry's graph."""
    truth = {(a, b) for a, b in parse_edges(entry.graph or "")}
    known = bool(entry.graph)
    states: dict[tuple[str, str], State] = {}
    for a, b in _pairs(entry.variables):
        draw = seeded_rng(seed, model, entry.question_id, a, b)
        belief = draw.random()
        if sample_seed is not None:
            fresh = seeded_rng(seed, model, entry.question_id, a, b, sample_seed)
            if fresh.random() < params.independence:
                belief = fresh.random()
        true = _state(truth, a, b)
        if known and belief < accuracy:
            states[(a, b)] = true
        else:
            wrong = [s for s in (0, 1, 2) if s != true] if known else [0, 0, 1, 2]
            states[(a, b)] = draw.choice(wrong)
    return states


def graph_reply(
    params: ProfileParams,
    seed: int,
    request: FakeRequest,
    entry: KeyEntry,
    rng: random.Random,
    after: int,
) -> FakeReply:
    """A debater's answer to a whole-graph item (the prompt's question ends at `after`)."""
    prompt = request.prompt
    section = opponent_section(prompt, after)
    opponent = read_final_graph(section) if section is not None else (None, None)
    in_debate = section is not None or "opponent" in prompt.lower()
    accuracy = (params.judgement_accuracy if in_debate else params.initial_accuracy)(
        None, entry.alignment
    )
    states = believed_graph(
        params, seed, request.model, entry, accuracy, None if in_debate else request.seed
    )
    truth = {(a, b) for a, b in parse_edges(entry.graph or "")}
    if opponent[0] is not None:
        theirs = _matched(opponent[0], entry.variables)
        stated = 0.5 if opponent[1] is None else opponent[1]
        base = params.switch_base + params.switch_per_confidence * max(
            0.0, stated - params.switch_threshold
        )
        for (a, b), own in states.items():
            other = _state(theirs, a, b)
            if other == own:
                continue
            chance = base
            if entry.graph:
                right = other == _state(truth, a, b)
                chance *= params.switch_to_correct if right else params.switch_to_wrong
            if rng.random() < min(1.0, chance):
                states[(a, b)] = other
    edges = _edges_of(states)
    correct = bool(entry.graph) and set(edges) == truth
    low, high = params.confidence_correct if correct else params.confidence_wrong
    confidence = min(1.0, round(rng.uniform(low, high) * 20) / 20)
    return FakeReply(thinking=_thinking(rng, states, params), text=_graph_text(edges, confidence))


def _matched(edges: list[Edge], variables: tuple[str, ...]) -> set[Edge]:
    known = {_norm(v): v for v in variables}
    out = set()
    for a, b in edges:
        ka, kb = known.get(_norm(a)), known.get(_norm(b))
        if ka and kb and ka != kb:
            out.add((ka, kb))
    return out


_WHY = (
    "{a} acts on {b} directly: changing {a} would move {b} with everything else held fixed",
    "any link between {a} and {b} runs through the other variables, so no direct edge",
    "{b} comes first in time, so if anything it is {b} that drives {a}",
    "{a} and {b} may only share a common cause here",
)


def _thinking(rng: random.Random, states: dict[tuple[str, str], State], p: ProfileParams) -> str:
    words = int(rng.uniform(*p.thinking_words) / 4)
    parts = ["Let me go through the variables pair by pair."]
    pairs = list(states) or [("X", "Y")]
    while sum(s.count(" ") + 1 for s in parts) < words:
        a, b = rng.choice(pairs)
        parts.append(rng.choice(_WHY).format(a=a, b=b).capitalize() + ".")
    return " ".join(parts)


def _graph_text(edges: list[Edge], confidence: float) -> str:
    lines = [f"{a} -> {b}" for a, b in sorted(edges)] or [NO_EDGES]
    c = f"{confidence:.2f}".rstrip("0").rstrip(".") if confidence < 1 else "1.0"
    return (
        "I considered each pair of variables in turn, asking whether changing one would change "
        "the other with the rest held fixed.\n\nFinal graph:\n"
        + "\n".join(lines)
        + f"\n\nConfidence: {c}"
    )


# --- the coding agent --------------------------------------------------------------------------


def is_plan_request(prompt: str) -> bool:
    return PLAN_MARKER in prompt


def _plans(discrete: bool, variables: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(plans that suit the data, plans the runner refuses or that do not suit them)."""
    if discrete:
        good: list[dict[str, Any]] = [
            {"algorithm": "pc", "params": {"indep_test": "chisq", "alpha": 0.05}},
            {"algorithm": "pc", "params": {"indep_test": "gsq", "alpha": 0.01}},
            {"algorithm": "ges", "params": {"score": "bdeu"}},
        ]
        bad: list[dict[str, Any]] = [
            {"algorithm": "notears", "params": {"lambda1": 0.1}},
            {"algorithm": "pc", "params": {"alpha": 0.9}},
            {"algorithm": "pc", "params": {"indep_test": "kci"}},
        ]
    else:
        good = [
            {"algorithm": "pc", "params": {"indep_test": "fisherz", "alpha": 0.05}},
            {"algorithm": "ges", "params": {"score": "bic"}},
            {"algorithm": "direct-lingam", "params": {}},
        ]
        if variables <= 8:
            good.append({"algorithm": "exact", "params": {"search_method": "astar"}})
        bad = [
            {"algorithm": "notears", "params": {"lambda1": 0.1}},
            {"algorithm": "pc", "params": {"indep_test": "chisq"}},
            {"algorithm": "ges", "params": {"score": "bdeu"}},
        ]
    return good, bad


def _last_plan(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    found = None
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("algorithm"), str):
            found = value
    return found


def plan_reply(
    seed: int, request: FakeRequest, entry: KeyEntry, rng: random.Random, after: int
) -> FakeReply:
    """A coding agent's plan for the data the prompt describes."""
    prompt = request.prompt
    kinds = _DATA_LINE.findall(prompt)
    discrete = bool(kinds) and all(k == "discrete" for _, k in kinds)
    good, bad = _plans(discrete, len(kinds))
    own_rng = seeded_rng(seed, request.model, entry.question_id or request.digest, "plan")
    is_bad = own_rng.random() < BAD_PLAN_RATE
    plan = own_rng.choice(bad if is_bad else good)
    section = opponent_section(prompt, after)
    theirs = _last_plan(section) if section is not None else None
    if theirs is not None:
        theirs_good = any(theirs == g for g in good)
        if is_bad and rng.random() < FIX_CHANCE:
            plan = theirs if theirs_good else rng.choice(good)
        elif theirs_good and rng.random() < ADOPT_CHANCE:
            plan = theirs
    rows = _ROWS.search(prompt)
    size = f"{rows.group(1)} rows of {rows.group(2)} variables" if rows else "these data"
    kind = "discrete" if discrete else "continuous"
    text = (
        f"The data are {kind}: {size}. Weighing the algorithms' assumptions against them, I "
        f"choose {plan['algorithm']}.\n```json\n{json.dumps(plan)}\n```"
    )
    return FakeReply(thinking=f"The columns look {kind}; {plan['algorithm']} should do.", text=text)


# --- the plan judge ----------------------------------------------------------------------------


def is_plan_judge_request(request: FakeRequest) -> bool:
    props = (request.schema or {}).get("properties") or {}
    return "plan" in props and "decision" not in props


def plan_judge_reply(seed: int, request: FakeRequest) -> FakeReply:
    """The coding protocol's judge: a plan that suits the data, else any, of those offered."""
    prompt = request.prompt
    offered = ((request.schema or {}).get("properties") or {}).get("plan", {}).get("enum", [])
    kinds = _DATA_LINE.findall(prompt)
    discrete = bool(kinds) and all(k == "discrete" for _, k in kinds)
    good, _ = _plans(discrete, len(kinds))
    plans = {f"debater {n}": _last_plan(text) for n, text in _FINAL_PLAN.findall(prompt)}
    suited = [c for c in offered if plans.get(c) in good]
    rng = seeded_rng(seed, "plan-judge", request.model, request.digest, request.seed)
    pick = rng.choice(suited or offered or ["debater 1"])
    reply = {"plan": pick, "confidence": round(rng.uniform(0.6, 1.0) * 20) / 20}
    return FakeReply(thinking=f"{pick}'s plan fits these data best.", text=json.dumps(reply))
