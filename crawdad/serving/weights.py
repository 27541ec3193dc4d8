"""What identifies a server's weights, for the manifest: a GGUF file's sha256 (cached by path,
size and mtime, so that a 20 GB file is read once, not each run), a Hugging Face snapshot's
commit, a local folder's safetensors index hash. Ollama tags get their digest from the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from crawdad.errors import CrawdadError
from crawdad.safe_files import open_input, read_input
from crawdad.serving.bounded import MAX_JSON_FILE

CACHE_ENV = "CRAWDAD_CACHE_DIR"
_CHUNK = 8 * 1024 * 1024
_MAX_CACHE = 64_000_000  # bytes of the hash cache (an entry: ~150 bytes)


def cache_file() -> Path:
    """Where file hashes are kept: $CRAWDAD_CACHE_DIR, else $XDG_CACHE_HOME/crawdad, else
    ~/.cache/crawdad."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "crawdad"
    )
    return Path(root) / "weights-sha256.json"


def _read_cache(path: Path) -> dict[str, str]:
    try:  # crawdad's own file, but bounded all the same: a cache past it starts afresh
        data = json.loads(read_input(path, "cache file", _MAX_CACHE))
    except (OSError, ValueError, RecursionError, CrawdadError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, str]) -> None:
    """Best effort (a read-only home loses only the cache): written whole, then renamed."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        os.replace(tmp, path)


Progress = Callable[[int, int], None]  # (bytes hashed, bytes in all), after each chunk


def file_sha256(path: Path, cache: Path | None = None, progress: Progress | None = None) -> str:
    """sha256 of a file, from the cache when its path, size and mtime are the ones hashed;
    `progress` is told of each chunk hashed (crawdad.serving.waits.BytesProgress)."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache = cache or cache_file()
    known = _read_cache(cache)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    done = 0
    with open_input(path, "weights file") as f:  # a FIFO or a device: refused, never read
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if progress is not None:
                done += len(chunk)
                progress(done, st.st_size)
    known[key] = digest.hexdigest()
    _write_cache(cache, known)
    return known[key]


def _hub_cache() -> Path:
    if env := os.environ.get("HF_HUB_CACHE"):
        return Path(env)
    home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    return Path(home) / "hub"


def _snapshot_revision(folder: Path) -> str | None:
    """A folder inside the Hugging Face cache (`.../models--org--name/snapshots/<commit>`)."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.name
    return None


def _folder_hash(folder: Path, progress: Progress | None = None) -> str | None:
    if revision := _snapshot_revision(folder.resolve()):
        return f"revision:{revision}"
    for name in ("model.safetensors.index.json", "model.safetensors", "config.json"):
        if (folder / name).is_file():
            if name == "model.safetensors":
                return f"sha256:{file_sha256(folder / name, progress=progress)}"
            data = read_input(folder / name, "file", MAX_JSON_FILE)
            digest = hashlib.sha256(data).hexdigest()
            return f"{'index-' if name.endswith('index.json') else 'config-'}sha256:{digest}"
    return None


def _hub_revision(repo_id: str) -> str | None:
    """The commit `main` points at in the local Hugging Face cache (what vLLM will load)."""
    ref = _hub_cache() / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
    try:
        commit = read_input(ref, "file", 4096).decode("utf-8", "replace").strip()
    except (OSError, CrawdadError):
        return None
    return f"revision:{commit}" if re.fullmatch(r"[0-9A-Za-z._-]{1,128}", commit) else None


def weights_hash(engine: str, weights: str, progress: Progress | None = None) -> str | None:
    """What identifies `weights` (None: not known before the server runs, e.g. an Ollama tag,
    or not found); `progress` is told of each chunk of a file hashed."""
    if engine == "ollama":
        return None
    try:
        path = Path(weights).expanduser()
        if path.is_file():
            return f"sha256:{file_sha256(path, progress=progress)}"
        if path.is_dir():
            return _folder_hash(path, progress)
    except (OSError, RuntimeError, ValueError, CrawdadError):  # nice to have, never a failure
        return None
    if weights.count("/") == 1 and not weights.startswith((".", "/")):
        return _hub_revision(weights)
    return None
