"""A reply as a token stream: where the thinking goes, where the budget cuts, how it is chunked.

"Tokens" are words with their leading whitespace, close enough to real tokenizers for budgets and
counts. Streams go out one token a chunk, as real servers send them, or grouped into chunks of
several tokens so that zero-latency test runs do not drown in tiny writes. Counting uses `str.split`, and
text is only tokenised when the budget actually cuts it, to keep the per-request cost small.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from crawdad.fake.behaviour import FakeReply

_TOKEN = re.compile(r"\s*\S+")
_SPACE = re.compile(r"\s")

# "field": thinking in its own field; "inline": `<think>...</think>` before the answer text;
# "inline_no_open": the same without the opening tag (templates that pre-fill it); "drop": none.
ThinkingMode = Literal["field", "inline", "inline_no_open", "drop"]
THINKING, TEXT = 0, 1


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(text.split())


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Rough prompt size: 4 characters a token, plus a few template tokens per message."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += 4 + (len(content) if isinstance(content, str) else len(str(content or ""))) // 4
    return total


@dataclass(slots=True)
class Plan:
    thinking: str
    text: str
    thinking_count: int
    text_count: int
    done_reason: Literal["stop", "length"]
    tool_calls: list[dict[str, Any]] | None = None  # rendered after the text

    @property
    def count(self) -> int:
        return self.thinking_count + self.text_count


def plan_reply(reply: FakeReply, mode: ThinkingMode, budget: int | None, loop_cap: int) -> Plan:
    """Lay out `reply` as thinking and text and cut it at `budget` tokens (None: no budget)."""
    thinking = reply.thinking.strip() if mode != "drop" else ""
    text = reply.text.strip()
    n_thinking, n_text = count_tokens(thinking), count_tokens(text)
    done_reason = reply.done_reason
    if reply.repeat:
        # A looping model never reaches its answer: it repeats until the budget runs out.
        thinking, n_thinking = _repeat(thinking, n_thinking, reply.repeat, budget or loop_cap)
        text, n_text, done_reason = "", 0, "length"
    if mode in ("inline", "inline_no_open") and thinking:
        opening = "<think>\n" if mode == "inline" else ""
        closing = "\n</think>\n\n" if text or not reply.repeat else ""
        text = f"{opening}{thinking}{closing}{text}"
        n_text += n_thinking + bool(opening) + bool(closing)
        thinking, n_thinking = "", 0
    if budget is not None and n_thinking + n_text > budget:
        budget = max(0, budget)
        if n_thinking > budget:
            thinking, n_thinking = "".join(tokens(thinking)[:budget]), budget
        text, n_text = "".join(tokens(text)[: budget - n_thinking]), budget - n_thinking
        done_reason = "length"
    calls = reply.tool_calls if done_reason == "stop" else None  # a cut reply has no call
    return Plan(thinking, text, n_thinking, n_text, done_reason, calls)


def _repeat(head: str, n_head: int, span: str, cap: int) -> tuple[str, int]:
    parts = tokens(" " + span.strip()) or [" ..."]
    need = max(0, cap - n_head)
    full, rest = divmod(need, len(parts))
    return head + "".join(parts) * full + "".join(parts[:rest]), n_head + need


def chunks(plan: Plan, chunk_tokens: int, max_chunks: int) -> Iterator[tuple[int, str, int]]:
    """(channel, text, token count) pieces: at least `chunk_tokens` tokens each, at most about
    `max_chunks` pieces per channel, cut at whitespace so that no token is split. With
    `chunk_tokens` 1 and no cap on pieces: one token each."""
    for channel, text, count in (
        (THINKING, plan.thinking, plan.thinking_count),
        (TEXT, plan.text, plan.text_count),
    ):
        if not count:
            continue
        if chunk_tokens == 1 and max_chunks >= count:
            for token in tokens(text):
                yield channel, token, 1
            continue
        size = max(chunk_tokens, math.ceil(count / max_chunks))
        if size >= count:
            yield channel, text, count
            continue
        step = max(1, len(text) * size // count)
        start = 0
        while start < len(text):
            found = _SPACE.search(text, start + step)
            end = found.start() if found else len(text)
            piece = text[start:end]
            yield channel, piece, count_tokens(piece)
            start = end
