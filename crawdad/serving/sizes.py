"""What each served model needs, read before any GPU is touched: a Hugging Face folder's
config.json and safetensors headers (or index), a GGUF file's header, an Ollama tag's manifest
(or the server's /api/show, or an estimate from the tag, said so). Nothing here reads weights.

GGUF headers are read by the small reader of `gguf.py`. Every file and answer is read within
the bounds of `bounded.py`: regular files only, bytes, depth and counts capped, each number
checked by its meaning; a hostile one is a CrawdadError naming it.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import struct
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawdad.config import ServeConfig
from crawdad.errors import CrawdadError
from crawdad.safe_files import plain_name_problem, read_input
from crawdad.serving.base import Footprint
from crawdad.serving.bounded import (
    MAX_BYTES,
    MAX_CONTEXT,
    loads,
    number,
    opened,
    product,
    read_json,
    read_stream,
    take,
    text,
)
from crawdad.serving.gguf import gguf_metadata

GB = 1000**3
_DTYPE_BITS = {
    "F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
    "I16": 16, "U16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I8": 8, "U8": 8, "BOOL": 8,
    "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4,
}  # fmt: skip
_TORCH_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1}
# Bits per parameter of common GGUF file types (general.file_type), for Ollama estimates.
_GGUF_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}  # fmt: skip
_BITS = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_K_M": 5.7,
         "Q5_K_S": 5.5, "Q5_0": 5.5, "Q5_1": 6, "Q4_K_M": 4.9, "Q4_K_S": 4.6, "Q4_0": 4.5,
         "Q4_1": 5, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q3_K_L": 4.3, "Q2_K": 3.4}  # fmt: skip
# Ollama's library tags are Q4_K_M unless they say otherwise.
_OLLAMA_DEFAULT_QUANT = "Q4_K_M"


def kv_estimate(bf16_bytes: float) -> int:
    """KV cache bytes per token where a model's shape cannot be read, from its size at 16 bits:
    64 KiB + 3 bytes per million. Granite-3.3-2B (5 GB) 80 KiB, Llama-3-8B (16 GB) 128 KiB,
    Qwen3-32B (65 GB) 256 KiB, each within 15%; a 70B (140 GB) gets 470 KiB for its 320."""
    return int(65536 + 3e-6 * bf16_bytes)


# Bytes of a safetensors JSON header read at most (the format allows 100 MB; real ones hold at
# most a few thousand tensors, well under 1 MB; 16 MB of small tensors parse into ~180 MB).
_MAX_HEADER = 16_000_000
_MAX_DIMS = 16  # dimensions of a tensor's shape (real: 1 to 5)
_MAX_FILES = 10_000  # weight files of one folder (real: up to ~200 shards)
_MAX_WIDTH = 10_000_000  # layers, heads, a head's or the model's width
_MAX_LAYERS = 1024  # layers of an Ollama manifest (real: 2 to 10)
_MAX_MANIFEST = 1_000_000  # bytes of an Ollama manifest (real: ~1 KB)
_MODEL_LAYER = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def footprint(model: str, serve: ServeConfig, ollama_url: str | None = None) -> Footprint:
    """What serving `model` (its served name) as `serve` says needs; a CrawdadError naming the
    fix where the weights cannot be found."""
    if serve.engine == "ollama":
        return ollama_footprint(serve.weights, ollama_url, serve.weights_gb)
    if serve.engine == "llamacpp":
        return gguf_footprint(_existing(serve.weights, "a GGUF file", serve), serve.weights_gb)
    folder = hf_folder(serve.weights)
    if folder is None:
        if serve.weights_gb is not None:
            return _declared(serve.weights_gb, f"weights_gb of {serve.weights}")
        raise CrawdadError(
            f"{serve.weights} is neither a folder nor in the Hugging Face cache "
            f"({hf_cache()}): download it first (`hf download {serve.weights}`), give the "
            f"folder's path as `weights`, or state its size with `weights_gb` in the serve table"
        )
    found = hf_footprint(folder)
    if serve.weights_gb is not None:
        found = found.model_copy(update={"weights_bytes": int(serve.weights_gb * GB)})
    return found


def _declared(gb: float, source: str) -> Footprint:
    weights = int(gb * GB)
    return Footprint(weights_bytes=weights, kv_bytes_per_token=kv_estimate(weights), source=source)


def _existing(weights: str, what: str, serve: ServeConfig) -> Path:
    path = Path(weights).expanduser()
    if not path.is_file():
        raise CrawdadError(
            f"{serve.engine}: weights {weights!r} is not a file: give the path of {what}"
        )
    return path


# -- Hugging Face folders ----------------------------------------------------------------------


def hf_cache() -> Path:
    """The Hugging Face hub cache folder (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def hf_folder(weights: str) -> Path | None:
    """A local folder with config.json: the path itself, or the cached snapshot of a hub id.
    (A config.json that is a FIFO or a device is found here and refused when read.)"""
    path = Path(weights).expanduser()
    if (path / "config.json").exists():
        return path
    if path.exists() or weights.count("/") != 1:
        return None
    repo = hf_cache() / ("models--" + weights.replace("/", "--"))
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.exists():
        snapshot = snapshots / _ref_commit(ref)
        if (snapshot / "config.json").exists():
            return snapshot
    found = [p for p in snapshots.glob("*/config.json") if p.exists()]
    found.sort(key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def _ref_commit(ref: Path) -> str:
    """The commit a hub cache's ref names: a plain name, never a path out of `snapshots/`."""
    try:
        commit = read_input(ref, "file", 4096).decode("utf-8", "replace").strip()
    except OSError as e:
        raise CrawdadError(f"{ref}: cannot be read ({e.strerror or e})") from None
    if not re.fullmatch(r"[0-9A-Za-z_-][0-9A-Za-z._-]{0,127}", commit):
        raise CrawdadError(
            f"{ref}: {text(commit) or 'nothing'!r} names no snapshot: a damaged "
            "Hugging Face cache; download the model again"
        )
    return commit


def hf_footprint(folder: Path) -> Footprint:
    """From config.json and the safetensors index or headers (never the tensors' bytes)."""
    where = str(folder / "config.json")
    config = read_json(folder / "config.json")
    inner = config.get("text_config")
    shape = {**config, **inner} if isinstance(inner, dict) else config
    quant = config.get("quantization_config")
    method = text(quant.get("quant_method"), 40) if isinstance(quant, dict) else None
    torch_dtype = text(shape.get("torch_dtype") or shape.get("dtype"), 40) or "bfloat16"
    weights, parameters = _safetensors_size(folder)
    if weights is None:
        bins = [p for p in _listed(folder, "*.bin") + _listed(folder, "*.pt") if p.exists()]
        if not bins:
            raise CrawdadError(
                f"{folder}: no safetensors or .bin weights: is the download complete?"
            )
        weights = sum(p.stat().st_size for p in bins)
    if parameters is None:
        parameters = int(weights / _TORCH_BYTES.get(torch_dtype, 2))
    return Footprint(
        weights_bytes=weights,
        parameters=parameters,
        dtype="fp8" if method == "fp8" else torch_dtype,
        quantization=method,
        kv_bytes_per_token=_hf_kv_bytes(shape, where),
        max_context=number(
            shape.get("max_position_embeddings"), where, "max_position_embeddings", 1, MAX_CONTEXT
        ),
        source=str(folder),
    )


def _listed(folder: Path, pattern: str) -> list[Path]:
    found = sorted(folder.glob(pattern))
    if len(found) > _MAX_FILES:
        raise CrawdadError(f"{folder}: more than {_MAX_FILES:,} {pattern} files: not a model")
    return found


def _hf_kv_bytes(shape: dict[str, Any], where: str) -> int | None:
    def count(key: str, low: int = 1) -> int | None:
        return number(shape.get(key), where, key, low, _MAX_WIDTH)

    layers = count("num_hidden_layers")
    heads = count("num_attention_heads")
    if not layers or not heads:
        return None
    if latent := count("kv_lora_rank"):  # multi-head latent attention (DeepSeek V2/V3)
        return layers * (latent + (count("qk_rope_head_dim", 0) or 0)) * 2
    kv_heads = count("num_key_value_heads") or heads
    head_dim = count("head_dim") or (count("hidden_size") or 0) // heads
    return 2 * layers * kv_heads * head_dim * 2 if head_dim else None  # K and V, 16-bit


def _safetensors_size(folder: Path) -> tuple[int | None, int | None]:
    """(bytes, parameters) of the weights: the index's total_size, or the headers' tensors."""
    index = folder / "model.safetensors.index.json"
    files = _listed(folder, "*.safetensors")
    if index.exists():
        meta = read_json(index).get("metadata")
        if isinstance(meta, dict):
            where = str(index)
            total = number(meta.get("total_size"), where, "metadata.total_size", 0, MAX_BYTES)
            if total:
                params = number(meta.get("total_parameters"), where, "metadata.total_parameters")
                return total, params
    if not files:
        return None, None
    weights = parameters = 0
    for file in files:
        size, count = _safetensors_header(file)
        weights, parameters = weights + size, parameters + count
    return weights, parameters


def _safetensors_header(path: Path) -> tuple[int, int]:
    """(bytes, parameters) of one file's tensors, each entry checked: a dtype safetensors has,
    a shape of at most _MAX_DIMS dimensions, data_offsets inside the file that hold exactly the
    shape's bytes."""
    with opened(path, "safetensors file") as f:
        on_disk = os.fstat(f.fileno()).st_size
        (length,) = struct.unpack("<Q", take(f, 8, path, "safetensors header"))
        if length > min(_MAX_HEADER, on_disk - 8):
            raise CrawdadError(
                f"{path}: a safetensors header of {length:,} bytes in a file of {on_disk:,} "
                f"(crawdad reads at most {_MAX_HEADER:,}): a damaged or partial file"
            )
        header = loads(take(f, length, path, "safetensors header"), str(path))
    if not isinstance(header, dict):
        raise CrawdadError(f"{path}: its safetensors header is not a JSON object")
    room = on_disk - 8 - length
    size = parameters = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            count, held = _tensor(tensor, f"{path}: tensor {name[:80]!r}", room)
            size, parameters = size + held, parameters + count
    return size, parameters


def _tensor(tensor: Any, where: str, room: int) -> tuple[int, int]:
    if not isinstance(tensor, dict):
        raise CrawdadError(f"{where} is not a tensor's entry")
    dtype, shape, offsets = tensor.get("dtype"), tensor.get("shape"), tensor.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _DTYPE_BITS:
        raise CrawdadError(f"{where}: dtype {text(dtype, 40)!r} is not one safetensors has")
    if not isinstance(shape, list) or len(shape) > _MAX_DIMS:
        raise CrawdadError(f"{where}: its shape is not a list of at most {_MAX_DIMS} sizes")
    count = product(shape, where)
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise CrawdadError(f"{where}: its data_offsets are not [start, end]")
    start = number(offsets[0], where, "data_offsets[0]", 0, room)
    end = number(offsets[1], where, "data_offsets[1]", 0, room)
    assert start is not None and end is not None
    needed = -(-count * _DTYPE_BITS[dtype] // 8)
    if end - start != needed:
        raise CrawdadError(
            f"{where}: data_offsets hold {end - start:,} bytes where its shape and dtype need "
            f"{needed:,}: a damaged file"
        )
    return count, needed


# -- GGUF --------------------------------------------------------------------------------------


def gguf_footprint(path: Path, weights_gb: float | None = None) -> Footprint:
    """From the GGUF header; the weights are the file (its size, or `weights_gb`)."""
    meta = gguf_metadata(path)
    where = f"{path} (GGUF header)"
    arch = text(meta.get("general.architecture"), 100) or ""

    def count(key: str, high: int = _MAX_WIDTH) -> int | None:
        return number(meta.get(key), where, key, 1, high)

    layers = count(f"{arch}.block_count")
    heads = count(f"{arch}.attention.head_count")
    kv_heads = count(f"{arch}.attention.head_count_kv") or heads
    key_len = count(f"{arch}.attention.key_length")
    value_len = count(f"{arch}.attention.value_length")
    width = count(f"{arch}.embedding_length")
    head_dim = key_len or (width // heads if width and heads else None)
    kv = None
    if layers and kv_heads and head_dim:  # llama.cpp's KV cache is F16 by default
        kv = layers * kv_heads * (head_dim + (value_len or head_dim)) * 2
    file_type = number(meta.get("general.file_type"), where, "general.file_type", 0, 10_000)
    quant = _GGUF_FILE_TYPES.get(file_type, f"type {file_type}") if file_type is not None else None
    weights = int(weights_gb * GB) if weights_gb else path.stat().st_size
    return Footprint(
        weights_bytes=weights,
        parameters=count("general.parameter_count", MAX_BYTES),
        dtype=quant,
        quantization=quant if quant not in (None, "F32", "F16", "BF16") else None,
        kv_bytes_per_token=kv,
        max_context=count(f"{arch}.context_length", MAX_CONTEXT),
        source=f"GGUF header of {path}",
    )


# -- Ollama ------------------------------------------------------------------------------------


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

    def count(key: str, high: int = _MAX_WIDTH) -> int | None:
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
