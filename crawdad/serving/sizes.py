"""What each served model needs, read before any GPU is touched: a Hugging Face folder's
config.json and safetensors headers (or index), a GGUF file's header, an Ollama tag's (in
`ollama_sizes.py`). Nothing here reads weights.

GGUF headers are read by the small reader of `gguf.py`. Every file and answer is read within
the bounds of `bounded.py`: regular files only, bytes, depth and counts capped, each number
checked by its meaning; a hostile one is a CrawdadError naming it.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

from crawdad.config import ServeConfig
from crawdad.errors import CrawdadError
from crawdad.safe_files import read_input
from crawdad.serving.base import Footprint, kv_estimate
from crawdad.serving.bounded import (
    GB,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_WIDTH,
    loads,
    number,
    opened,
    product,
    read_json,
    take,
    text,
)
from crawdad.serving.gguf import gguf_footprint, gguf_metadata

_DTYPE_BITS = {
    "F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
    "I16": 16, "U16": 16, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I8": 8, "U8": 8, "BOOL": 8,
    "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4,
}  # fmt: skip
_TORCH_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "fp8": 1}
# Bytes of a safetensors JSON header read at most (the format allows 100 MB; real ones hold at
# most a few thousand tensors, well under 1 MB; 16 MB of small tensors parse into ~180 MB).
_MAX_HEADER = 16_000_000
_MAX_DIMS = 16  # dimensions of a tensor's shape (real: 1 to 5)
_MAX_FILES = 10_000  # weight files of one folder (real: up to ~200 shards)


def footprint(model: str, serve: ServeConfig, ollama_url: str | None = None) -> Footprint:
    """What serving `model` (its served name) as `serve` says needs; a CrawdadError naming the
    fix where the weights cannot be found or read."""
    try:
        return _footprint(serve, ollama_url)
    except (OSError, RuntimeError, ValueError) as e:  # a name too long, ~nosuchuser, a NUL
        said = getattr(e, "strerror", None) or str(e)
        raise CrawdadError(
            f"{serve.engine}: weights {serve.weights[:200]!r} cannot be read ({said[:200]}): "
            "give a path, a Hugging Face id or an Ollama tag"
        ) from None


def _footprint(serve: ServeConfig, ollama_url: str | None) -> Footprint:
    if serve.engine == "ollama":
        from crawdad.serving.ollama_sizes import ollama_footprint

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
        return number(shape.get(key), where, key, low, MAX_WIDTH)

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


__all__ = ["footprint", "gguf_footprint", "gguf_metadata", "hf_footprint", "kv_estimate"]
