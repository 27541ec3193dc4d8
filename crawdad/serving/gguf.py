"""A GGUF file's metadata and what serving it needs (`gguf_footprint`), read by a small reader
rather than the `gguf` package: the plan needs a few keys, while `gguf` brings numpy and maps
the whole file. The reader stops at the end of the metadata and skips the tokenizer's arrays
without keeping them.

The header is untrusted (`bounded`): the file is opened only when regular; every length is
checked against the bytes left in the file before anything is read or skipped; keys, pairs,
arrays' nesting and the array elements walked one by one have caps; a long string value is
skipped, not kept (the plan reads numbers and the architecture's name).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import IO, Any

from crawdad.errors import CrawdadError
from crawdad.serving.base import Footprint
from crawdad.serving.bounded import (
    GB,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_WIDTH,
    number,
    opened,
    take,
    text,
)

MAX_KEYS = 100_000  # metadata pairs (real: 20 to 60)
MAX_KEY = 65_536  # bytes of a key (real: under 64)
MAX_KEPT = 4_096  # bytes of a string value kept; longer ones (a chat template) are skipped
MAX_WALKED = 4_000_000  # array elements read one by one (a tokenizer's strings: ~150k-260k)
MAX_NESTING = 2  # arrays of arrays
# The quantization of each common GGUF file type (general.file_type).
_GGUF_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}  # fmt: skip

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}  # fmt: skip
_U64 = struct.Struct("<Q")


class _Reader:
    def __init__(self, f: IO[bytes], path: Path) -> None:
        self.f, self.path = f, path
        self.size = os.fstat(f.fileno()).st_size
        self.walked = 0

    def take(self, n: int) -> bytes:
        return take(self.f, n, self.path, "GGUF header")

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def _fits(self, n: int) -> None:
        if n > self.size - self.f.tell():
            raise CrawdadError(f"{self.path}: its GGUF header ends early (a partial download?)")

    def skip(self, n: int) -> None:
        self._fits(n)
        self.f.seek(n, os.SEEK_CUR)

    def string(self, keep: int = MAX_KEPT) -> str | None:
        """A string (None: longer than `keep` bytes, skipped)."""
        length = self.unpack("<Q")
        self._fits(length)
        if length > keep:
            self.skip(length)
            return None
        return self.take(length).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Past `count` strings (a tokenizer's: the hot loop of a header, kept lean)."""
        read, unpack = self.f.read, _U64.unpack
        for _ in range(count):
            head = read(8)
            if len(head) < 8:
                self._fits(8)
            (length,) = unpack(head)
            if length > MAX_KEPT:
                self.skip(length)
            elif len(read(length)) < length:
                self._fits(length)

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == 8:
            return self.string()
        if kind == 9:
            item, length = struct.unpack("<IQ", self.take(12))
            if item in _SCALARS:  # skipped whole: the tokenizer's scores and types
                self.skip(length * struct.calcsize(_SCALARS[item]))
                return length
            if depth >= MAX_NESTING:
                raise CrawdadError(f"{self.path}: GGUF arrays nested deeper than {MAX_NESTING}")
            self.walked += length
            if self.walked > MAX_WALKED:
                raise CrawdadError(
                    f"{self.path}: its GGUF arrays hold more than {MAX_WALKED:,} strings or "
                    "arrays: a damaged header"
                )
            if item == 8:
                self.skip_strings(length)
            else:
                for _ in range(length):
                    self.value(item, depth + 1)
            return length
        raise CrawdadError(f"{self.path}: GGUF value type {kind} is unknown: a damaged header")


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's metadata (arrays are skipped: their length alone is kept; a string longer
    than MAX_KEPT bytes is None)."""
    with opened(path, "GGUF file") as f:
        r = _Reader(f, path)
        if f.read(4) != b"GGUF":
            raise CrawdadError(f"{path}: not a GGUF file (no GGUF magic at its start)")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise CrawdadError(f"{path}: GGUF version {version}, crawdad reads 2 and 3")
        _tensors, count = struct.unpack("<QQ", r.take(16))
        if count > MAX_KEYS:
            raise CrawdadError(f"{path}: {count} metadata keys: a damaged GGUF header")
        meta: dict[str, Any] = {}
        for _ in range(count):
            key = r.string(keep=MAX_KEY)
            if key is None:
                raise CrawdadError(f"{path}: a GGUF key longer than {MAX_KEY} bytes")
            meta[key] = r.value(r.unpack("<I"))
    return meta


def gguf_footprint(path: Path, weights_gb: float | None = None) -> Footprint:
    """From the GGUF header; the weights are the file (its size, or `weights_gb`)."""
    meta = gguf_metadata(path)
    where = f"{path} (GGUF header)"
    arch = text(meta.get("general.architecture"), 100) or ""

    def count(key: str, high: int = MAX_WIDTH) -> int | None:
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
