"""Benchmark: how often the stopping rule decides a paired comparison rightly, wrongly, or not at
all, and on what share of the questions (no servers; simulated outcomes), before and after
issue 52: the confidence sequence's edges (`method="cs"`) against the sequential tests by
betting (`method="test"`, the default), both about the models (the default target).

    .venv/bin/python benchmarks/bench_stopping.py [--experiments 1000] [--quick]
        [--sizes 360 2000 10112] [--discordant 0.1 0.2 0.3] [--effects 0 0.03 -0.03 0.05 -0.05]
        [--margin 0.03] [--alpha 0.05] [--min-questions 50] [--seed 0]

Each simulated experiment draws `n` paired outcomes (variant, baseline) i.i.d. from the models: a
pair is discordant with probability `discordant`, in the variant's favour with probability
(discordant + effect) / 2, so the models' expected difference is exactly `effect`; the baseline
is right on 60% of the agreeing pairs. The pool is the n questions (`pool=n`: what the tests'
bets are tuned to). The rule looks after every question, as the run does after every settled
one. Every decision is `crawdad.stopping.decide.many_decisions`, the vectorised `decision` (tested
equal to it), over all the experiments of a row at once, and the same experiments serve both
methods.

Printed per size, discordance and effect: the share decided right (better at a positive effect,
worse at a negative one; at 0, any better or worse is a wrong call, which each method must keep
under alpha), the wrong calls (a better or worse of the wrong sign, or any at 0; equivalent
beyond the margin), and the mean share of the questions used (an undecided experiment uses them
all).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawdad.stopping.decide import Rule, many_decisions

EFFECTS = (0.0, 0.03, -0.03, 0.05, -0.05)
SIZES = (360, 2000, 10_112)
DISCORDANT = (0.10, 0.20, 0.30)
CHUNK = 250  # experiments per numpy pass (memory: CHUNK x n x a few float arrays)


def population(
    rows: int, n: int, effect: float, discordant: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """rows x n pairs (variant, baseline) of 0/1 outcomes drawn i.i.d.: only the variant right
    with probability (discordant + effect) / 2, only the baseline (discordant - effect) / 2, both
    right 60% of the rest. Their order is random already."""
    p_v = (discordant + effect) / 2
    p_b = (discordant - effect) / 2
    if p_v < 0 or p_b < 0:
        raise SystemExit(f"effect {effect} needs at least {abs(effect)} discordant pairs")
    u = rng.random((rows, n))
    only_v = u < p_v
    only_b = (u >= p_v) & (u < p_v + p_b)
    both = (u >= p_v + p_b) & (rng.random((rows, n)) < 0.6)
    return (only_v | both).astype(np.float64), (only_b | both).astype(np.float64)


def wrong(out: np.ndarray, effect: float, margin: float) -> np.ndarray:
    """Calls the models' expected difference contradicts: better or worse of the wrong sign (any
    sign at 0), and equivalent beyond the margin."""
    return (
        ((out == "better") & (effect <= 0))
        | ((out == "worse") & (effect >= 0))
        | ((out == "equivalent") & (abs(effect) > margin))
    )


def right(out: np.ndarray, effect: float) -> np.ndarray:
    """The call a method should make: better above 0, worse below (none at 0)."""
    if effect > 0:
        return out == "better"
    if effect < 0:
        return out == "worse"
    return np.zeros(len(out), dtype=bool)


def simulate(
    args: argparse.Namespace, runs: int, n: int, discordant: float, effect: float
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each method's outcomes and questions used over the same `runs` experiments."""
    rng = np.random.default_rng(
        [args.seed, n, round(100 * discordant), round(1000 * effect) + 1000]
    )
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"cs": [], "test": []}
    for start in range(0, runs, CHUNK):
        a, b = population(min(CHUNK, runs - start), n, effect, discordant, rng)
        for method in found:
            rule = Rule(
                method=method,
                alpha=args.alpha,
                margin=args.margin,
                min_questions=args.min_questions,
            )
            found[method].append(many_decisions(a, b, rule, pool=n))
    return {
        m: (np.concatenate([o for o, _ in parts]), np.concatenate([q for _, q in parts]))
        for m, parts in found.items()
    }


def markdown(rows: list[dict[str, object]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=1000, help="experiments per row")
    ap.add_argument("--quick", action="store_true", help="200 experiments per row")
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="questions (pool)")
    ap.add_argument("--discordant", type=float, nargs="*", default=list(DISCORDANT))
    ap.add_argument("--effects", type=float, nargs="*", default=list(EFFECTS))
    ap.add_argument("--margin", type=float, default=0.03, help="equivalence margin (absolute)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--min-questions", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    runs = 200 if args.quick else args.experiments
    print(
        f"{runs} experiments per row, the models' target, margin {100 * args.margin:g} points, "
        f"alpha {args.alpha}, min_questions {args.min_questions}, a look after every question; "
        "before: the sequence's edges (method cs), after: the tests (method test)\n"
    )
    rows = []
    t0 = time.perf_counter()
    for n in args.sizes:
        for discordant in args.discordant:
            for effect in args.effects:
                if abs(effect) > discordant:
                    continue
                found = simulate(args, runs, n, discordant, effect)
                row: dict[str, object] = {
                    "questions": f"{n:,}",
                    "discordant": f"{100 * discordant:.0f}%",
                    "effect": f"{100 * effect:+.0f}",
                }
                for method, label in (("cs", "before"), ("test", "after")):
                    out, used = found[method]
                    row[f"right {label}"] = f"{right(out, effect).mean():.3f}" if effect else "-"
                    row[f"wrong {label}"] = f"{wrong(out, effect, args.margin).mean():.3f}"
                    row[f"used {label}"] = f"{(used / n).mean():.2f}"
                rows.append(row)
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    print(f"\n{time.perf_counter() - t0:.0f} s for {len(rows)} rows of {runs} experiments each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
