"""Self-consistency curves, and debates compared with them at equal token cost. Pure functions
of the frames `analysis.experiment_folder` builds (QUESTION_COLUMNS, SAMPLE_COLUMNS).

The self-consistency accuracy at k is, per question, the expected correctness of the majority of
k samples drawn without replacement from the agent's K: every subset when there are at most
MAX_SUBSETS, else MAX_SUBSETS random subsets with a fixed seed. Votes follow
`crawdad.protocols.base.majority`: unextracted answers do not vote, a tie goes to the larger
summed confidence, an exact tie is a null answer (wrong). Its cost is k times the agent's mean
completion tokens per sample (the sample's extraction included).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from crawdad.analysis.metrics._stats import SEED, paired_mean_difference, wilson_proportion

__all__ = [
    "DEBATE_PROTOCOLS",
    "MATCH_COLUMNS",
    "MAX_SUBSETS",
    "Curve",
    "cost_match",
    "curve_frame",
    "sc_curves",
    "vote_accuracy",
]

MAX_SUBSETS = 1000
DEBATE_PROTOCOLS = ("crawdad", "judge", "simultaneous")


# --- self-consistency curves --------------------------------------------------------------------


def _subsets(K: int, k: int, max_subsets: int, seed: int) -> tuple[np.ndarray, bool]:
    """(subsets as an S x k array of sample indices in ascending order, exact?)."""
    if math.comb(K, k) <= max_subsets:
        return np.array(list(itertools.combinations(range(K), k)), dtype=np.int64), True
    rng = np.random.default_rng([seed, K, k])
    draws = np.argsort(rng.random((max_subsets, K)), axis=1)[:, :k]
    return np.sort(draws, axis=1), False


def vote_accuracy(
    answers: np.ndarray, confidence: np.ndarray, gold: np.ndarray, subsets: np.ndarray
) -> np.ndarray:
    """Per question, the share of `subsets` whose majority vote is `gold`.

    answers: Q x K of +1 (yes), -1 (no), 0 (not extracted); confidence: Q x K (0 where None);
    gold: Q of +1 / -1; subsets: S x k sample indices, ascending (the order crawdad sums in).
    """
    Q = answers.shape[0]
    S, k = subsets.shape
    out = np.empty(Q)
    step = max(1, 2_000_000 // max(S * k, 1))
    for start in range(0, Q, step):
        a = answers[start : start + step][:, subsets]  # q x S x k
        c = confidence[start : start + step][:, subsets]
        yes, no = (a == 1).sum(-1), (a == -1).sum(-1)
        # Summed left to right, as Python's sum() over the turns does, so exact ties match.
        sy = np.zeros(yes.shape)
        sn = np.zeros(yes.shape)
        for j in range(k):
            sy = sy + np.where(a[..., j] == 1, c[..., j], 0.0)
            sn = sn + np.where(a[..., j] == -1, c[..., j], 0.0)
        tie = np.where(sy > sn, 1, np.where(sn > sy, -1, 0))
        winner = np.where(yes > no, 1, np.where(no > yes, -1, tie))
        out[start : start + step] = (winner == gold[start : start + step, None]).mean(axis=1)
    return out


@dataclass
class Curve:
    """Self-consistency of one agent of a solo variant: accuracy of a k-sample majority."""

    variant: str
    agent: str  # display label
    model: str
    K: int
    sample_tokens: float  # mean completion tokens of one sample (its extraction included)
    qids: list[str]
    p: np.ndarray  # Q x K: expected correctness of question q for k = 1..K
    exact: list[bool]  # per k: every subset enumerated?

    @property
    def acc(self) -> np.ndarray:
        return self.p.mean(axis=0)

    def tokens(self, k: float) -> float:
        return k * self.sample_tokens

    def at(self, tokens: float) -> tuple[float, np.ndarray, str]:
        """(k at this cost, per-question expected correctness there, where): where is "within"
        the curve, "beyond" it (costlier than k = K: k = K is used) or "below" it (cheaper than
        one sample: k = 1 is used). Linear between the integer k."""
        k = tokens / self.sample_tokens if self.sample_tokens > 0 else float("inf")
        if k > self.K + 1e-9:
            return k, self.p[:, self.K - 1], "beyond"
        if k < 1 - 1e-9:
            return k, self.p[:, 0], "below"
        k = min(max(k, 1.0), float(self.K))
        lo = math.floor(k)
        hi = min(lo + 1, self.K)
        w = k - lo
        return k, (1 - w) * self.p[:, lo - 1] + w * self.p[:, hi - 1], "within"


def sc_curves(
    samples: pd.DataFrame,
    gold: pd.Series,
    keep: set[str],
    *,
    max_subsets: int = MAX_SUBSETS,
    seed: int = SEED,
) -> list[Curve]:
    """One curve per (solo variant, agent) with K >= 2 samples, over the questions `keep`.
    gold: question id -> "yes"/"no"."""
    curves = []
    s = samples[samples["question_id"].isin(keep)]
    for (variant, agent), g in s.groupby(["variant", "agent"], sort=False):
        g = g.sort_values(["question_id", "sample"])
        counts = g.groupby("question_id").size()
        K = int(counts.min())
        if K < 2:
            continue
        g = g.groupby("question_id", sort=False).head(K)  # the first K, should some have more
        qids = list(dict.fromkeys(g["question_id"]))
        ans = g["answer"].map({"yes": 1, "no": -1}).fillna(0).to_numpy(np.int8).reshape(-1, K)
        conf = g["confidence"].fillna(0.0).to_numpy(float).reshape(-1, K)
        gv = gold.loc[qids].map({"yes": 1, "no": -1}).to_numpy(np.int8)
        p = np.empty((len(qids), K))
        exact = []
        for k in range(1, K + 1):
            subsets, is_exact = _subsets(K, k, max_subsets, seed)
            p[:, k - 1] = vote_accuracy(ans, conf, gv, subsets)
            exact.append(is_exact)
        curves.append(
            Curve(
                variant=str(variant),
                agent=str(agent),
                model=str(g["model"].iloc[0]),
                K=K,
                sample_tokens=float(g["tokens"].mean()),
                qids=qids,
                p=p,
                exact=exact,
            )
        )
    return curves


def curve_frame(curves: Sequence[Curve]) -> pd.DataFrame:
    rows = [
        {
            "variant": c.variant,
            "agent": c.agent,
            "model": c.model,
            "k": k,
            "tokens": c.tokens(k),
            "acc": float(c.acc[k - 1]),
            "n": len(c.qids),
            "exact": c.exact[k - 1],
        }
        for c in curves
        for k in range(1, c.K + 1)
    ]
    return pd.DataFrame(
        rows, columns=["variant", "agent", "model", "k", "tokens", "acc", "n", "exact"]
    )


# --- debates against self-consistency at equal cost -----------------------------------------------


MATCH_COLUMNS = [
    "variant",
    "protocol",
    "n",
    "tokens",
    "acc",
    "ci_lo",
    "ci_hi",
    "curve_variant",
    "curve_agent",
    "curve_model",
    "curve_K",
    "sample_tokens",
    "chosen_as",
    "k",
    "where",
    "sc_acc",
    "diff",
    "diff_lo",
    "diff_hi",
]


def _candidates(curves: Sequence[Curve], first_models: set[str]) -> tuple[list[Curve], str]:
    if len(first_models) == 1:
        same = [c for c in curves if c.model in first_models]
        if same:
            return same, "same model"
    return list(curves), "best"


def cost_match(
    q: pd.DataFrame, protocols: dict[str, str], curves: Sequence[Curve], keep: set[str]
) -> pd.DataFrame:
    """Each debate variant against self-consistency at its own token cost, on `keep`: the curve
    of the model that gave the debate's first answers when there is one such model with a
    curve ("same model"), else the curve best at that cost ("best"). diff = debate accuracy
    minus the self-consistency accuracy there, with Newcombe's square-and-add interval of the
    paired per-question values (Wilson intervals of both, their correlation)."""
    rows = []
    for v, kind in protocols.items():
        if kind not in DEBATE_PROTOCOLS:
            continue
        mine = q[(q["variant"] == v) & q["question_id"].isin(keep)].set_index("question_id")
        if mine.empty:
            continue
        n, k_correct = len(mine), int(mine["correct"].sum())
        lo, hi = wilson_proportion(k_correct, n)
        row: dict[str, object] = {
            "variant": v,
            "protocol": kind,
            "n": n,
            "tokens": float(mine["tokens"].mean()),
            "acc": k_correct / n,
            "ci_lo": lo,
            "ci_hi": hi,
        }
        first = {m for s in mine["first_models"] for m in s.split(",") if m}
        cands, chosen_as = _candidates(curves, first)
        best: tuple[float, Curve, float, np.ndarray, np.ndarray, str] | None = None
        for c in cands:
            qids = [x for x in c.qids if x in mine.index]
            if not qids:
                continue
            k, p, where = c.at(float(mine.loc[qids, "tokens"].mean()))
            pos = {x: i for i, x in enumerate(c.qids)}
            p = p[[pos[x] for x in qids]]
            debate = mine.loc[qids, "correct"].to_numpy(float)
            if best is None or p.mean() > best[0]:
                best = (float(p.mean()), c, k, debate, p, where)
        if best is not None:
            sc_acc, c, k, debate, p, where = best
            diff = debate - p
            dlo, dhi = paired_mean_difference(debate, p)
            row |= {
                "curve_variant": c.variant,
                "curve_agent": c.agent,
                "curve_model": c.model,
                "curve_K": c.K,
                "sample_tokens": c.sample_tokens,
                "chosen_as": chosen_as,
                "k": k,
                "where": where,
                "sc_acc": sc_acc,
                "diff": float(diff.mean()),
                "diff_lo": dlo,
                "diff_hi": dhi,
            }
        rows.append(row)
    return pd.DataFrame(rows, columns=MATCH_COLUMNS)
