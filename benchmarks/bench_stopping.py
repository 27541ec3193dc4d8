"""Benchmark: stopping a paired comparison when it is decided (no servers; simulated outcomes),
for both targets a rule may name.

    .venv/bin/python benchmarks/bench_stopping.py [--experiments 1000] [--quick] [--n 10112]
        [--discordant 0.2] [--margin 0.03] [--alpha 0.05] [--min-questions 50] [--seed 0]
        [--targets models run]

Each simulated experiment draws `n` paired outcomes (variant, baseline) i.i.d. from the models:
a pair is discordant with probability `discordant`, in the variant's favour with probability
(discordant + effect) / 2, so the models' expected difference is exactly `effect`; the baseline
is right on 60% of the agreeing pairs. The full run's difference (what a full pass over these n
questions reports) varies around it. The questions come in a uniformly random order; the
variant's difference sequence (`crawdad.stopping`, computed in blocks as a run would feed it,
about the rule's target: `models`, the i.i.d. sequence, or `run`, the finite population) is
checked with `decide` after each block of questions, and the experiment stops at its first
decision. Printed per target and effect size: the share decided better / worse / equivalent /
undecided; the rate of wrong calls judged against the full run's difference (a better or worse
of the wrong sign, or any sign when it is 0; equivalence beyond the margin) and judged against
the models' expected difference (the same against `effect`): each target must keep its own
under alpha; and the mean and 90th-percentile share of questions used. Also the time to compute
one full accuracy sequence of each target.
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
    """n pairs (variant, baseline) of 0/1 outcomes drawn i.i.d.: only the variant right with
    probability (discordant + effect) / 2, only the baseline (discordant - effect) / 2, both
    right 60% of the rest. Their order is random already."""
    p_v = (discordant + effect) / 2
    p_b = (discordant - effect) / 2
    if p_v < 0 or p_b < 0:
        raise SystemExit(f"effect {effect} needs at least {abs(effect)} discordant pairs")
    u = rng.random(n)
    only_v = u < p_v
    only_b = (u >= p_v) & (u < p_v + p_b)
    both = (u >= p_v + p_b) & (rng.random(n) < 0.6)
    v = (only_v | both).astype(float)
    b = (only_b | both).astype(float)
    return v, b


def one_experiment(v: np.ndarray, b: np.ndarray, rule: Rule) -> Result:
    """Feed the pairs to a difference sequence about the rule's target a block at a time; stop
    at the first decision."""
    n = len(v)
    level = corrected_alpha(rule)
    cs = ConfidenceSequence(None if rule.target == "models" else n, level)
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
        frame.attrs.update({"alpha": level, "kind": "difference", "target": rule.target})
        decision = decide(frame, rule)
        if decision.decided:
            return Result(decision.outcome, decision.questions, full_diff)
    return Result("undecided", n, full_diff)


def wrong(out: np.ndarray, truth: np.ndarray, margin: float) -> np.ndarray:
    """Calls the truth contradicts: better or worse of the wrong sign (any sign at 0), and
    equivalent beyond the margin."""
    return (
        ((out == "better") & (truth <= 0))
        | ((out == "worse") & (truth >= 0))
        | ((out == "equivalent") & (np.abs(truth) > margin))
    )


def summarise(
    target: str, effect: float, results: list[Result], n: int, margin: float
) -> dict[str, object]:
    out = np.array([r.outcome for r in results])
    full = np.array([r.full_diff for r in results])
    used = np.array([r.questions for r in results]) / n
    return {
        "target": target,
        "effect (points)": f"{100 * effect:+.0f}",
        "better": f"{(out == 'better').mean():.3f}",
        "worse": f"{(out == 'worse').mean():.3f}",
        "equivalent": f"{(out == 'equivalent').mean():.3f}",
        "undecided": f"{(out == 'undecided').mean():.3f}",
        "wrong vs full run": f"{wrong(out, full, margin).mean():.4f}",
        "wrong vs expected": f"{wrong(out, np.full(len(out), effect), margin).mean():.4f}",
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
    ap.add_argument("--targets", nargs="*", default=["models", "run"], choices=["models", "run"])
    args = ap.parse_args(argv)
    runs = 200 if args.quick else args.experiments

    x = (np.random.default_rng(args.seed).random(args.n) < 0.7).astype(float)
    for target in args.targets:
        t0 = time.perf_counter()
        accuracy_sequence(x, args.n if target == "run" else None, args.alpha)
        print(
            f"accuracy_sequence over {args.n:,} steps, target {target}: "
            f"{time.perf_counter() - t0:.3f} s"
        )
    print(
        f"{runs} experiments per target and effect, {args.n:,} questions, "
        f"{100 * args.discordant:.0f}% discordant, margin {100 * args.margin:g} points, alpha "
        f"{args.alpha}, min_questions {args.min_questions}, a look every {STEP} questions\n"
    )
    rows = []
    t0 = time.perf_counter()
    for target in args.targets:
        rule = Rule(
            target=target, alpha=args.alpha, margin=args.margin, min_questions=args.min_questions
        )
        for effect in args.effects:
            # the same experiments for both targets
            rng = np.random.default_rng([args.seed, round(1000 * effect) + 1000])
            results = [
                one_experiment(*population(args.n, effect, args.discordant, rng), rule)
                for _ in range(runs)
            ]
            rows.append(summarise(target, effect, results, args.n, args.margin))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    total = runs * len(args.effects) * len(args.targets)
    print(f"\n{time.perf_counter() - t0:.0f} s for {total} experiments")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
