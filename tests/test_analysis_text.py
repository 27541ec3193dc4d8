"""Formatting stripping and the (faster, identical) VADER scorer."""

from __future__ import annotations

import math
import random

import pytest
from crawdad.analysis.response_text import SentimentScorer, _WindowedVader, strip_formatting
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("**Answer:** yes", "Answer: yes"),
        ("## Step 1) *graph*", "Step 1) graph"),
        ("- item one\n- item two", "item one\nitem two"),
        ("1. first\n2) second", "first\nsecond"),
        (r"$P(Y \mid do(X))$ is \textbf{large}", "P(Y do(X)) is large"),
        (r"\boxed{\text{no}}", "no"),
        (r"Demand \rightarrow Supply", "Demand Supply"),
        ("See [the paper](http://x.org).", "See the paper."),
        ("| a | b |\n|---|:--:|\n| 1 | 2 |", "a b\n1 2"),
        ("```python\nx = 1\n```", "x = 1"),
        ("> quoted _emphasis_ and snake_case", "quoted emphasis and snake_case"),
        ("", ""),
    ],
)
def test_strip_formatting(text, clean):
    assert strip_formatting(text) == clean


def test_windowed_vader_equals_stock_vader():
    stock, fast = SentimentIntensityAnalyzer(), _WindowedVader()
    words = [
        "the",
        "opponent",
        "is",
        "NOT",
        "wrong",
        "but",
        "their",
        "calculation",
        "is",
        "bad",
        ".",
        "no",
        "good",
        "never",
        "so",
        "great",
        "without",
        "doubt",
        "kind",
        "of",
        "sort",
        "of",
        "at",
        "least",
        "very",
        "least",
        "cannot",
        "fail",
        "!",
        "??",
        ":)",
        "yes",
        "correct",
        "error",
        "flawed",
        "agree",
        "hardly",
        "nor",
        "or",
        "this",
        "the",
        "bomb",
    ]
    rng = random.Random(7)
    for _ in range(300):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 120)))
        assert fast.polarity_scores(text) == stock.polarity_scores(text), text


def test_scorer():
    s = SentimentScorer()
    assert math.isnan(s.score(""))
    assert math.isnan(s.score("**  **"))
    assert s.score("This is good.") == pytest.approx(0.4404)
    assert s.score("This is **bad**.") == pytest.approx(-0.5423)
