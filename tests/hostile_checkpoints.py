"""Hostile checkpoints, manifests, server answers and serve settings (issue 51).

Every case is a function `case(tmp) -> Case` registered with `@hostile` (or a family made by a
loop): it builds what a user's disk, a server or a config may hold (a FIFO named
model.safetensors, a header of a million dimensions, a GGUF string of 2**63 bytes, an Ollama
digest of `../x`, an /api/show answer that never ends, `vllm --version` printing forever...),
cheaply (big files are sparse, made with truncate), and says what crawdad must make of it:
a CrawdadError whose message matches `says` and names `names` (the file, the server's path or
the setting), or a result `sane` accepts (a plan whose numbers can be). Never a traceback.

tests/test_hostile_checkpoints.py runs every case in one child process (`main`), each timed
and its memory traced, with an alarm that turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import struct
import sys
import threading
import time
import traceback
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ALARM_S = 60  # a case still running after this long is a hang (the test's bound is 30 s)
QWEN = {
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_size": 512,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}
TAG = "smol:135m"  # an Ollama tag not pulled: sized by /api/show, else by its name


@dataclass
class Case:
    run: Callable[[], Any]  # what crawdad does with the hostile input
    says: str | None = None  # a regex the CrawdadError must match; None: it must succeed
    names: str | None = None  # text the error must hold (the file, the answer's URL)
    sane: Callable[[Any], bool] | None = None  # what a success must be


Make = Callable[[Path], Case]
CASES: dict[str, Make] = {}


def hostile(fn: Make) -> Make:
    CASES[fn.__name__] = fn
    return fn


# --- builders ---------------------------------------------------------------------------------


def sparse(path: Path, size: int, head: bytes = b"") -> Path:
    """`head`, then zeros up to `size` bytes that take no room on disk."""
    path.write_bytes(head)
    with path.open("r+b") as f:
        f.truncate(size)
    return path


def st_bytes(header: bytes, data: int = 0) -> bytes:
    return struct.pack("<Q", len(header)) + header + b"\0" * data


def hf(tmp: Path, config: dict[str, Any] | bytes | None = None) -> Path:
    """A Hugging Face folder: config.json and one small valid safetensors file."""
    folder = tmp / "model"
    folder.mkdir(exist_ok=True)
    raw = config if isinstance(config, bytes) else json.dumps(config or QWEN).encode()
    (folder / "config.json").write_bytes(raw)
    return folder


def st_folder(tmp: Path, header: Any, data: int = 0, raw: bytes | None = None) -> Path:
    """A folder whose model.safetensors has `header` (JSON, or `raw` bytes as they are)."""
    folder = hf(tmp)
    body = raw if raw is not None else json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(st_bytes(body, data))
    return folder / "model.safetensors"


def tensor(dtype: Any = "F16", shape: Any = (4,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, value: bytes) -> bytes:
    return gguf_string(key) + struct.pack("<I", kind) + value


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


GOOD_KV = [
    kv("general.architecture", 8, gguf_string("llama")),
    kv("llama.block_count", 4, u32(30)),
    kv("llama.attention.head_count", 4, u32(9)),
    kv("llama.embedding_length", 4, u32(576)),
    kv("llama.context_length", 4, u32(8192)),
]


def gguf(path: Path, pairs: list[bytes], count: int | None = None, size: int = 0) -> Path:
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs) if count is None else count)
    path.write_bytes(head + b"".join(pairs))
    if size:
        with path.open("r+b") as f:
            f.truncate(size)
    return path


# --- what crawdad does with them --------------------------------------------------------------


def serve(engine: str, weights: str, **more: Any) -> Any:
    from crawdad.config import ServeConfig

    return ServeConfig(engine=engine, weights=weights, **more)  # type: ignore[arg-type]


def plan_of(engine: str, weights: str, url: str | None = None) -> Callable[[], Any]:
    """`crawdad serve --plan` of a config whose two agents and extractor serve `weights` (on
    two simulated 80 GiB GPUs, ports not probed)."""

    def run() -> Any:
        from crawdad.config import load_config
        from crawdad.serving.gpus import simulated
        from crawdad.serving.plan import plan_config

        backend = "ollama" if engine == "ollama" else "openai"
        spec = {"model": "m", "backend": backend, "serve": {"engine": engine, "weights": weights}}
        if url:
            spec["base_urls"] = [url]
        agents = [{**spec, "name": n} for n in ("a", "b")]
        # as the CLI reads a config: a refused value is an error naming it, never a traceback
        config = load_config(None, {"agents": agents, "extractor": spec})
        return plan_config(config, simulated(2, 80), check_ports=False)

    return run


def sane_plan(plan: Any) -> bool:
    """Every number of the plan one a server can take."""
    return bool(plan.servers) and all(
        1 <= s.port <= 65535
        and 1 <= s.context_length <= 100_000_000
        and math.isfinite(s.memory_gib)
        and s.memory_gib >= 0
        and (s.memory_fraction is None or 0 < s.memory_fraction <= 1)
        and all(len(a) < 1000 for a in s.command)
        for s in plan.servers
    )


def hf_case(tmp: Path, says: str | None, names: Path | None = None) -> Case:
    folder = tmp / "model"
    return Case(plan_of("vllm", str(folder)), says, str(names) if names else None, sane_plan)


# --- safetensors ------------------------------------------------------------------------------

VALID = {"__metadata__": {"format": "pt"}, "w": tensor()}


def _st_family(name: str, header: Any, says: str | None, data: int = 8) -> None:
    def make(tmp: Path) -> Case:
        path = st_folder(tmp, header, data)
        return hf_case(tmp, says, path if says else None)

    CASES[name] = make


for _name, _tensor, _says in [
    ("st_shape_negative", tensor(shape=[-1, 4]), r"shape\[0\] = -1"),
    ("st_shape_huge", tensor(shape=[10**30]), r"shape\[0\]"),
    ("st_shape_product_past_cap", tensor(shape=[2**40, 2**40]), r"more than .* elements"),
    ("st_shape_float", tensor(shape=[1.5]), r"shape\[0\] = 1\.5"),
    ("st_shape_string", tensor(shape=["4"]), r"shape\[0\] = '4'"),
    ("st_shape_bool", tensor(shape=[True]), r"shape\[0\] = True"),
    ("st_shape_null", tensor(shape=[None]), r"shape\[0\]"),
    ("st_shape_not_a_list", {**tensor(), "shape": "4x4"}, r"shape is not a list"),
    ("st_shape_17_dims", tensor(shape=[1] * 17), r"at most 16"),
    ("st_dtype_unknown", tensor(dtype="F128"), r"dtype 'F128'"),
    ("st_dtype_missing", {"shape": [4], "data_offsets": [0, 8]}, r"dtype None"),
    ("st_dtype_a_list", tensor(dtype=["F16"]), r"dtype None"),
    ("st_dtype_huge", tensor(dtype="F" * 100_000), r"dtype 'FFFF"),
    ("st_offsets_missing", {"dtype": "F16", "shape": [4]}, r"data_offsets are not"),
    ("st_offsets_three", tensor(offsets=[0, 4, 8]), r"data_offsets are not"),
    ("st_offsets_negative", tensor(offsets=[-2, 6]), r"data_offsets\[0\] = -2"),
    ("st_offsets_reversed", tensor(offsets=[8, 0]), r"hold -8 bytes"),
    ("st_offsets_past_the_file", tensor(shape=[2**39], offsets=[0, 2**40]), r"data_offsets"),
    ("st_offsets_wrong_size", tensor(offsets=[0, 2]), r"need 8"),
    ("st_offsets_strings", tensor(offsets=["0", "8"]), r"data_offsets\[0\] = '0'"),
    ("st_tensor_a_number", 5, r"not a tensor's entry"),
    ("st_tensor_a_list", [1, 2], r"not a tensor's entry"),
]:
    _st_family(_name, {"w": _tensor}, _says)


for _name, _raw, _says in [
    ("st_header_not_json", b"{not json", r"cannot be read as JSON"),
    ("st_header_invalid_utf8", b'{"\xff\xfe": 1}', r"cannot be read as JSON"),
    ("st_header_deep_lists", b"[" * 100_000 + b"]" * 100_000, r"nested deeper"),
    ("st_header_deep_objects", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, r"nested deeper"),
    ("st_header_a_list", b"[1, 2, 3]", r"not a JSON object"),
    ("st_header_nan", b'{"w": {"dtype": "F16", "shape": [NaN], "data_offsets": [0, 8]}}', "NaN"),
    ("st_header_infinity", b'{"w": {"dtype": "F16", "shape": [Infinity]}}', "Infinity"),
    ("st_header_big_int", b'{"w": {"shape": [' + b"9" * 5000 + b"]}}", r"cannot be read"),
    ("st_header_1e400", b'{"w": {"dtype": "F16", "shape": [1e400]}}', r"shape\[0\] = inf"),
]:

    def _make(tmp: Path, raw: bytes = _raw, says: str = _says) -> Case:
        path = st_folder(tmp, None, 8, raw=raw)
        return hf_case(tmp, says, path)

    CASES[_name] = _make


@hostile
def st_many_dims(tmp: Path) -> Case:
    """2 MB of header holding a shape of a million dimensions (once: 56 s, quadratic)."""
    path = st_folder(tmp, {"w": tensor(shape=[2] * 1_000_000)})
    return hf_case(tmp, r"at most 16", path)


@hostile
def st_fifo(tmp: Path) -> Case:
    folder = hf(tmp)
    os.mkfifo(folder / "model.safetensors")
    return hf_case(tmp, r"is a FIFO", folder / "model.safetensors")


@hostile
def st_dev_zero(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").symlink_to("/dev/zero")
    return hf_case(tmp, r"is a device", folder / "model.safetensors")


@hostile
def st_dev_null(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").symlink_to("/dev/null")
    return hf_case(tmp, r"is a device", folder / "model.safetensors")


@hostile
def st_a_folder(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").mkdir()
    return hf_case(tmp, r"is a folder", folder / "model.safetensors")


@hostile
def st_dangling_link(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").symlink_to(tmp / "gone")
    return hf_case(tmp, r"cannot be read", folder / "model.safetensors")


@hostile
def st_empty(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").write_bytes(b"")
    return hf_case(tmp, r"ends early", folder / "model.safetensors")


@hostile
def st_four_bytes(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").write_bytes(b"\x10\0\0\0")
    return hf_case(tmp, r"ends early", folder / "model.safetensors")


@hostile
def st_header_length_2_63(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    return hf_case(tmp, r"header of 9,223,372,036,854,775,808 bytes", folder / "model.safetensors")


@hostile
def st_header_length_past_the_file(tmp: Path) -> Case:
    folder = hf(tmp)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 1000) + b"{}")
    return hf_case(tmp, r"in a file of 10 ", folder / "model.safetensors")


@hostile
def st_header_of_zeros_sparse(tmp: Path) -> Case:
    """A 15 MB header of zeros (within the cap): read once, refused as not JSON."""
    folder = hf(tmp)
    sparse(folder / "model.safetensors", 40_000_000, struct.pack("<Q", 15_000_000))
    return hf_case(tmp, r"cannot be read as JSON", folder / "model.safetensors")


@hostile
def st_header_past_the_cap_sparse(tmp: Path) -> Case:
    folder = hf(tmp)
    sparse(folder / "model.safetensors", 200_000_000, struct.pack("<Q", 150_000_000))
    return hf_case(tmp, r"reads at most", folder / "model.safetensors")


@hostile
def st_metadata_only(tmp: Path) -> Case:
    """No tensor at all: nothing to weigh, a plan all the same (sized by config.json)."""
    st_folder(tmp, {"__metadata__": {"format": "pt"}})
    return hf_case(tmp, None)


@hostile
def st_many_tensors(tmp: Path) -> Case:
    """10,000 small tensors (0.8 MB of header): read, and planned (more: the benchmark)."""
    header = {f"layers.{i}.w": tensor(offsets=(8 * i, 8 * i + 8)) for i in range(10_000)}
    st_folder(tmp, header, data=8 * 10_000)
    return hf_case(tmp, None)


@hostile
def st_tensor_name_of_a_megabyte(tmp: Path) -> Case:
    path = st_folder(tmp, {"w" * 1_000_000: tensor(dtype="F128")})
    return hf_case(tmp, r"tensor 'wwww[^']{0,80}'", path)


@hostile
def st_too_many_files(tmp: Path) -> Case:
    folder = hf(tmp)
    for i in range(10_001):
        (folder / f"m-{i}.safetensors").touch()
    return hf_case(tmp, r"more than 10,000", folder)


@hostile
def st_valid(tmp: Path) -> Case:
    """The control: a valid folder gives a sane plan."""
    st_folder(tmp, VALID, data=8)
    return hf_case(tmp, None)


# --- config.json and the index ----------------------------------------------------------------


def _cfg_family(name: str, config: dict[str, Any] | bytes, says: str | None) -> None:
    def make(tmp: Path) -> Case:
        folder = hf(tmp, config)
        (folder / "model.safetensors").write_bytes(st_bytes(json.dumps(VALID).encode(), 8))
        return hf_case(tmp, says, folder / "config.json" if says else None)

    CASES[name] = make


for _name, _config, _says in [
    ("cfg_layers_negative", {**QWEN, "num_hidden_layers": -3}, r"num_hidden_layers = -3"),
    ("cfg_layers_string", {**QWEN, "num_hidden_layers": "64"}, r"num_hidden_layers = '64'"),
    ("cfg_layers_huge", {**QWEN, "num_hidden_layers": 10**18}, r"num_hidden_layers"),
    ("cfg_layers_bool", {**QWEN, "num_hidden_layers": True}, r"num_hidden_layers = True"),
    ("cfg_layers_fraction", {**QWEN, "num_hidden_layers": 1.5}, r"num_hidden_layers = 1\.5"),
    ("cfg_layers_a_list", {**QWEN, "num_hidden_layers": [4]}, r"num_hidden_layers = \[4\]"),
    ("cfg_heads_zero", {**QWEN, "num_attention_heads": 0}, r"num_attention_heads = 0"),
    ("cfg_kv_heads_negative", {**QWEN, "num_key_value_heads": -8}, r"num_key_value_heads"),
    ("cfg_head_dim_huge", {**QWEN, "head_dim": 10**40}, r"head_dim"),
    ("cfg_hidden_string", {**QWEN, "head_dim": None, "hidden_size": "x"}, r"hidden_size"),
    ("cfg_kv_lora_string", {**QWEN, "kv_lora_rank": "512"}, r"kv_lora_rank = '512'"),
    ("cfg_rope_dim_negative", {**QWEN, "kv_lora_rank": 8, "qk_rope_head_dim": -1}, r"qk_rope"),
    ("cfg_context_negative", {**QWEN, "max_position_embeddings": -100}, r"= -100"),
    ("cfg_context_zero", {**QWEN, "max_position_embeddings": 0}, r"max_position_embeddings = 0"),
    ("cfg_context_huge", {**QWEN, "max_position_embeddings": 10**12}, r"max_position"),
    ("cfg_text_config_bad", {**QWEN, "text_config": {"num_hidden_layers": -1}}, r"= -1"),
    ("cfg_a_list", b"[1, 2]", r"not a JSON object"),
    ("cfg_not_json", b"{'python': 'dict'}", r"cannot be read as JSON"),
    ("cfg_utf16", json.dumps(QWEN).encode("utf-16"), None),  # JSON may be UTF-16
    ("cfg_nan", b'{"num_hidden_layers": NaN}', r"NaN is not a JSON number"),
    ("cfg_infinity", b'{"num_hidden_layers": -Infinity}', r"Infinity is not a JSON number"),
    ("cfg_1e400", b'{"num_hidden_layers": 1e400, "num_attention_heads": 8}', r"= inf"),
    ("cfg_big_int", b'{"num_hidden_layers": ' + b"9" * 5000 + b"}", r"cannot be read"),
    ("cfg_deep", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, r"nested deeper than 64"),
    ("cfg_text_config_a_list", {**QWEN, "text_config": [1]}, None),
    ("cfg_quant_a_string", {**QWEN, "quantization_config": "fp8"}, None),
    ("cfg_quant_method_long", {**QWEN, "quantization_config": {"quant_method": "x" * 10**6}}, None),
    ("cfg_dtype_a_list", {**QWEN, "torch_dtype": ["bfloat16"]}, None),
    ("cfg_dtype_control", {**QWEN, "torch_dtype": "bf\x1b[31m16"}, None),
    ("cfg_heads_missing", {"num_hidden_layers": 4}, None),
    ("cfg_integral_float", {**QWEN, "num_hidden_layers": 4.0}, None),
]:
    _cfg_family(_name, _config, _says)


@hostile
def cfg_fifo(tmp: Path) -> Case:
    folder = tmp / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    return hf_case(tmp, r"is a FIFO", folder / "config.json")


@hostile
def cfg_dev_zero(tmp: Path) -> Case:
    folder = tmp / "model"
    folder.mkdir()
    (folder / "config.json").symlink_to("/dev/zero")
    return hf_case(tmp, r"is a device", folder / "config.json")


@hostile
def cfg_a_gigabyte_sparse(tmp: Path) -> Case:
    folder = tmp / "model"
    folder.mkdir()
    sparse(folder / "config.json", 1_000_000_000, json.dumps(QWEN).encode())
    return hf_case(tmp, r"larger than 16 MB", folder / "config.json")


@hostile
def cfg_a_folder(tmp: Path) -> Case:
    folder = tmp / "model"
    (folder / "config.json").mkdir(parents=True)
    return hf_case(tmp, r"is a folder", folder / "config.json")


def _index_family(name: str, index: bytes, says: str | None) -> None:
    def make(tmp: Path) -> Case:
        folder = hf(tmp)
        (folder / "model.safetensors.index.json").write_bytes(index)
        (folder / "model.safetensors").write_bytes(st_bytes(json.dumps(VALID).encode(), 8))
        names = folder / "model.safetensors.index.json"
        return hf_case(tmp, says, names if says else None)

    CASES[name] = make


for _name, _index, _says in [
    ("index_total_negative", b'{"metadata": {"total_size": -1}}', r"total_size = -1"),
    ("index_total_huge", b'{"metadata": {"total_size": 1e30}}', r"total_size"),
    ("index_total_string", b'{"metadata": {"total_size": "65GB"}}', r"total_size = '65GB'"),
    ("index_params_negative", b'{"metadata": {"total_size": 8, "total_parameters": -4}}', "-4"),
    ("index_deep", b"[" * 10_000, r"nested deeper"),
    ("index_not_json", b"\x00\x01", r"cannot be read as JSON"),
    ("index_metadata_a_list", b'{"metadata": [1]}', None),
    ("index_total_zero", b'{"metadata": {"total_size": 0}}', None),
]:
    _index_family(_name, _index, _says)


@hostile
def index_fifo(tmp: Path) -> Case:
    folder = hf(tmp)
    os.mkfifo(folder / "model.safetensors.index.json")
    return hf_case(tmp, r"is a FIFO", folder / "model.safetensors.index.json")


@hostile
def bin_weights_fifo(tmp: Path) -> Case:
    """A .bin that is a FIFO is weighed by its size (0), never opened."""
    folder = hf(tmp)
    os.mkfifo(folder / "pytorch_model.bin")
    return hf_case(tmp, None)


def _hub(tmp: Path, ref: bytes | None) -> tuple[Path, Path]:
    hub = tmp / "hub"
    repo = hub / "models--org--m"
    hf(tmp)
    (repo / "snapshots").mkdir(parents=True)
    os.rename(tmp / "model", repo / "snapshots" / "abc")
    (repo / "refs").mkdir()
    if ref is not None:
        (repo / "refs" / "main").write_bytes(ref)
    return hub, repo / "refs" / "main"


def _hub_case(hub: Path, says: str | None, names: Path | None) -> Case:
    def run() -> Any:
        os.environ["HF_HUB_CACHE"] = str(hub)
        return plan_of("vllm", "org/m")()

    return Case(run, says, str(names) if names else None, sane_plan)


@hostile
def hub_ref_out_of_snapshots(tmp: Path) -> Case:
    hub, ref = _hub(tmp, b"../../../../etc")
    return _hub_case(hub, r"names no snapshot", ref)


@hostile
def hub_ref_fifo(tmp: Path) -> Case:
    hub, ref = _hub(tmp, None)
    os.mkfifo(ref)
    return _hub_case(hub, r"is a FIFO", ref)


@hostile
def hub_ref_a_gigabyte_sparse(tmp: Path) -> Case:
    hub, ref = _hub(tmp, None)
    sparse(ref, 1_000_000_000, b"abc")
    return _hub_case(hub, r"larger than", ref)


@hostile
def hub_ref_valid(tmp: Path) -> Case:
    hub, ref = _hub(tmp, b"abc\n")
    (ref.parent.parent / "snapshots" / "abc" / "model.safetensors").write_bytes(
        st_bytes(json.dumps(VALID).encode(), 8)
    )
    return _hub_case(hub, None, None)


def _weights_family(name: str, weights: str) -> None:
    for engine in ("vllm", "llamacpp", "ollama"):

        def make(tmp: Path, engine: str = engine) -> Case:
            return Case(plan_of(engine, weights), r"weights|not pulled|is not a file", None)

        CASES[f"weights_{name}_{engine}"] = make


_weights_family("name_too_long", "x" * 5000)
_weights_family("of_an_unknown_user", "~nosuchuser-crawdad/x")
_weights_family("with_a_nul", "org/a\x00b")


# --- GGUF -------------------------------------------------------------------------------------


def gguf_case(path: Path, says: str | None) -> Case:
    return Case(plan_of("llamacpp", str(path)), says, str(path) if says else None, sane_plan)


def _gguf_family(name: str, pairs: list[bytes], says: str | None, **more: Any) -> None:
    def make(tmp: Path) -> Case:
        return gguf_case(gguf(tmp / "m.gguf", pairs, **more), says)

    CASES[name] = make


HUGE = 2**63
for _name, _pairs, _says, _more in [
    ("gguf_valid", GOOD_KV, None, {}),
    ("gguf_key_count_2_63", GOOD_KV, r"metadata keys", {"count": HUGE}),
    ("gguf_key_count_100001", GOOD_KV, r"100001 metadata keys", {"count": 100_001}),
    ("gguf_key_count_past_the_pairs", GOOD_KV, r"ends early", {"count": 50}),
    ("gguf_key_length_2_63", [struct.pack("<Q", HUGE)], r"ends early", {}),
    ("gguf_key_of_70_kb", [gguf_string("k" * 70_000) + u32(4) + u32(1)], r"key longer", {}),
    ("gguf_string_2_63", [gguf_string("s") + u32(8) + struct.pack("<Q", HUGE)], r"ends early", {}),
    ("gguf_unknown_type", [gguf_string("k") + u32(99)], r"type 99 is unknown", {}),
    ("gguf_array_of_2_40_strings", [kv("t", 9, u32(8) + struct.pack("<Q", 2**40))], "4,000,000", {}),
    ("gguf_array_of_2_62_u32", [kv("t", 9, u32(4) + struct.pack("<Q", 2**62))], r"ends early", {}),
    ("gguf_array_of_2_64_u64", [kv("t", 9, u32(10) + struct.pack("<Q", 2**64 - 1))], "ends", {}),
    (
        "gguf_arrays_nested_3",
        [kv("t", 9, (u32(9) + struct.pack("<Q", 1)) * 3)],
        r"nested deeper",
        {},
    ),
    ("gguf_blocks_negative", [*GOOD_KV, kv("llama.block_count", 5, struct.pack("<i", -5))], "-5", {}),
    ("gguf_blocks_nan", [*GOOD_KV, kv("llama.block_count", 6, struct.pack("<f", math.nan))], "nan", {}),
    ("gguf_context_zero", [*GOOD_KV, kv("llama.context_length", 4, u32(0))], r"context_length", {}),
    (
        "gguf_context_2_64",
        [*GOOD_KV, kv("llama.context_length", 10, struct.pack("<Q", 2**64 - 1))],
        r"context_length",
        {},
    ),
    ("gguf_file_type_huge", [*GOOD_KV, kv("general.file_type", 4, u32(2**31))], r"file_type", {}),
    (
        "gguf_parameters_2_64",
        [*GOOD_KV, kv("general.parameter_count", 10, struct.pack("<Q", 2**64 - 1))],
        r"parameter_count",
        {},
    ),
    ("gguf_heads_a_string", [*GOOD_KV, kv("llama.attention.head_count", 8, gguf_string("9"))], "'9'", {}),
    ("gguf_arch_a_number", [kv("general.architecture", 4, u32(7)), *GOOD_KV[1:]], None, {}),
    ("gguf_arch_of_a_megabyte", [kv("general.architecture", 8, gguf_string("a" * 10**6))], None, {}),
    ("gguf_arch_invalid_utf8", [kv("general.architecture", 8, gguf_string(b"\xff\xfe"))], None, {}),
]:  # fmt: skip
    _gguf_family(_name, _pairs, _says, **_more)


@hostile
def gguf_bad_magic(tmp: Path) -> Case:
    path = tmp / "m.gguf"
    path.write_bytes(b"GGML" + b"\0" * 100)
    return gguf_case(path, r"no GGUF magic")


@hostile
def gguf_empty(tmp: Path) -> Case:
    path = tmp / "m.gguf"
    path.write_bytes(b"")
    return gguf_case(path, r"no GGUF magic")


@hostile
def gguf_version_99(tmp: Path) -> Case:
    path = tmp / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    return gguf_case(path, r"version 99")


@hostile
def gguf_truncated(tmp: Path) -> Case:
    path = gguf(tmp / "m.gguf", GOOD_KV)
    path.write_bytes(path.read_bytes()[:-3])
    return gguf_case(path, r"ends early")


@hostile
def gguf_fifo(tmp: Path) -> Case:
    os.mkfifo(tmp / "m.gguf")
    return gguf_case(tmp / "m.gguf", r"is not a file")


@hostile
def gguf_dev_zero(tmp: Path) -> Case:
    (tmp / "m.gguf").symlink_to("/dev/zero")
    return gguf_case(tmp / "m.gguf", r"is not a file")


@hostile
def gguf_chat_template_of_500_mb_sparse(tmp: Path) -> Case:
    """A 500 MB string (once read whole): skipped, not kept."""
    template = kv("tokenizer.chat_template", 8, struct.pack("<Q", 500_000_000))
    path = tmp / "m.gguf"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(GOOD_KV) + 1) + b"".join(GOOD_KV) + template
    sparse(path, len(head) + 500_000_000 + 100, head)
    return gguf_case(path, None)


@hostile
def gguf_tokens_100k(tmp: Path) -> Case:
    """A real tokenizer's size: 100,000 strings walked and dropped."""
    tokens = b"".join(gguf_string(f"tok{i}") for i in range(100_000))
    pairs = [*GOOD_KV, kv("tokenizer.ggml.tokens", 9, u32(8) + struct.pack("<Q", 100_000) + tokens)]
    return gguf_case(gguf(tmp / "m.gguf", pairs, size=50_000_000), None)


# --- Ollama: manifests, blobs, tags -----------------------------------------------------------

MODEL_LAYER = "application/vnd.ollama.image.model"
DIGEST = "sha256:" + "ab" * 32


def ollama(tmp: Path, manifest: bytes | None, tag: str = TAG) -> tuple[Path, Path]:
    models = tmp / "ollama"
    name, _, version = tag.partition(":")
    path = models / "manifests" / "registry.ollama.ai" / "library" / name / (version or "latest")
    path.parent.mkdir(parents=True)
    (models / "blobs").mkdir()
    if manifest is not None:
        path.write_bytes(manifest)
    return models, path


def layers(*items: Any) -> bytes:
    return json.dumps({"layers": list(items)}).encode()


def ollama_case(
    models: Path, says: str | None, names: Path | str | None = None, tag: str = TAG
) -> Case:
    def run() -> Any:
        os.environ["OLLAMA_MODELS"] = str(models)
        return plan_of("ollama", tag)()

    return Case(run, says, str(names) if names else None, sane_plan)


def _manifest_family(name: str, manifest: bytes, says: str | None) -> None:
    def make(tmp: Path) -> Case:
        models, path = ollama(tmp, manifest)
        return ollama_case(models, says, path if says else None)

    CASES[name] = make


for _name, _manifest, _says in [
    ("ollama_digest_dotdot", layers({"mediaType": MODEL_LAYER, "digest": "../x"}), r"'\.\./x'"),
    ("ollama_digest_absolute", layers({"mediaType": MODEL_LAYER, "digest": "/etc/passwd"}), "passwd"),
    ("ollama_digest_dotdot_hex", layers({"mediaType": MODEL_LAYER, "digest": "sha256:../" + "a" * 61}), r"not sha256"),
    ("ollama_digest_short", layers({"mediaType": MODEL_LAYER, "digest": "sha256:abc"}), r"not sha256"),
    ("ollama_digest_upper", layers({"mediaType": MODEL_LAYER, "digest": DIGEST.upper()}), r"not sha256"),
    ("ollama_digest_a_number", layers({"mediaType": MODEL_LAYER, "digest": 5}), r"digest None"),
    ("ollama_digest_missing", layers({"mediaType": MODEL_LAYER}), r"digest None"),
    ("ollama_digest_newline", layers({"mediaType": MODEL_LAYER, "digest": DIGEST + "\n"}), "not sha256"),
    ("ollama_layers_2000", layers(*[{"mediaType": "x"}] * 2000), r"at most 1024"),
    ("ollama_layers_a_string", b'{"layers": "x"}', r"layers are not a list"),
    ("ollama_layers_missing", b"{}", r"layers are not a list"),
    ("ollama_manifest_deep", b"[" * 100_000, r"nested deeper"),
    ("ollama_manifest_not_json", b"<html>", r"cannot be read as JSON"),
    ("ollama_manifest_a_list", b"[]", r"not a JSON object"),
    ("ollama_media_types_odd", layers(5, None, {"mediaType": ["x"]}, {"mediaType": 7}), None),
    ("ollama_digest_missing_blob", layers({"mediaType": MODEL_LAYER, "digest": DIGEST}), None),
]:  # fmt: skip
    _manifest_family(_name, _manifest, _says)


@hostile
def ollama_manifest_fifo(tmp: Path) -> Case:
    models, path = ollama(tmp, None)
    os.mkfifo(path)
    return ollama_case(models, r"is a FIFO", path)


@hostile
def ollama_manifest_a_gigabyte_sparse(tmp: Path) -> Case:
    models, path = ollama(tmp, None)
    sparse(path, 1_000_000_000, layers())
    return ollama_case(models, r"larger than 1 MB", path)


@hostile
def ollama_blob_fifo(tmp: Path) -> Case:
    models, _ = ollama(tmp, layers({"mediaType": MODEL_LAYER, "digest": DIGEST}))
    blob = models / "blobs" / f"sha256-{'ab' * 32}"
    os.mkfifo(blob)
    return ollama_case(models, r"is a FIFO", blob)


@hostile
def ollama_blob_dev_zero(tmp: Path) -> Case:
    models, _ = ollama(tmp, layers({"mediaType": MODEL_LAYER, "digest": DIGEST}))
    blob = models / "blobs" / f"sha256-{'ab' * 32}"
    blob.symlink_to("/dev/zero")
    return ollama_case(models, r"is a device", blob)


@hostile
def ollama_blob_valid(tmp: Path) -> Case:
    models, _ = ollama(tmp, layers({"mediaType": MODEL_LAYER, "digest": DIGEST}))
    gguf(models / "blobs" / f"sha256-{'ab' * 32}", GOOD_KV, size=1_000_000)
    return ollama_case(models, None)


@hostile
def ollama_tag_out_of_manifests(tmp: Path) -> Case:
    """A tag of `..` parts names no manifest: sized from its name (here: it has no size)."""
    models, _ = ollama(tmp, layers())
    return ollama_case(models, r"not pulled here", "../../x", tag="../../../x:..")


@hostile
def ollama_tag_of_a_huge_size(tmp: Path) -> Case:
    models, _ = ollama(tmp, layers())
    return ollama_case(models, r"is not a model's size", "x:", tag="x:" + "9" * 400 + "b")


# --- /api/show (Ollama, a tag not pulled here) and /version answers ---------------------------


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading: what the bounds do


class Hostile:
    """One local server; each case sets what it answers (`mode`)."""

    mode = "valid"
    server: ThreadingHTTPServer | None = None

    @classmethod
    def url(cls) -> str:
        if cls.server is None:
            cls.server = _Server(("127.0.0.1", 0), _Handler)
            cls.server.daemon_threads = True
            threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{cls.server.server_address[1]}"


SHOW = {
    "details": {"quantization_level": "Q8_0"},
    "model_info": {"general.architecture": "llama", "general.parameter_count": 135_000_000},
}
BODIES: dict[str, bytes] = {
    "valid": json.dumps(SHOW).encode(),
    "deep": b"[" * 200_000,
    "deep_objects": b'{"a":' * 100_000,
    "not_json": b"<html>502 Bad Gateway</html>",
    "nan": b'{"model_info": {"general.parameter_count": NaN}}',
    "big_int": b'{"model_info": {"general.parameter_count": ' + b"9" * 5000 + b"}}",
    "params_1e400": b'{"model_info": {"general.parameter_count": 1e400}}',
    "params_string": b'{"model_info": {"general.parameter_count": "8b"}}',
    "params_negative": b'{"model_info": {"general.parameter_count": -8}}',
    "layers_huge": json.dumps(
        {"model_info": {**SHOW["model_info"], "llama.block_count": 10**20}}  # type: ignore[dict-item]
    ).encode(),
    "context_negative": json.dumps(
        {"model_info": {**SHOW["model_info"], "llama.context_length": -1}}  # type: ignore[dict-item]
    ).encode(),
    "info_a_list": b'{"model_info": [1, 2], "details": "x"}',
    "a_list": b"[1, 2, 3]",
    "version_long": json.dumps({"version": "9" * 60_000}).encode(),
    "version_a_list": b'{"version": ["0.9"]}',
    "version_control": json.dumps({"version": "0.9\x1b[31m\x00\n"}).encode(),
    "version_valid": b'{"version": "0.9.2"}',
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        mode = Hostile.mode
        try:
            if mode == "redirect":
                self.send_response(302)
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif mode == "status_500":
                self._head(500, 2)
                self.wfile.write(b"{}")
            elif mode in ("huge", "endless"):
                self._head(200, 200_000_000 if mode == "huge" else None)
                chunk = b"[" + b" " * 65_534 + b"]"
                for _ in range(3_000 if mode == "huge" else 10**9):
                    self.wfile.write(chunk)
            elif mode == "trickle":
                self._head(200, None)
                for _ in range(10**6):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            elif mode == "lying_length":
                self._head(200, 10**15)
                self.wfile.write(BODIES["valid"])
            else:
                body = BODIES[mode]
                self._head(200, len(body))
                self.wfile.write(body)
        except OSError:
            pass  # the client stopped reading: what a bound does

    def _head(self, status: int, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if length is None:
            self.send_header("Connection", "close")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()


def show_case(mode: str, says: str | None) -> Make:
    def make(tmp: Path) -> Case:
        models, _ = ollama(tmp, None, tag="other:1b")
        url = Hostile.url()

        def run() -> Any:
            Hostile.mode = mode
            os.environ["OLLAMA_MODELS"] = str(models)
            return plan_of("ollama", TAG, url)()

        return Case(run, says, f"{url}/api/show" if says else None, sane_plan)

    return make


for _mode, _says in [
    ("valid", None),
    ("huge", r"more than 4,000,000 bytes"),
    ("endless", r"more than 4,000,000 bytes"),
    ("trickle", r"took more than"),
    ("deep", r"nested deeper"),
    ("deep_objects", r"nested deeper"),
    ("not_json", r"cannot be read as JSON"),
    ("nan", r"NaN"),
    ("big_int", r"cannot be read as JSON"),
    ("params_1e400", r"parameter_count = inf"),
    ("params_string", r"parameter_count = '8b'"),
    ("params_negative", r"parameter_count = -8"),
    ("layers_huge", r"block_count"),
    ("context_negative", r"context_length = -1"),
    ("info_a_list", None),
    ("a_list", None),
    ("redirect", None),
    ("status_500", None),
    ("lying_length", None),  # its bytes end early: no answer, sized from the tag
]:
    CASES[f"show_{_mode}"] = show_case(_mode, _says)


def short_version(found: Any) -> bool:
    return found is None or (isinstance(found, str) and len(found) <= 200 and found.isprintable())


def version_case(
    mode: str, program: str = "exit 3", sane: Callable[[Any], bool] = short_version
) -> Make:
    """served_by.server_version against a hostile /version, then the engine's own program
    (`vllm --version`) where the answer gives none."""

    def make(tmp: Path) -> Case:
        url = Hostile.url()
        vllm = tmp / "bin" / "vllm"
        vllm.parent.mkdir()
        vllm.write_text(f"#!/bin/sh\n{program}\n")
        vllm.chmod(0o755)

        def run() -> Any:
            import httpx

            from crawdad.serving.base import ServerPlan
            from crawdad.serving.served_by import server_version

            Hostile.mode = mode
            port = int(url.rsplit(":", 1)[1])
            server = ServerPlan(
                key="m", engine="vllm", weights="w", served_name="m", models=["agents.0"],
                port=port, context_length=4096, command=[str(vllm), "serve", "w"],
            )  # fmt: skip

            async def ask() -> Any:
                async with httpx.AsyncClient() as client:
                    return await server_version(server, client)

            return asyncio.run(ask())

        return Case(run, None, None, sane)

    return make


for _mode in [
    "huge", "endless", "trickle", "deep", "not_json", "nan", "a_list", "version_long",
    "version_a_list", "version_control", "redirect", "status_500", "lying_length",
]:  # fmt: skip
    CASES[f"version_{_mode}"] = version_case(_mode)
CASES["version_valid"] = version_case("version_valid", sane=lambda v: v == "0.9.2")
CASES["vllm_version_forever"] = version_case("status_500", "exec yes")
CASES["vllm_version_sleeps"] = version_case("status_500", "echo 0.9; exec sleep 600")
CASES["vllm_version_leaves_a_child"] = version_case("status_500", "(sleep 600 &); echo 0.9")
CASES["vllm_version_one_long_line"] = version_case(
    "status_500", "head -c 60000 /dev/zero | tr '\\0' 'v'", lambda v: v == "v" * 200
)
CASES["vllm_version_binary"] = version_case("status_500", "head -c 4000 /dev/urandom")
CASES["vllm_version_valid"] = version_case("status_500", "echo 0.9.2", lambda v: v == "0.9.2")


def pull_case(mode: str) -> Make:
    """Ollama's list of tags (before a pull) answered by a hostile server: a PullError naming
    the server, never a traceback."""

    def make(tmp: Path) -> Case:
        url = Hostile.url()

        def run() -> Any:
            from crawdad.serving.base import ServerPlan
            from crawdad.serving.ollama_pull import pull_missing

            Hostile.mode = mode
            server = ServerPlan(
                key="ollama", engine="ollama", weights="smol:135m", served_name="smol:135m",
                models=["agents.0"], port=int(url.rsplit(":", 1)[1]), context_length=4096,
                command=["ollama", "serve"],
            )  # fmt: skip
            return asyncio.run(pull_missing(server, progress=False))

        return Case(run, r"server ollama: pulling smol:135m failed", None, None)

    return make


for _mode in ("not_json", "deep", "a_list", "nan", "status_500", "version_a_list"):
    CASES[f"pull_tags_{_mode}"] = pull_case(_mode)


# --- weights' hash (the manifest) -------------------------------------------------------------


def hash_case(weights: Callable[[Path], Path], engine: str = "llamacpp") -> Make:
    def make(tmp: Path) -> Case:
        path = weights(tmp)

        def run() -> Any:
            from crawdad.serving.weights import weights_hash

            os.environ["CRAWDAD_CACHE_DIR"] = str(tmp / "cache")
            return weights_hash(engine, str(path))

        return Case(run, None, None, lambda found: found is None)

    return make


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(path: Path, target: str) -> Path:
    path.symlink_to(target)
    return path


CASES["hash_fifo_gguf"] = hash_case(lambda t: _fifo(t / "m.gguf"))
CASES["hash_dev_zero_gguf"] = hash_case(lambda t: _link(t / "m.gguf", "/dev/zero"))
CASES["hash_fifo_safetensors"] = hash_case(lambda t: _fifo(t / "model.safetensors"), "vllm")
CASES["hash_config_a_gigabyte"] = hash_case(
    lambda t: sparse(hf(t) / "config.json", 1_000_000_000).parent, "vllm"
)


@hostile
def hash_cache_a_gigabyte(tmp: Path) -> Case:
    """The hash cache grown past its bound: a fresh one, the file hashed all the same."""
    (tmp / "cache").mkdir()
    sparse(tmp / "cache" / "weights-sha256.json", 1_000_000_000)
    gguf_path = gguf(tmp / "m.gguf", GOOD_KV)

    def run() -> Any:
        from crawdad.serving.weights import weights_hash

        os.environ["CRAWDAD_CACHE_DIR"] = str(tmp / "cache")
        return weights_hash("llamacpp", str(gguf_path))

    return Case(
        run, None, None, lambda found: isinstance(found, str) and found.startswith("sha256:")
    )


# --- servers/restarts.jsonl (the report's table of started servers) ---------------------------

RESTART = {"key": "m", "at": "2026-01-01T00:00:00Z", "reason": "exited", "downtime": 2.0}


def restarts_case(write: Callable[[Path], None], count: int, says: str | None) -> Make:
    """`started_servers` of a run whose restarts.jsonl `write` makes: `count` restarts of the
    server counted, and a warning matching `says` (None: no warning needed)."""

    def make(tmp: Path) -> Case:
        run_folder = tmp / "run"
        (run_folder / "servers").mkdir(parents=True)
        write(run_folder / "servers" / "restarts.jsonl")

        def run() -> Any:
            from crawdad.analysis.metrics.servers import started_servers

            from crawdad.records import StartedServer

            started = [StartedServer(key="m", engine="vllm", command=["vllm"], weights="w",
                                     served_name="m", models=["agents.0"], base_url="http://x")]  # fmt: skip
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                table = started_servers(run_folder, started)
            return int(table["restarts"].iloc[0]), [str(w.message) for w in said]

        def sane(found: Any) -> bool:
            restarts, said = found
            return restarts == count and (says is None or any(re.search(says, s) for s in said))

        return Case(run, None, None, sane)

    return make


_LINE = (json.dumps(RESTART) + "\n").encode()
CASES["restarts_two_gigabytes_of_zeros"] = restarts_case(
    lambda p: sparse(p, 2_000_000_000, _LINE) and None, 1, r"more than 4,000,000 bytes"
)
CASES["restarts_a_giant_line"] = restarts_case(
    lambda p: p.write_bytes(b'{"key": "' + b"m" * 2_000_000 + b'"}\n' + _LINE), 1, r"longer than"
)
CASES["restarts_fifo"] = restarts_case(lambda p: os.mkfifo(p), 0, r"is a FIFO")
CASES["restarts_link_out"] = restarts_case(
    lambda p: (
        (p.parent.parent.parent / "out.jsonl").write_bytes(_LINE * 5)
        and p.symlink_to(p.parent.parent.parent / "out.jsonl")
    ),
    0,
    r"is a link",
)
CASES["restarts_deep_lines"] = restarts_case(
    lambda p: p.write_bytes(b"[" * 100_000 + b"\n" + _LINE), 1, None
)
CASES["restarts_wrong_types"] = restarts_case(
    lambda p: p.write_bytes(
        b'{"key": 5, "at": "x"}\n{"key": "m", "at": "2026-01-01T00:00:00Z", "reason": "r", '
        b'"downtime": "long"}\n{"key": "m", "at": "2026-01-01T00:00:00Z", "reason": "r", '
        b'"downtime": NaN}\nnull\n' + _LINE
    ),
    1,
    None,
)
CASES["restarts_valid"] = restarts_case(lambda p: p.write_bytes(_LINE * 3), 3, None)


# --- serve settings and the plan's ports ------------------------------------------------------


def config_case(text: str, says: str) -> Make:
    def make(tmp: Path) -> Case:
        path = tmp / "c.toml"
        path.write_text(
            '[[agents]]\nname = "a"\nmodel = "m"\nbackend = "openai"\n[[agents]]\nname = "b"\n'
            'model = "m"\nbackend = "openai"\n' + text
        )

        def run() -> Any:
            from crawdad.config import load_config

            return load_config(path)

        return Case(run, says, None, None)

    return make


_SERVE = '[agents.serve]\nengine = "vllm"\nweights = "org/m"\n'
for _name, _text, _says in [
    ("replicas_0", _SERVE + "replicas = 0\n", r"replicas: give 1 to 256 servers.*got 0"),
    ("replicas_minus_1", _SERVE + "replicas = -1\n", r"replicas: give 1 to 256.*got -1"),
    ("replicas_a_million", _SERVE + "replicas = 1000000\n", r"replicas: give 1 to 256"),
    ("replicas_a_string", _SERVE + 'replicas = "many"\n', r"replicas"),
    ("tensor_parallel_0", _SERVE + "tensor_parallel = 0\n", r"tensor_parallel"),
    ("tensor_parallel_huge", _SERVE + "tensor_parallel = 9223372036854775807\n", r"tensor_par"),
    ("context_length_minus_100", _SERVE + "context_length = -100\n", r"context_length"),
    ("context_length_2_62", _SERVE + "context_length = 4611686018427387904\n", r"context_len"),
    ("weights_gb_inf", _SERVE + "weights_gb = inf\n", r"weights_gb"),
    ("weights_gb_nan", _SERVE + "weights_gb = nan\n", r"weights_gb"),
    ("weights_gb_1e308", _SERVE + "weights_gb = 1e308\n", r"weights_gb"),
    ("weights_gb_negative", _SERVE + "weights_gb = -4\n", r"weights_gb"),
    ("gpu_memory_2", _SERVE + "gpu_memory = 2.0\n", r"gpu_memory"),
    ("gpu_memory_nan", _SERVE + "gpu_memory = nan\n", r"gpu_memory"),
    ("first_port_70000", "[serving]\nfirst_port = 70000\n", r"first_port"),
    ("first_port_0", "[serving]\nfirst_port = 0\n", r"first_port"),
    ("first_port_negative", "[serving]\nfirst_port = -1\n", r"first_port"),
    ("startup_timeout_1e300", "[serving]\nstartup_timeout = 1e300\n", r"startup_timeout"),
    ("startup_timeout_inf", "[serving]\nstartup_timeout = inf\n", r"startup_timeout"),
    ("startup_timeout_nan", "[serving]\nstartup_timeout = nan\n", r"startup_timeout"),
    ("max_restarts_huge", "[serving]\nmax_restarts = 9223372036854775807\n", r"max_restarts"),
    ("max_restarts_negative", "[serving]\nmax_restarts = -1\n", r"max_restarts"),
    ("restart_window_inf", "[serving]\nrestart_window = inf\n", r"restart_window"),
    ("gpu_memory_limit_0", "[serving]\ngpu_memory_limit = 0\n", r"gpu_memory_limit"),
    ("gpu_memory_limit_nan", "[serving]\ngpu_memory_limit = nan\n", r"gpu_memory_limit"),
]:
    CASES[f"config_{_name}"] = config_case(_text, _says)


@hostile
def plan_ports_past_65535(tmp: Path) -> Case:
    """Servers from port 65000 up: 768 of them reach past 65535, refused with a message."""

    def run() -> Any:
        from crawdad.config import RunConfig
        from crawdad.serving.gpus import simulated
        from crawdad.serving.plan import plan_config

        def spec(weights: str) -> dict[str, Any]:
            serve = {"engine": "vllm", "weights": weights, "weights_gb": 1, "replicas": 256}
            return {"model": "m", "backend": "openai", "serve": serve}

        agents = [{**spec("o/a"), "name": "a"}, {**spec("o/b"), "name": "b"}]
        config = RunConfig.model_validate(
            {"agents": agents, "extractor": spec("o/c"), "serving": {"first_port": 65000}}
        )
        return plan_config(config, simulated(0, 80), {}, check_ports=False)

    return Case(run, r"ports past 65535", "serving.first_port")


def inventory_case(text: str | bytes, says: str, file: bool = False) -> Make:
    def make(tmp: Path) -> Case:
        value = text
        if file:
            path = tmp / "gpus.json"
            if text == "fifo":
                os.mkfifo(path)
            else:
                sparse(path, 1_000_000_000, text.encode() if isinstance(text, str) else text)
            value = str(path)

        def run() -> Any:
            from crawdad.serving.gpus import parse_inventory

            return parse_inventory(value if isinstance(value, str) else value.decode())

        return Case(run, says, None, None)

    return make


for _name, _text, _says, _file in [
    ("deep", "[" * 100_000, r"nested deeper", False),
    ("memory_absurd", '[{"index": 0, "name": "x", "memory_mib": 1e30}]', r"memory_mib", False),
    ("memory_nan", '[{"index": 0, "name": "x", "memory_mib": NaN}]', r"NaN", False),
    ("index_huge", '[{"index": 1e20, "name": "x", "memory_mib": 8}]', r"index", False),
    ("name_huge", '[{"index": 0, "name": "' + "x" * 10_000 + '", "memory_mib": 8}]', r"name", False),
    ("count_2000", json.dumps([{"index": i, "name": "x", "memory_mib": 8} for i in range(2000)]), r"more than 1024", False),
    ("file_a_gigabyte", "[]", r"larger than 1 MB", True),
    ("file_fifo", "fifo", r"neither a JSON list nor a file", True),
]:  # fmt: skip
    CASES[f"gpus_{_name}"] = inventory_case(_text, _says, _file)


# --- the child process that runs them ---------------------------------------------------------


class Hang(BaseException):
    """A case still running after ALARM_S (a BaseException: no `except OSError` takes it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"still running after {ALARM_S} s: a hang")


def run_case(name: str, tmp: Path) -> dict[str, Any]:
    from crawdad.errors import CrawdadError

    folder = tmp / name
    folder.mkdir()
    env = dict(os.environ)
    out: dict[str, Any] = {"name": name}
    tracemalloc.start()
    start = time.perf_counter()
    signal.alarm(ALARM_S)
    try:
        case = CASES[name](folder)
        out.update(says=case.says, names=case.names)
        tracemalloc.reset_peak()
        start = time.perf_counter()
        result = case.run()
        out["sane"] = bool(case.sane(result)) if case.sane else True
        out["result"] = repr(result)[:300]
    except CrawdadError as e:
        out["error"] = str(e)
    except BaseException as e:
        out["traceback"] = "".join(traceback.format_exception(e))[-3000:]
    finally:
        signal.alarm(0)
        out["seconds"] = time.perf_counter() - start
        out["peak_mb"] = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        os.environ.clear()
        os.environ.update(env)
    return out


def _peak_rss_mb() -> float | None:
    """This process's own peak resident memory (VmHWM, of its address space since exec; None
    off Linux). Not ru_maxrss: Linux keeps that across exec, so a child of a large process (an
    xdist worker after a thousand tests) would report its parent's size."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1e3  # kB
    return None


def main() -> None:
    """Run the cases named on the command line (all without), one JSON line each."""
    import resource

    import crawdad.analysis.metrics.servers

    import crawdad.serving.plan
    import crawdad.serving.served_by  # noqa: F401 - imported before the clocks start
    from crawdad.serving import bounded
    from crawdad.serving.engines import _common

    bounded.ANSWER_SECONDS = 1.0  # the bound as it is, shorter: the trickles end sooner
    _common.PROBE_TIMEOUT = 1.5
    signal.signal(signal.SIGALRM, _alarm)
    tmp = Path(sys.argv[1])
    names = sys.argv[2:] or list(CASES)
    for name in names:
        print(json.dumps(run_case(name, tmp)), flush=True)
    peak = _peak_rss_mb() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    print(json.dumps({"name": "__process__", "maxrss_mb": peak}), flush=True)


if __name__ == "__main__":
    main()
