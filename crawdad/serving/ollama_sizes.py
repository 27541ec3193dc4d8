"""What an Ollama tag needs: its pulled GGUF blob, found through Ollama's manifest on this
machine (read within bounds; its digest must name a blob), else the server's /api/show (read
within bounds of bytes, time and depth; no redirect followed), else an estimate from the tag's
name, said so."""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawdad.errors import CrawdadError
from crawdad.safe_files import plain_name_problem
from crawdad.serving.base import Footprint, kv_estimate
from crawdad.serving.bounded import (
    GB,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_WIDTH,
    loads,
    number,
    read_json,
    read_stream,
    text,
)
from crawdad.serving.gguf import gguf_footprint

# Bits per parameter of common GGUF quantizations, for estimates.
_BITS = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_K_M": 5.7,
         "Q5_K_S": 5.5, "Q5_0": 5.5, "Q5_1": 6, "Q4_K_M": 4.9, "Q4_K_S": 4.6, "Q4_0": 4.5,
         "Q4_1": 5, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q3_K_L": 4.3, "Q2_K": 3.4}  # fmt: skip
# Ollama's library tags are Q4_K_M unless they say otherwise.
_OLLAMA_DEFAULT_QUANT = "Q4_K_M"
_MAX_MANIFEST = 1_000_000  # bytes of an Ollama manifest (real: ~1 KB)
_MAX_LAYERS = 1024  # layers of a manifest (real: 2 to 10)
_MODEL_LAYER = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def ollama_models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models").expanduser()


def _tag_parts(tag: str) -> tuple[str, str]:
    name, _, version = tag.partition(":")
    return name, version or "latest"


def ollama_blob(tag: str) -> Path | None:
    """The GGUF blob of a pulled tag, from Ollama's manifest on this machine (None: not
    pulled here). The manifest is read within bounds, and its digest must name a blob:
    `sha256:` and 64 hex digits, never a path."""
    name, version = _tag_parts(tag)
    if "/" not in name:
        name = f"library/{name}"
    if name.count("/") == 1:
        name = f"registry.ollama.ai/{name}"
    parts = [*name.split("/"), version]
    if any(plain_name_problem(p) for p in parts):
        return None  # a tag that names no manifest file
    manifest = ollama_models_dir().joinpath("manifests", *parts)
    if not manifest.exists():
        return None
    layers = read_json(manifest, _MAX_MANIFEST).get("layers")
    if not isinstance(layers, list) or len(layers) > _MAX_LAYERS:
        raise CrawdadError(
            f"{manifest}: its layers are not a list of at most {_MAX_LAYERS}: a damaged "
            f"manifest; pull the tag again (`ollama pull {tag}`)"
        )
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == _MODEL_LAYER:
            digest = layer.get("digest")
            found = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
            if found is None:
                raise CrawdadError(
                    f"{manifest}: the model layer's digest {text(digest, 80)!r} is not "
                    f"sha256:<64 hex digits>: a damaged manifest; pull the tag again"
                )
            blob = ollama_models_dir() / "blobs" / f"sha256-{found[1]}"
            return blob if blob.exists() else None
    return None


def ollama_footprint(
    tag: str,
    url: str | None = None,
    weights_gb: float | None = None,
    show: Callable[[str, str], dict[str, Any] | None] | None = None,
) -> Footprint:
    """A tag's footprint: its pulled GGUF blob, else the server's /api/show, else an estimate
    from the tag's name (a stated one: the plan's notes say so)."""
    blob = ollama_blob(tag)
    if blob is not None:
        return gguf_footprint(blob, weights_gb).model_copy(update={"source": f"{tag} ({blob})"})
    shown = (show or _api_show)(url, tag) if url else None
    if shown:
        found = _shown_footprint(shown, f"{url}/api/show", weights_gb)
        if found is not None:
            return found
    return ollama_estimate(tag, weights_gb)


def _shown_footprint(
    shown: dict[str, Any], where: str, weights_gb: float | None
) -> Footprint | None:
    """From Ollama's /api/show answer, each figure checked (None: it gives no size)."""
    info = shown.get("model_info")
    info = info if isinstance(info, dict) else {}
    details = shown.get("details")
    details = details if isinstance(details, dict) else {}
    params = number(info.get("general.parameter_count"), where, "general.parameter_count")
    if not params:
        return None
    quant = text(details.get("quantization_level"), 40) or _OLLAMA_DEFAULT_QUANT
    arch = text(info.get("general.architecture"), 100) or ""

    def count(key: str, high: int = MAX_WIDTH) -> int | None:
        return number(info.get(f"{arch}.{key}"), where, f"{arch}.{key}", 1, high)

    layers, kv_heads = count("block_count"), count("attention.head_count_kv")
    key_len = count("attention.key_length")
    kv = 2 * layers * kv_heads * key_len * 2 if layers and kv_heads and key_len else None
    weights = int(weights_gb * GB) if weights_gb else int(params * _BITS.get(quant, 5) / 8)
    return Footprint(
        weights_bytes=weights,
        parameters=params,
        dtype=quant,
        quantization=quant,
        kv_bytes_per_token=kv or kv_estimate(params * 2),
        max_context=count("context_length", MAX_CONTEXT),
        source=where,
    )


def ollama_estimate(tag: str, weights_gb: float | None = None) -> Footprint:
    """From the tag alone: `qwen3:32b` is 32 billion parameters at Ollama's default Q4_K_M."""
    _name, version = _tag_parts(tag)
    size = re.search(r"(\d+(?:\.\d+)?)([bm])\b", version.lower()) or re.search(
        r"(\d+(?:\.\d+)?)([bm])\b", tag.lower()
    )
    quant = next((q for q in _BITS if q.lower() in version.lower()), _OLLAMA_DEFAULT_QUANT)
    if weights_gb is None and size is None:
        raise CrawdadError(
            f"ollama tag {tag!r}: not pulled here and its size is not in its name: pull it "
            f"(`ollama pull {tag}`) or state its size with `weights_gb` in the serve table"
        )
    params = None
    if size:
        said = float(size.group(1)) * (1e9 if size.group(2) == "b" else 1e6)
        if not (math.isfinite(said) and 0 < said <= MAX_BYTES):
            raise CrawdadError(
                f"ollama tag {tag!r}: {size.group(0)[:40]} is not a model's size: pull it, or "
                "state its size with `weights_gb` in the serve table"
            )
        params = int(said)
    weights = int(weights_gb * GB) if weights_gb else int((params or 0) * _BITS[quant] / 8)
    return Footprint(
        weights_bytes=weights,
        parameters=params,
        dtype=quant,
        quantization=quant,
        kv_bytes_per_token=kv_estimate(params * 2 if params else weights * 4),
        source=f"estimate from the tag {tag!r} (not pulled here)",
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Answers come from the server asked, never from where it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _api_show(url: str, tag: str) -> dict[str, Any] | None:
    """Ollama's /api/show of `tag` (None: no answer), read within bounds (bytes, time, depth):
    an answer past one is a CrawdadError naming it."""
    where = f"{url.rstrip('/')}/api/show"
    request = urllib.request.Request(
        where,
        data=json.dumps({"model": tag}).encode(),
        headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
    )
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=3.0) as response:
            body = read_stream(iter(lambda: response.read1(65536), b""), where)
    except (OSError, ValueError, http.client.HTTPException):  # a 3xx too: HTTPError
        return None
    data = loads(body, where)
    return data if isinstance(data, dict) else None
