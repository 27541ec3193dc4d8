"""The shared types of crawdad's model serving: the GPUs a machine has, what a model needs, the
plan that places each server, and the small interface every engine module implements.

Data flow: `config` (a model's `serve` table) + `gpus` (the inventory) + `sizes` (each model's
footprint) -> `plan.make_plan` -> `Plan` -> `supervisor` (start, watch, restart, stop) -> the
runner's `base_urls`. `crawdad serve --plan` prints a `Plan`; `--slurm` writes it as a script.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

EngineName = Literal["vllm", "sglang", "llamacpp", "ollama"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GPU(_Frozen):
    """One GPU of the inventory (NVML, `nvidia-smi`, or a simulated one in tests)."""

    index: int = Field(ge=0, le=65535)
    name: str = Field(max_length=200)
    memory_mib: int = Field(gt=0, le=16384 * 1024)  # total memory (16 TiB at most)
    uuid: str | None = None


class Footprint(_Frozen):
    """What serving one model needs, read from its checkpoint (config.json and weight files, or
    the GGUF header) before any GPU is touched."""

    weights_bytes: int = Field(ge=0)
    parameters: int | None = None
    dtype: str | None = None  # "bfloat16", "fp8", "Q4_1", ...
    quantization: str | None = None  # None: not quantized
    kv_bytes_per_token: int | None = None  # per sequence token, all layers (None: unknown)
    max_context: int | None = None  # the model's own limit
    source: str = ""  # where the figures came from (a path, "config.json", "GGUF header")


def kv_estimate(bf16_bytes: float) -> int:
    """KV cache bytes per token where a model's shape cannot be read, from its size at 16 bits:
    64 KiB + 3 bytes per million. Granite-3.3-2B (5 GB) 80 KiB, Llama-3-8B (16 GB) 128 KiB,
    Qwen3-32B (65 GB) 256 KiB, each within 15%; a 70B (140 GB) gets 470 KiB for its 320."""
    return int(65536 + 3e-6 * bf16_bytes)


class ServerPlan(_Frozen):
    """One server process the plan starts: which engine, which weights, on which GPUs."""

    key: str  # unique in the plan, a plain name: log file `servers/<key>.log`, manifest entry
    engine: EngineName
    weights: str  # a Hugging Face id or folder, a GGUF file, an Ollama tag
    served_name: str  # the model name the run asks for (the config's `model`)
    models: list[str]  # the config's places this server serves: "agents.0", "extractor", ...
    gpus: list[int] = Field(default_factory=list)  # GPU indices (empty: CPU)
    memory_fraction: float | None = None  # of each GPU (vLLM --gpu-memory-utilization, ...)
    memory_gib: float = 0.0  # what the plan expects the server to hold on each GPU
    tensor_parallel: int = 1
    replica: int = 0  # 0, 1, ... for replicas of one model
    host: str = "127.0.0.1"
    port: int
    context_length: int
    reasoning_parser: str | None = None
    structured_output: bool = False  # the extractor's JSON-schema output is used
    args: list[str] = Field(default_factory=list)  # the user's engine flags, passed through
    env: dict[str, str] = Field(default_factory=dict)  # CUDA_VISIBLE_DEVICES, OLLAMA_*, ...
    command: list[str]  # the exact command line (the same one `doctor` and errors suggest)
    # Sequences the server is planned to hold at once (llama.cpp's slots, OLLAMA_NUM_PARALLEL).
    parallel: int = Field(1, ge=1)
    kv_cache_dtype: str | None = None  # "fp8": a smaller KV cache the plan chose to fit (vLLM)
    tags: list[str] = Field(default_factory=list)  # Ollama: every tag this server serves
    executable: str | None = None  # the serve table's `executable` (None: the one on PATH)
    health_path: str = "/health"  # answers 200 once the server takes requests

    def most_running(self) -> int | None:
        """The most requests this server runs at once, where its command says: llama.cpp's
        slots and Ollama's OLLAMA_NUM_PARALLEL (`parallel`), vLLM's `--max-num-seqs`, SGLang's
        `--max-running-requests` among the user's args (None: the engine's own default)."""
        if self.engine in ("llamacpp", "ollama"):
            return self.parallel
        flag = "--max-num-seqs" if self.engine == "vllm" else "--max-running-requests"
        for i, arg in enumerate(self.args):
            value = arg.split("=", 1)[1] if arg.startswith(flag + "=") else None
            if arg == flag and i + 1 < len(self.args):
                value = self.args[i + 1]
            if value is not None and value.isdigit() and int(value) > 0:
                return int(value)
        return None

    @property
    def base_url(self) -> str:
        """What the run's `base_urls` gets for this server."""
        root = f"http://{self.host}:{self.port}"
        return root if self.engine == "ollama" else f"{root}/v1"


class Plan(_Frozen):
    """Every server a run needs, placed on the machine's GPUs."""

    gpus: list[GPU] = Field(default_factory=list)
    servers: list[ServerPlan] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # decisions a reader should know about

    def urls(self) -> dict[str, list[str]]:
        """Each config place ("agents.0", "extractor", ...) -> the base URLs of its servers."""
        out: dict[str, list[str]] = {}
        for server in self.servers:
            for place in server.models:
                out.setdefault(place, []).append(server.base_url)
        return out


class Engine(Protocol):
    """One inference engine (one module per engine in `crawdad/serving/engines/`)."""

    name: EngineName
    backend: Literal["openai", "ollama"]  # the client crawdad talks to it with
    executable: str  # what must be on PATH ("vllm", "llama-server", "ollama", "python")
    # Variables that point the server's temporary files at a folder its keeper removes once the
    # server is gone (crawdad/serving/keeper.py): what a server stopped by signal leaves behind.
    scratch_env: tuple[str, ...]

    def command(self, server: ServerPlan) -> list[str]:
        """The command line that serves `server` (no shell; arguments as a list)."""
        ...

    def health_path(self) -> str:
        """The path that answers 200 once the server can take requests ("/health", ...)."""
        ...

    def api_key(self, secret: str) -> tuple[dict[str, str], list[str]]:
        """How the server gets its per-start secret as its API key: (environment, arguments
        added to its command line); ({}, []) for an engine without keys (Ollama). The
        environment is preferred: arguments show in `ps`."""
        ...

    def key_path(self) -> str | None:
        """A GET path that needs the API key (None: the engine has none): the ownership proof
        (`ownership.key_proof`)."""
        ...

    def installed(self) -> bool: ...

    def install_hint(self) -> str:
        """The line that installs this engine (named before anything starts)."""
        ...

    def version(self) -> str | None:
        """The engine's version, read without starting a server (None: unknown)."""
        ...
