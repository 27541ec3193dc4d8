"""Benchmark: stopping a paired comparison when it is decided (no servers; simulated outcomes).

    .venv/bin/python benchmarks/bench_stopping.py [--experiments 1000] [--quick] [--n 10112]
        [--discordant 0.2] [--margin 0.03] [--alpha 0.05] [--min-questions 50] [--seed 0]

Each simulated experiment is a finite population of `n` paired outcomes (variant, baseline) with
a known difference: a share `discordant` of the pairs disagree, (discordant + effect) / 2 of them
in the variant's favour, so the full run's difference is exactly `effect` (up to rounding to
whole questions); the baseline is right on 60% of the agreeing pairs. The questions come in a
uniformly random order; the variant's difference sequence (`crawdad.stopping`, computed in
blocks as a run would feed it) is checked with `decide` after each block of questions, and the
experiment stops at the first decision. Printed per effect size: the share of experiments
decided better / worse / equivalent / undecided, the rate of wrong better-or-worse decisions
(a sign opposite to the full run's, or any sign when the full run's difference is 0: this must
stay under alpha), the rate of equivalence called where the full run's difference is beyond the
margin, and the mean and 90th-percentile share of questions used. Also the time to compute one
full 10,112-step accuracy sequence.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawdad.stopping.decide import Rule, corrected_alpha, decide
from crawdad.stopping.sequences import ConfidenceSequence, accuracy_sequence, to_unit

EFFECTS = (0.0, 0.02, -0.02, 0.05, -0.05, 0.10, -0.10)
STEP = 128  # questions between two looks at the sequence


@dataclass
class Result:
    outcome: str
    questions: int
    full_diff: float


def population(
    n: int, effect: float, discordant: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n pairs (variant, baseline) of 0/1 outcomes in a uniformly random order, with exactly
    round(n (discordant + effect) / 2) pairs only the variant gets right and round(n
    (discordant - effect) / 2) only the baseline does."""
    only_v = round(n * (discordant + effect) / 2)
    only_b = round(n * (discordant - effect) / 2)
    if only_v < 0 or only_b < 0:
        raise SystemExit(f"effect {effect} needs at least {abs(effect)} discordant pairs")
    agree = n - only_v - only_b
    both = round(agree * 0.6)
    v = np.concatenate([np.ones(only_v), np.zeros(only_b), np.ones(both), np.zeros(agree - both)])
    b = np.concatenate([np.zeros(only_v), np.ones(only_b), np.ones(both), np.zeros(agree - both)])
    order = rng.permutation(n)
    return v[order], b[order]


def one_experiment(v: np.ndarray, b: np.ndarray, rule: Rule, *, infinite: bool = False) -> Result:
    """Feed the pairs to a difference sequence a block at a time; stop at the first decision.
    `infinite`: pretend the population is endless (the sequence of sampling with replacement),
    to see what accounting for the finite population buys."""
    n = len(v)
    level = corrected_alpha(rule)
    cs = ConfidenceSequence(10**12 if infinite else n, level)
    unit = to_unit(v, b)
    full_diff = float(v.mean() - b.mean())
    for start in range(0, n, STEP):
        stop = min(n, start + STEP)
        lower, upper = cs.extend(unit[start:stop])
        q = np.arange(start + 1, stop + 1)
        d = np.cumsum(v[:stop] - b[:stop])[start:] / q
        frame = pd.DataFrame(
            {"questions": q, "estimate": d, "lower": 2 * lower - 1, "upper": 2 * upper - 1}
        )
        frame.attrs.update({"alpha": level, "kind": "difference"})
        decision = decide(frame, rule)
        if decision.decided:
            return Result(decision.outcome, decision.questions, full_diff)
    return Result("undecided", n, full_diff)


def summarise(effect: float, results: list[Result], n: int, margin: float) -> dict[str, object]:
    out = np.array([r.outcome for r in results])
    full = np.array([r.full_diff for r in results])
    used = np.array([r.questions for r in results]) / n
    signed = np.isin(out, ["better", "worse"])
    wrong_sign = signed & (
        (full == 0) | ((out == "better") & (full < 0)) | ((out == "worse") & (full > 0))
    )
    disagree = (
        ((out == "better") & (full <= 0))
        | ((out == "worse") & (full >= 0))
        | ((out == "equivalent") & (np.abs(full) > margin))
    )
    return {
        "effect (points)": f"{100 * effect:+.0f}",
        "better": f"{(out == 'better').mean():.3f}",
        "worse": f"{(out == 'worse').mean():.3f}",
        "equivalent": f"{(out == 'equivalent').mean():.3f}",
        "undecided": f"{(out == 'undecided').mean():.3f}",
        "wrong better/worse": f"{wrong_sign.mean():.4f}",
        "disagrees with full run": f"{disagree.mean():.4f}",
        "mean share used": f"{used.mean():.3f}",
        "p90 share used": f"{np.quantile(used, 0.9):.3f}",
    }


def markdown(rows: list[dict[str, object]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--experiments", type=int, default=1000, help="simulated experiments per effect"
    )
    ap.add_argument("--quick", action="store_true", help="200 experiments per effect")
    ap.add_argument("--n", type=int, default=10_112, help="questions (the finite population)")
    ap.add_argument("--discordant", type=float, default=0.20, help="share of discordant pairs")
    ap.add_argument("--margin", type=float, default=0.03, help="equivalence margin (absolute)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--min-questions", type=int, default=50)
    ap.add_argument("--effects", type=float, nargs="*", default=list(EFFECTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--ignore-population",
        action="store_true",
        help="treat the questions as an endless population (no finite-population adjustment)",
    )
    args = ap.parse_args(argv)
    runs = 200 if args.quick else args.experiments
    rule = Rule(alpha=args.alpha, margin=args.margin, min_questions=args.min_questions)

    x = (np.random.default_rng(args.seed).random(args.n) < 0.7).astype(float)
    t0 = time.perf_counter()
    accuracy_sequence(x, args.n, args.alpha)
    one_s = time.perf_counter() - t0
    print(f"accuracy_sequence over {args.n:,} steps: {one_s:.3f} s")
    print(
        f"{runs} experiments per effect, {args.n:,} questions, {100 * args.discordant:.0f}% "
        f"discordant, margin {100 * args.margin:g} points, alpha {args.alpha}, "
        f"min_questions {args.min_questions}, a look every {STEP} questions"
        + (", population treated as endless" if args.ignore_population else "")
        + "\n"
    )
    rows = []
    t0 = time.perf_counter()
    for effect in args.effects:
        rng = np.random.default_rng([args.seed, round(1000 * effect) + 1000])
        results = [
            one_experiment(
                *population(args.n, effect, args.discordant, rng),
                rule,
                infinite=args.ignore_population,
            )
            for _ in range(runs)
        ]
        rows.append(summarise(effect, results, args.n, args.margin))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    print(f"\n{time.perf_counter() - t0:.0f} s for {runs * len(args.effects)} experiments")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
