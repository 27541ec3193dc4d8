"""Why a server failed, read from the end of its log: the engines' own messages for the causes a
user can fix (out of memory, missing weights, port taken, unsupported model), each with the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from crawdad.errors import CrawdadError
from crawdad.safe_files import Folder

# (cause, what the engines print for it, what to do). The patterns are the real messages of
# vLLM / SGLang (PyTorch, transformers, uvicorn), llama.cpp's llama-server and llama-cpp-python,
# and Ollama.
CAUSES: list[tuple[str, re.Pattern[str], str]] = [
    (
        "out of memory",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|out of memory|cudaMalloc failed|"
            r"No available memory for the cache blocks|larger than the maximum number of tokens "
            r"that can be stored in KV cache|failed to allocate .*buffer|"
            r"unable to allocate .*buffer|requires more system memory",
            re.IGNORECASE,
        ),
        "give it more GPU memory (a larger gpu_memory fraction, a GPU of its own), a quantized "
        "checkpoint, or a shorter context_length",
    ),
    (
        "missing weights",
        re.compile(
            r"is not a local folder and is not a valid model identifier|Repository Not Found|"
            r"does not appear to have a file named|Model path does not exist|"
            r"failed to open .*No such file|No such file or directory|"
            r"error loading model|failed to load model|pull model manifest|model .* not found",
            re.IGNORECASE,
        ),
        "check the serve table's weights: the path or Hugging Face id (download it first, or "
        "log in for a gated model), or pull the Ollama tag",
    ),
    (
        "port taken",
        re.compile(
            r"address already in use|EADDRINUSE|couldn't bind HTTP server socket|"
            r"error while attempting to bind",
            re.IGNORECASE,
        ),
        "another program listens on that port: stop it, or set serving.first_port elsewhere",
    ),
    (
        "unsupported model",
        re.compile(
            r"are not supported for now|not supported by|is not supported|"
            r"unknown model architecture|Unrecognized model|unknown architecture|"
            r"invalid model file|unknown pre-tokenizer",
            re.IGNORECASE,
        ),
        "this engine (or its version) cannot serve these weights: upgrade it, or serve the "
        "model with another engine or another checkpoint",
    ),
]


def likely_cause(text: str) -> tuple[str, str] | None:
    """(cause, fix) of the first cause whose message is in `text`; the last line that matches
    anything wins, since logs often print warnings before the fatal error."""
    best: tuple[int, str, str] | None = None
    for cause, pattern, fix in CAUSES:
        for match in pattern.finditer(text):
            if best is None or match.start() > best[0]:
                best = (match.start(), cause, fix)
    return (best[1], best[2]) if best else None


def log_tail(folder: Path, name: str, lines: int = 15, limit: int = 64 * 1024) -> list[str]:
    """The last `lines` non-blank lines of the log `name` in `folder` (read without following a
    link; only its last `limit` bytes)."""
    try:
        with Folder(folder, create=False) as f, f.open_read(name) as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - limit))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def failure_text(key: str, what: str, tail: list[str], log: Path | None) -> str:
    """A failed server in words: what happened, the likely cause and its fix, the log's end."""
    found = likely_cause("\n".join(tail))
    cause = f"\nLikely cause: {found[0]}: {found[1]}." if found else ""
    where = f" (the whole log: {log})" if log is not None else ""
    shown = "\n".join(f"  | {line}" for line in tail) if tail else "  (its log is empty)"
    return f"server {key} {what}.{cause}\nThe end of its log{where}:\n{shown}"


# ANSI escape sequences (CSI "ESC [ ... letter", OSC "ESC ] ... BEL/ST", and two-character ones)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str, limit: int = 120) -> str:
    """`text` safe to show on a terminal: escape sequences and control characters gone (a
    server's log cannot move the cursor or recolour the screen), at most `limit` characters."""
    text = _CONTROL.sub(" ", _ANSI.sub("", text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_line(folder: Path, name: str, limit: int = 4096) -> str:
    """The last non-blank line of the log `name` in `folder`, made `printable` ("" when none):
    only its last `limit` bytes are read, a progress bar's carriage returns end a line too, and
    anything but a regular file (a FIFO, a device) is not read."""
    import os
    import stat

    try:
        with Folder(folder, create=False) as f:
            fd = f.open_fd(name, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as log:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - limit))
            data = log.read(limit)
    except (OSError, CrawdadError):  # gone, or a link
        return ""
    lines = re.split(r"[\r\n]+", data.decode("utf-8", "replace"))
    return next((shown for line in reversed(lines) if (shown := printable(line))), "")
