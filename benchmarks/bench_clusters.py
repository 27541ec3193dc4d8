"""Benchmark: what a decision about one pool of questions says about a wider population, when
the questions come in clusters (no servers; simulated outcomes).

    .venv/bin/python benchmarks/bench_clusters.py [--experiments 400] [--clusters 40]
        [--size 50] [--spread 0.10] [--discordant 0.3] [--seed 0]

CLadder's questions come in clusters: a story, its causal graph, and the queries asked of it.
Each simulated experiment draws a pool of `clusters` clusters of `size` questions from a wider
population of clusters in which the variant and the baseline are exactly as good (an expected
difference of 0). Within a cluster a pair is discordant with probability `discordant`, in the
variant's favour with probability (discordant + d) / 2, where the cluster's own difference d is
+spread or -spread with equal chance ("clusters differing by 10 points" at spread 0.10). The
pool's questions come in a random order, and crawdad's rule (`crawdad.run.scheduler.
variant_decision`, the default target: the models, one comparison, alpha 5%) runs over the whole
pool, stopping at its first decision; a fixed-sample 95% test (paired, normal approximation) is
computed on the full pass. Printed: how often each calls a difference (better or worse) that the
wider population does not have, with clusters and, as a control, with none (spread 0). The
first is about the pool, correctly; read as a claim about the wider population, it is wrong.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawdad.run.scheduler import variant_decision
from crawdad.stopping.decide import Rule


def pool(
    clusters: int, size: int, spread: float, discordant: float, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """One pool's paired outcomes (variant, baseline), in a random order."""
    d = rng.choice([-spread, spread], size=clusters).repeat(size)
    u = rng.random(clusters * size)
    only_v = u < (discordant + d) / 2
    only_b = (u >= (discordant + d) / 2) & (u < discordant)
    both = (u >= discordant) & (rng.random(clusters * size) < 0.6)
    a = (only_v | both).astype(int)
    b = (only_b | both).astype(int)
    order = rng.permutation(clusters * size)
    return a[order].tolist(), b[order].tolist()


def fixed_sample_calls(a: list[int], b: list[int]) -> bool:
    """A 95% paired test on the full pass (McNemar's normal form): a difference called?"""
    x, y = np.asarray(a), np.asarray(b)
    only_v, only_b = int(((x == 1) & (y == 0)).sum()), int(((x == 0) & (y == 1)).sum())
    if only_v + only_b == 0:
        return False
    return abs(only_v - only_b) / math.sqrt(only_v + only_b) > 1.959964


def run(args: argparse.Namespace, spread: float) -> tuple[float, float]:
    rng = np.random.default_rng(args.seed)
    rule = Rule()
    n = args.clusters * args.size
    crawdad_calls = fixed_calls = 0
    for _ in range(args.experiments):
        a, b = pool(args.clusters, args.size, spread, args.discordant, rng)
        _, decision = variant_decision(a, b, [n] * n, rule, 1)
        crawdad_calls += decision.outcome in ("better", "worse")
        fixed_calls += fixed_sample_calls(a, b)
    return crawdad_calls / args.experiments, fixed_calls / args.experiments


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--experiments", type=int, default=400)
    p.add_argument("--clusters", type=int, default=40)
    p.add_argument("--size", type=int, default=50)
    p.add_argument("--spread", type=float, default=0.10)
    p.add_argument("--discordant", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    n = args.clusters * args.size
    print(
        f"{args.experiments} pools of {args.clusters} clusters x {args.size} questions ({n:,}), "
        f"{100 * args.discordant:.0f}% discordant pairs, wider population's difference 0"
    )
    print(f"{'clusters differ by':>20} {'crawdad rule':>14} {'fixed 95% test':>16} {'s':>6}")
    for spread in (args.spread, 0.0):
        start = time.perf_counter()
        crawdad_rate, fixed_rate = run(args, spread)
        took = time.perf_counter() - start
        label = f"+-{100 * spread:.0f} points" if spread else "none (control)"
        print(f"{label:>20} {100 * crawdad_rate:>13.1f}% {100 * fixed_rate:>15.1f}% {took:>6.0f}")
    print(
        "A call here is right about the pool (its questions differ) and wrong about the wider "
        "population of clusters (they do not)."
    )


if __name__ == "__main__":
    main()
