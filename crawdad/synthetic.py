"""Small CLadder-format datasets written by crawdad itself, for the demo, tests and benchmarks.

The questions follow CLadder's schema and its prompt layout (a causal model's background, the
given information, the question), with answers computed from the stated probabilities. They are
not CLadder: use them to try crawdad, never to report results.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# (story_id, treatment, outcome, confounder), with the phrases the question texts use.
STORIES = [
    ("smoking", ("smoking", "nonsmoking"), ("lung cancer", "no lung cancer"), "gene"),
    ("vaccine", ("vaccination", "no vaccination"), ("recovery", "no recovery"), "age"),
    ("coffee", ("coffee drinking", "no coffee"), ("high exam score", "low exam score"), "sleep"),
    ("sprinkler", ("sprinkler on", "sprinkler off"), ("wet grass", "dry grass"), "season"),
]
ANTI = [("smoking", ("smoking", "nonsmoking"), ("ear shape", "round ears"), "gene")]
NONSENSE = [
    ("nonsense1", ("zory", "no zory"), ("gwet", "no gwet"), "kwox"),
    ("nonsense4", ("jyka", "no jyka"), ("lirp", "no lirp"), "xevo"),
]

QUERIES = [(1, "marginal"), (1, "correlation"), (2, "ate"), (2, "backadj"), (3, "ett"), (3, "nie")]


def _pct(p: float) -> str:
    return f"{round(p * 100)}%"


def _question(
    kind: str, x: tuple[str, str], y: tuple[str, str], z: str, rng: random.Random
) -> tuple[str, str, str]:
    """(given_info, question, answer) for one query type; the answer follows from the numbers."""
    px, a, b = rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)
    while abs(a - b) < 0.05:
        b = rng.uniform(0.05, 0.95)
    info = f"For those with {x[1]}, the probability of {y[0]} is {_pct(b)}. For those with {x[0]}, the probability of {y[0]} is {_pct(a)}."
    if kind == "marginal":
        py = px * a + (1 - px) * b
        given = f"The overall probability of {x[0]} is {_pct(px)}. " + info
        return given, f"Is {y[0]} more likely than {y[1]} overall?", "yes" if py > 0.5 else "no"
    if kind == "correlation":
        return (
            info,
            f"Is the chance of {y[0]} larger when observing {x[0]}?",
            "yes" if a > b else "no",
        )
    if kind == "ate":
        return info, f"Will {x[0]} increase the chance of {y[0]}?", "yes" if a > b else "no"
    if kind == "backadj":
        given = (
            f"Method 1: We look at how {x[0]} correlates with {y[0]} case by case according to {z}. "
            f"Method 2: We look directly at how {x[0]} correlates with {y[0]} in general."
        )
        return (
            given,
            f"To understand how {x[0]} affects {y[0]}, is it more correct to use the Method 1 than Method 2?",
            "yes",
        )
    if kind == "ett":
        return (
            info,
            f"For those with {x[0]}, would it be more likely to see {y[0]} if they had {x[1]}?",
            "yes" if b > a else "no",
        )
    return info, f"Does {x[0]} affect {y[0]} through {z}?", "yes" if abs(a - b) > 0.3 else "no"


def make_cladder(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """n questions and their causal models, in CLadder's published format."""
    rng = random.Random(f"synthetic:{seed}")
    variants = (
        [(s, "commonsense") for s in STORIES]
        + [(s, "anticommonsense") for s in ANTI]
        + [(s, "nonsense") for s in NONSENSE]
    )
    questions: list[dict[str, Any]] = []
    models: list[dict[str, Any]] = []
    for i in range(n):
        (story, x, y, z), alignment = variants[i % len(variants)]
        rung, kind = QUERIES[(i // len(variants)) % len(QUERIES)]
        model_id = len(models)
        background = (
            "Imagine a self-contained, hypothetical world with only the following conditions, and "
            f"without any unmentioned factors or causal relationships: {z.capitalize()} has a direct effect on "
            f"{x[0]} and {y[0]}. {x[0].capitalize()} has a direct effect on {y[0]}."
        )
        model: dict[str, Any] = {
            "model_id": model_id,
            "story_id": story,
            "graph_id": "confounding",
            "background": background,
        }
        if alignment == "anticommonsense":
            model["anticommonsense"] = {"replaced": "outcome"}
        models.append(model)
        given, question, answer = _question(kind, x, y, z, rng)
        questions.append(
            {
                "question_id": i,
                "desc_id": f"{story}-confounding-{kind}-model{model_id}-q{i}",
                "given_info": given,
                "question": question,
                "answer": answer,
                "meta": {
                    "rung": rung,
                    "query_type": kind,
                    "story_id": story,
                    "graph_id": "confounding",
                    "model_id": model_id,
                },
                "reasoning": {},
            }
        )
    return questions, models


def write_cladder(folder: Path, n: int, seed: int = 0, stem: str = "synthetic") -> Path:
    """Write `{stem}-q-balanced.json` and `{stem}-meta-models.json` into `folder`."""
    questions, models = make_cladder(n, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}-q-balanced.json").write_text(json.dumps(questions, indent=1))
    (folder / f"{stem}-meta-models.json").write_text(json.dumps(models, indent=1))
    return folder


EXAMPLES = Path(__file__).resolve().parent / "examples"
