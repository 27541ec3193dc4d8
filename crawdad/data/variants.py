"""`crawdad data variants`: fresh CLadder questions, same stories, graphs, wordings and query
types, new probability tables drawn the way CLadder's generator draws them.

How CLadder draws a model's tables (causalNLP/cladder, causalbenchmark/graphs/builders.py), from
the settings each meta-model keeps (`builder`, `spec`):

- builder "random": every table entry uniform on [0, 1]; the spec is the tables themselves.
- builder "difficulty": a root's spec is a range [lo, hi] (or a list of ranges, one picked, or
  0/1/2 for (0.01, 0.2), (0.4, 0.6), (0.8, 0.99)) and P(V=1) is uniform on it. A mechanism's spec
  gives each parent a gap c (|c| = 1 means 0.2; absent means 0): P(V=1 | parent=1, rest) -
  P(V=1 | parent=0, rest) must be at least c (at most c when negative) for every value of the
  other parents. The table's entries are ordered by the sum of their parents' gaps; the
  differences between neighbours are the gaps plus random spaces that fill [0, 1] (the two end
  spaces weighted by the number of gaps), entries with equal sums in random order.
- a variable the spec does not name (the unobserved V1 of IV): every entry uniform on [0, 1].
- builder "deterministic" (det-counterfactual) is not redrawn: its answers do not depend on the
  tables, and neither do backadj's (they show no numbers): those questions are left out.

CLadder writes every question in two wordings, `polarity` true and false (more / less, increase
/ decrease), whose answers are opposite. A fresh model is drawn once per such pair and both
wordings are rendered from it, so the fresh questions are balanced yes/no exactly as CLadder's
are; a draw where the quantity falls in CLadder's "no effect" band (both wordings answer no) is
drawn again. Each fresh question keeps `meta.variant_of` (the original's id) and
`meta.variant = "fresh"`; the originals written beside them get `meta.variant = "original"`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawdad.causal.model import BinaryModel
from crawdad.causal.render import NO_NUMBERS, RenderError, render_question
from crawdad.data.questions import load_cladder, read_raw
from crawdad.errors import CrawdadError, DataError
from crawdad.safe_files import write_file

SOURCE_BINS = ((0.01, 0.2), (0.4, 0.6), (0.8, 0.99))
DEFAULT_GAP = 0.2
BUILDERS = ("difficulty", "random")
MAX_DRAWS = 50  # draws per pair before giving up on it (the band is narrow: rarely needed)
QUESTIONS_FILE = "cladder-variants-q.json"
MODELS_FILE = "cladder-variants-meta-models.json"
_KEY = re.compile(r"^\s*p\(\s*(\w+)\s*(?:\|\s*([\w\s,]+))?\)\s*$", re.IGNORECASE)


# --- drawing tables as CLadder does -------------------------------------------------------------


def _source(spec: Any, rng: random.Random) -> float:
    if isinstance(spec, int) and not isinstance(spec, bool):
        lo, hi = SOURCE_BINS[spec]
    elif isinstance(spec, list) and spec and isinstance(spec[0], list | tuple):
        lo, hi = rng.choice(spec)
    elif isinstance(spec, list) and len(spec) == 2:
        lo, hi = spec
    else:
        raise DataError(f"a root's spec {spec!r} is not a range [lo, hi] nor 0, 1 or 2")
    return rng.uniform(float(lo), float(hi))


def _gapped(gaps: Sequence[float], rng: random.Random) -> list[float]:
    """len(gaps) + 1 increasing numbers in (0, 1), neighbours at least `gaps` apart."""
    d = len(gaps)
    remaining = 1 - sum(gaps)
    if remaining < 0:
        raise DataError(f"the spec's gaps {list(gaps)} add up to more than 1")
    spaces = [rng.random() for _ in range(d + 2)]
    spaces[0] *= d
    spaces[-1] *= d
    total = sum(spaces)
    spaces = [s / total * remaining for s in spaces]
    out, x = [], 0.0
    for i in range(d + 1):
        x += spaces[i] + (gaps[i - 1] if i else 0.0)
        out.append(x)
    return out


def _mechanism(gaps: Sequence[float], rng: random.Random) -> list[Any] | float:
    """A table nested len(gaps) deep: cell (b1, .., bk) sits at sum(b_i * gap_i) on the line."""
    cells = [
        tuple((i >> (len(gaps) - 1 - k)) & 1 for k in range(len(gaps)))
        for i in range(2 ** len(gaps))
    ]
    level = {c: sum(b * g for b, g in zip(c, gaps, strict=True)) for c in cells}
    low = min(level.values())
    shuffled = list(cells)
    rng.shuffle(shuffled)  # equal levels end up in random order
    ranked = sorted(shuffled, key=lambda c: level[c])
    line = [level[c] - low for c in ranked]
    values = _gapped([b - a for a, b in itertools.pairwise(line)], rng)
    return _nest(dict(zip(ranked, values, strict=True)), len(gaps))


def _nest(cells: Mapping[tuple[int, ...], float], depth: int, prefix: tuple[int, ...] = ()) -> Any:
    if len(prefix) == depth:
        return cells[prefix]
    return [_nest(cells, depth, (*prefix, b)) for b in (0, 1)]


def _uniform(n_parents: int, rng: random.Random) -> Any:
    cells = {
        tuple((i >> (n_parents - 1 - k)) & 1 for k in range(n_parents)): rng.random()
        for i in range(2**n_parents)
    }
    return _nest(cells, n_parents)


def _flat(value: Any) -> list[float]:
    return [x for v in value for x in _flat(v)] if isinstance(value, list) else [value]


def parse_key(key: str) -> tuple[str, list[str]]:
    m = _KEY.match(key)
    if not m:
        raise DataError(f"params key {key!r} is not of the form p(V | A, B)")
    return m.group(1), [p.strip() for p in (m.group(2) or "").split(",") if p.strip()]


def draw_params(raw: Mapping[str, Any], rng: random.Random) -> tuple[dict[str, Any], Any]:
    """New `params` (in the meta-model's own layout) and `spec` for a CLadder meta-model."""
    builder, spec = raw.get("builder"), raw.get("spec") or {}
    if builder not in BUILDERS:
        raise DataError(f"builder {builder!r} is not redrawn (only {', '.join(BUILDERS)})")
    params: dict[str, Any] = {}
    new_spec = copy.deepcopy(spec)
    for key, old in raw["params"].items():
        var, parents = parse_key(key)
        mine = spec.get(var) if isinstance(spec, dict) else None
        if builder == "random" or mine is None:
            table: Any = _uniform(len(parents), rng)
            if builder == "random":
                new_spec[var] = _flat(table)
        elif parents:
            gaps = [float(mine.get(p, 0.0)) for p in parents]
            table = _mechanism([DEFAULT_GAP * c if abs(c) == 1 else c for c in gaps], rng)
        else:
            table = _source(mine, rng)
        if not parents and isinstance(old, list) != isinstance(table, list):
            table = [table] if isinstance(old, list) else table[0]
        params[key] = table
    return params, new_spec


# --- pairs of wordings, and the fresh dataset ----------------------------------------------------


def _pair_key(q: Mapping[str, Any]) -> str:
    meta = {k: v for k, v in q["meta"].items() if k not in ("polarity", "groundtruth")}
    return json.dumps([q["given_info"], meta], sort_keys=True, default=str)


@dataclass
class VariantsResult:
    questions: list[dict[str, Any]]
    models: list[dict[str, Any]]
    n_fresh: int
    n_originals: int
    skipped: Counter[str] = field(default_factory=Counter)
    same_answer: int = 0  # fresh questions whose answer is their original's


def _rng(seed: int, *parts: Any) -> random.Random:
    text = ":".join(str(p) for p in ("crawdad-variants", seed, *parts))
    return random.Random(hashlib.sha256(text.encode()).digest())


def _units(
    questions: list[dict[str, Any]], models: Mapping[str, dict[str, Any]], skipped: Counter[str]
) -> list[list[dict[str, Any]]]:
    """Groups of questions (a polarity pair, or a lone question) that render back exactly from
    their own model: only those are varied, so an original and its twin differ only in numbers."""
    built = {mid: BinaryModel.from_meta(raw) for mid, raw in models.items()}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        meta = q["meta"]
        qt, mid = str(meta["query_type"]), str(meta["model_id"])
        if qt in NO_NUMBERS:
            skipped[f"{qt}: shows no numbers"] += 1
            continue
        if models[mid].get("builder") not in BUILDERS:
            skipped[f"builder {models[mid].get('builder')!r}"] += 1
            continue
        try:
            again = render_question(q, built[mid])
        except (RenderError, ZeroDivisionError, KeyError, ValueError):
            skipped["cannot be rendered"] += 1
            continue
        if again["given_info"] != q["given_info"] or again["answer"] != q["answer"]:
            skipped["stored numbers or label not exact"] += 1
            continue
        groups[_pair_key(q)].append(q)
    return list(groups.values())


def _zero(unit: list[dict[str, Any]]) -> bool:
    """The originals' stored quantity is 0 (up to float noise) in every wording."""
    values = [q["meta"].get("groundtruth") for q in unit]
    return all(isinstance(v, int | float) and abs(v) < 1e-9 for v in values)


_FRESH_ID = re.compile(r"^fresh\d+-(.+)$")


def _fresh_id(seed: int, original: Any) -> str:
    return f"fresh{seed}-{original}"


def twin_of(question_id: Any) -> str | None:
    """The original's id of a fresh question ("fresh7-12" -> "12"); None for any other id."""
    m = _FRESH_ID.match(str(question_id))
    return m.group(1) if m else None


def _draw_unit(
    unit: list[dict[str, Any]], raw: dict[str, Any], seed: int, model_id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A fresh model for one group and its rendered questions; None if no draw in MAX_DRAWS
    gives every question a unique answer (and a pair opposite answers, as its originals)."""
    for attempt in range(MAX_DRAWS):
        rng = _rng(seed, model_id, attempt)
        params, spec = draw_params(raw, rng)
        fresh_raw = {k: v for k, v in raw.items() if k != "groundtruth"}
        fresh_raw.update(
            model_id=model_id,
            params=params,
            spec=spec,
            fresh={
                "generator": "crawdad data variants",
                "seed": seed,
                "variant_of": raw["model_id"],
            },
        )
        try:
            model = BinaryModel.from_meta(fresh_raw)
            rendered = [render_question(q, model) for q in unit]
        except (RenderError, ZeroDivisionError):
            continue
        if any(r["given_info"] == q["given_info"] for r, q in zip(rendered, unit, strict=True)):
            continue  # the new numbers round to the old ones: not a fresh question
        # a pair answers oppositely unless the graph makes its quantity 0 (X, Y independent)
        if len(unit) == 2 and (rendered[0]["answer"] == rendered[1]["answer"]) != _zero(unit):
            continue
        return fresh_raw, rendered
    return None


def make_variants(
    path: Path, seed: int = 0, n: int | None = None, originals: bool = True
) -> VariantsResult:
    """Fresh twins of up to `n` questions of the dataset at `path` (all eligible ones without n),
    with the originals they vary (unless `originals` is false), pair by pair."""
    load_cladder(path)  # validates every field the loader reads
    questions, model_list, _ = read_raw(path)
    models = {str(m["model_id"]): m for m in model_list}
    skipped: Counter[str] = Counter()
    units = _units(questions, models, skipped)
    _rng(seed, "order").shuffle(units)
    out_q: list[dict[str, Any]] = []
    out_models: dict[str, dict[str, Any]] = {}
    n_fresh = same = 0
    per_model: Counter[str] = Counter()
    for unit in units:
        if n is not None and n_fresh >= n:
            break
        mid = str(unit[0]["meta"]["model_id"])
        fresh_mid = f"fresh{seed}-{mid}-{per_model[mid]}"
        per_model[mid] += 1
        drawn = _draw_unit(unit, models[mid], seed, fresh_mid)
        if drawn is None:
            skipped["no draw with a unique answer"] += len(unit)
            continue
        fresh_raw, rendered = drawn
        if n is not None:  # the last pair may be cut to reach n exactly
            keep = n - n_fresh
            unit, rendered = unit[:keep], rendered[:keep]
        out_models[fresh_mid] = fresh_raw
        if originals:
            out_models[mid] = models[mid]
            for q in unit:
                marked = copy.deepcopy(q)
                marked["meta"]["variant"] = "original"
                out_q.append(marked)
        for q, r in zip(unit, rendered, strict=True):
            r["question_id"] = _fresh_id(seed, q["question_id"])
            if r.get("desc_id"):
                r["desc_id"] = f"{r['desc_id']}-fresh{seed}"
            r["meta"].update(model_id=fresh_mid, variant="fresh", variant_of=q["question_id"])
            same += r["answer"] == q["answer"]
            out_q.append(r)
            n_fresh += 1
    if not n_fresh:
        raise DataError(
            f"{path}: no question could be varied ({dict(skipped) or 'no questions'}); fresh "
            "questions need CLadder questions that show numbers, from models of the "
            f"{' or '.join(BUILDERS)} builder"
        )
    return VariantsResult(
        questions=out_q,
        models=list(out_models.values()),
        n_fresh=n_fresh,
        n_originals=n_fresh if originals else 0,
        skipped=skipped,
        same_answer=same,
    )


def write_variants(result: VariantsResult, out: Path, source: Path, seed: int) -> Path:
    """The CLadder folder: a questions file, a meta-models file and VARIANTS.md."""
    out.mkdir(parents=True, exist_ok=True)
    clash = [p.name for p in out.glob("*.json") if p.name not in (QUESTIONS_FILE, MODELS_FILE)]
    if clash:
        raise CrawdadError(
            f"{out} already holds other JSON files ({', '.join(sorted(clash))}); the loader would "
            "not know which questions file to read: choose an empty folder"
        )
    write_file(out, QUESTIONS_FILE, json.dumps(result.questions, indent=1, ensure_ascii=False))
    write_file(out, MODELS_FILE, json.dumps(result.models, indent=1, ensure_ascii=False))
    answers = Counter(q["answer"] for q in result.questions if q["meta"].get("variant") == "fresh")
    lines = [
        "# Fresh CLadder questions (crawdad data variants)",
        "",
        f"From `{source}`, seed {seed}: {result.n_fresh} fresh questions "
        f"({answers['yes']} yes, {answers['no']} no), {result.n_originals} originals beside them.",
        f"Fresh answers equal to their original's: {result.same_answer} of {result.n_fresh} "
        "(the spec of a 'difficulty' model fixes the direction of most effects).",
        "",
        'Fresh questions have `meta.variant = "fresh"` and `meta.variant_of` (the original\'s id); '
        "their models carry `fresh` in the meta-models file.",
    ]
    if result.skipped:
        lines += ["", "Questions not varied:", ""]
        lines += [f"- {why}: {k}" for why, k in sorted(result.skipped.items())]
    write_file(out, "VARIANTS.md", "\n".join(lines) + "\n")
    return out
