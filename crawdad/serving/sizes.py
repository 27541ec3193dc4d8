"""What each served model needs, read before any GPU is touched: a Hugging Face folder's
config.json and safetensors headers (or index), a GGUF file's header, an Ollama tag's manifest
(or the server's /api/show, or an estimate from the tag, said so). Nothing here reads weights.

GGUF headers are read by the small reader below, not the `gguf` package: the plan needs a few
metadata keys, while `gguf` brings numpy and maps the whole file; the reader stops at the end
of the metadata and skips the tokenizer's arrays without keeping them.
"""

from __future__ import annotations

import json
import os
import re
import struct
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from crawdad.config import ServeConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import Footprint

GB = 1000**3
_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
    "I16": 2, "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
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


_MAX_HEADER = 100 * 1024 * 1024  # bytes of a safetensors JSON header read at most


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
    """A local folder with config.json: the path itself, or the cached snapshot of a hub id."""
    path = Path(weights).expanduser()
    if (path / "config.json").is_file():
        return path
    if path.exists() or weights.count("/") != 1:
        return None
    repo = hf_cache() / ("models--" + weights.replace("/", "--"))
    ref = repo / "refs" / "main"
    snapshots = repo / "snapshots"
    if ref.is_file():
        snapshot = snapshots / ref.read_text(encoding="utf-8").strip()
        if (snapshot / "config.json").is_file():
            return snapshot
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def hf_footprint(folder: Path) -> Footprint:
    """From config.json and the safetensors index or headers (never the tensors' bytes)."""
    config = _read_json(folder / "config.json")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    shape = {**config, **(text or {})}
    quant = config.get("quantization_config") or {}
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    torch_dtype = str(shape.get("torch_dtype") or shape.get("dtype") or "bfloat16")
    weights, parameters = _safetensors_size(folder)
    if weights is None:
        bins = list(folder.glob("*.bin")) + list(folder.glob("*.pt"))
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
        quantization=str(method) if method else None,
        kv_bytes_per_token=_hf_kv_bytes(shape),
        max_context=_int(shape.get("max_position_embeddings")),
        source=str(folder),
    )


def _hf_kv_bytes(shape: dict[str, Any]) -> int | None:
    layers = _int(shape.get("num_hidden_layers"))
    heads = _int(shape.get("num_attention_heads"))
    if not layers or not heads:
        return None
    if shape.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek V2/V3): one latent
        latent = int(shape["kv_lora_rank"]) + int(shape.get("qk_rope_head_dim") or 0)
        return layers * latent * 2
    kv_heads = _int(shape.get("num_key_value_heads")) or heads
    head_dim = _int(shape.get("head_dim")) or (_int(shape.get("hidden_size")) or 0) // heads
    return 2 * layers * kv_heads * head_dim * 2 if head_dim else None  # K and V, 16-bit


def _safetensors_size(folder: Path) -> tuple[int | None, int | None]:
    """(bytes, parameters) of the weights: the index's total_size, or the headers' tensors."""
    index = folder / "model.safetensors.index.json"
    files = sorted(folder.glob("*.safetensors"))
    if index.is_file():
        meta = _read_json(index).get("metadata") or {}
        total = _int(meta.get("total_size"))
        if total:
            return total, _int(meta.get("total_parameters"))
    if not files:
        return None, None
    weights = parameters = 0
    for file in files:
        size, count = _safetensors_header(file)
        weights, parameters = weights + size, parameters + count
    return weights, parameters


def _safetensors_header(path: Path) -> tuple[int, int]:
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CrawdadError(f"{path}: not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_HEADER:
            raise CrawdadError(f"{path}: a safetensors header of {length} bytes: not one")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CrawdadError(f"{path}: its safetensors header is not JSON") from None
    size = parameters = 0
    for name, tensor in header.items():
        if name == "__metadata__" or not isinstance(tensor, dict):
            continue
        count = 1
        for dim in tensor.get("shape", []):
            count *= int(dim)
        parameters += count
        start, end = tensor.get("data_offsets", (0, count * _DTYPE_BYTES.get(tensor["dtype"], 2)))
        size += int(end) - int(start)
    return size, parameters


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CrawdadError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(data, dict):
        raise CrawdadError(f"{path}: not a JSON object")
    return data


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- GGUF --------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}  # fmt: skip


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's metadata (arrays are skipped: their length alone is kept)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise CrawdadError(f"{path}: not a GGUF file (no GGUF magic at its start)")
        (version,) = struct.unpack("<I", _take(f, 4, path))
        if version not in (2, 3):
            raise CrawdadError(f"{path}: GGUF version {version}, crawdad reads 2 and 3")
        _tensors, count = struct.unpack("<QQ", _take(f, 16, path))
        if count > 100_000:
            raise CrawdadError(f"{path}: {count} metadata keys: a damaged GGUF header")
        meta: dict[str, Any] = {}
        for _ in range(count):
            key = _gguf_string(f, path)
            (kind,) = struct.unpack("<I", _take(f, 4, path))
            meta[key] = _gguf_value(f, kind, path)
    return meta


def _take(f: IO[bytes], n: int, path: Path) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise CrawdadError(f"{path}: its GGUF header ends early (a partial download?)")
    return data


def _gguf_string(f: IO[bytes], path: Path) -> str:
    (length,) = struct.unpack("<Q", _take(f, 8, path))
    if length > _MAX_HEADER:
        raise CrawdadError(f"{path}: a GGUF string of {length} bytes: a damaged header")
    return _take(f, length, path).decode("utf-8", errors="replace")


def _gguf_value(f: IO[bytes], kind: int, path: Path) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, _take(f, struct.calcsize(fmt), path))[0]
    if kind == 8:
        return _gguf_string(f, path)
    if kind == 9:
        item, length = struct.unpack("<IQ", _take(f, 12, path))
        if item in _SCALARS:  # skipped whole: the tokenizer's scores and types
            f.seek(length * struct.calcsize(_SCALARS[item]), os.SEEK_CUR)
        else:
            for _ in range(length):
                _gguf_value(f, item, path)
        return length
    raise CrawdadError(f"{path}: GGUF value type {kind} is unknown: a damaged header")


def gguf_footprint(path: Path, weights_gb: float | None = None) -> Footprint:
    """From the GGUF header; the weights are the file (its size, or `weights_gb`)."""
    meta = gguf_metadata(path)
    arch = str(meta.get("general.architecture", ""))
    layers = _int(meta.get(f"{arch}.block_count"))
    heads = _int(meta.get(f"{arch}.attention.head_count"))
    kv_heads = _int(meta.get(f"{arch}.attention.head_count_kv")) or heads
    key_len = _int(meta.get(f"{arch}.attention.key_length"))
    value_len = _int(meta.get(f"{arch}.attention.value_length"))
    width = _int(meta.get(f"{arch}.embedding_length"))
    head_dim = key_len or (width // heads if width and heads else None)
    kv = None
    if layers and kv_heads and head_dim:  # llama.cpp's KV cache is F16 by default
        kv = layers * kv_heads * (head_dim + (value_len or head_dim)) * 2
    file_type = _int(meta.get("general.file_type"))
    quant = _GGUF_FILE_TYPES.get(file_type, f"type {file_type}") if file_type is not None else None
    weights = int(weights_gb * GB) if weights_gb else path.stat().st_size
    return Footprint(
        weights_bytes=weights,
        parameters=_int(meta.get("general.parameter_count")),
        dtype=quant,
        quantization=quant if quant not in (None, "F32", "F16", "BF16") else None,
        kv_bytes_per_token=kv,
        max_context=_int(meta.get(f"{arch}.context_length")),
        source=f"GGUF header of {path}",
    )


# -- Ollama ------------------------------------------------------------------------------------


def ollama_models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or "~/.ollama/models").expanduser()


def _tag_parts(tag: str) -> tuple[str, str]:
    name, _, version = tag.partition(":")
    return name, version or "latest"


def ollama_blob(tag: str) -> Path | None:
    """The GGUF blob of a pulled tag, from Ollama's manifest on this machine."""
    name, version = _tag_parts(tag)
    if "/" not in name:
        name = f"library/{name}"
    if name.count("/") == 1:
        name = f"registry.ollama.ai/{name}"
    manifest = ollama_models_dir() / "manifests" / name / version
    if not manifest.is_file():
        return None
    try:
        layers = _read_json(manifest).get("layers", [])
    except CrawdadError:
        return None
    for layer in layers:
        if layer.get("mediaType") == "application/vnd.ollama.image.model":
            blob = ollama_models_dir() / "blobs" / str(layer.get("digest", "")).replace(":", "-")
            return blob if blob.is_file() else None
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
        info = shown.get("model_info") or {}
        details = shown.get("details") or {}
        params = _int(info.get("general.parameter_count"))
        quant = str(details.get("quantization_level") or _OLLAMA_DEFAULT_QUANT)
        if params:
            arch = str(info.get("general.architecture", ""))
            layers = _int(info.get(f"{arch}.block_count"))
            kv_heads = _int(info.get(f"{arch}.attention.head_count_kv"))
            key_len = _int(info.get(f"{arch}.attention.key_length"))
            kv = 2 * layers * kv_heads * key_len * 2 if layers and kv_heads and key_len else None
            weights = int(weights_gb * GB) if weights_gb else int(params * _BITS.get(quant, 5) / 8)
            return Footprint(
                weights_bytes=weights,
                parameters=params,
                dtype=quant,
                quantization=quant,
                kv_bytes_per_token=kv or kv_estimate(params * 2),
                max_context=_int(info.get(f"{arch}.context_length")),
                source=f"{url}/api/show",
            )
    return ollama_estimate(tag, weights_gb)


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
    params = int(float(size.group(1)) * (1e9 if size.group(2) == "b" else 1e6)) if size else None
    weights = int(weights_gb * GB) if weights_gb else int((params or 0) * _BITS[quant] / 8)
    return Footprint(
        weights_bytes=weights,
        parameters=params,
        dtype=quant,
        quantization=quant,
        kv_bytes_per_token=kv_estimate(params * 2 if params else weights * 4),
        source=f"estimate from the tag {tag!r} (not pulled here)",
    )


def _api_show(url: str, tag: str) -> dict[str, Any] | None:
    request = urllib.request.Request(
        f"{url.rstrip('/')}/api/show",
        data=json.dumps({"model": tag}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=3.0) as response:
            data = json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return data if isinstance(data, dict) else None
