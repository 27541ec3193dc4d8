"""Run settings: pydantic models (unknown keys rejected), read from TOML, overridden by flags."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from crawdad.errors import ConfigError
from crawdad.resources import find_config
from crawdad.safe_files import DEFAULT_MAX_FILE_MB, read_input, use_input_limit

Backend = Literal["ollama", "openai"]
Alignment = Literal["commonsense", "anticommonsense", "nonsense"]

DEFAULT_OLLAMA_URL = "http://localhost:11434"
DEFAULT_OPENAI_URL = "http://localhost:8000/v1"
MAX_REPLICAS = 256  # servers of one served model


def check_url(url: str) -> str:
    """A server URL as crawdad needs it (http or https, with a host); the error says the fix."""
    url = url.strip()
    if not url:
        raise ValueError("is empty: write a server URL such as 'http://localhost:11434'")
    if url.isdigit():
        raise ValueError(f"{url!r} is a port alone: write 'http://localhost:{url}'")
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):/*", url)
    if "://" not in url:
        if match and match.group(1).lower() in ("http", "https"):  # http//x, http:/x, http:x
            rest = url[match.end() :]
            raise ValueError(f"{url!r} is malformed: write '{match.group(1).lower()}://{rest}'")
        if re.match(r"^(http|https)//", url, re.IGNORECASE):
            scheme, rest = url.split("//", 1)
            raise ValueError(f"{url!r} is malformed: write '{scheme.lower()}://{rest}'")
        if not re.search(r":\d+(/|$)", url):
            raise ValueError(
                f"{url!r} has no scheme and no port: write e.g. 'http://{url}:11434' (Ollama)"
                f" or 'http://{url}:8000/v1' (vLLM)"
            )
        raise ValueError(f"{url!r} has no scheme: write 'http://{url}'")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(
            f"{url!r} uses {parts.scheme}://, but model servers speak HTTP: write "
            f"'http://{url.split('://', 1)[1]}' (or https://)"
        )
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host: write e.g. 'http://localhost:11434'")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError:
        raise ValueError(f"{url!r} has a bad port: use a number 1-65535") from None
    return url.rstrip("/")


def ollama_host_url(value: str) -> str:
    """OLLAMA_HOST as Ollama reads it: scheme http and port 11434 unless given."""
    value = value.strip() or "127.0.0.1:11434"
    scheme, sep, hostport = value.partition("://")
    if not sep:
        scheme, hostport = "http", value
    hostport, slash, path = hostport.partition("/")
    if not re.search(r":\d+$", hostport):  # no port: Ollama's defaults
        port = 11434 if not sep else (443 if scheme == "https" else 80)
        hostport = f"{hostport.rstrip(':') or '127.0.0.1'}:{port}"
    elif hostport.startswith(":"):
        hostport = "127.0.0.1" + hostport
    return f"{scheme}://{hostport}{slash}{path}".rstrip("/")


ServerURL = Annotated[str, AfterValidator(check_url)]


# The data tools (crawdad/tools/data_tools.py) over a question's table; "data" names the first
# five. independence_test (the Causal Agent's Fisher-z test, crawdad/tools/independence.py) is
# named on its own, as the data-agent config does.
DATA_TOOLS = (
    "describe_data",
    "conditional_probability",
    "estimate_effect",
    "identify_effect",
    "learn_graph",
    "independence_test",
)
DATA_SET = DATA_TOOLS[:5]
ToolName = Literal[
    "causal",
    "data",
    "describe_data",
    "conditional_probability",
    "estimate_effect",
    "identify_effect",
    "learn_graph",
    "independence_test",
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def plain_text(value: str, what: str) -> str:
    """A value that reaches a command line or a batch script: no newline or other control
    character (in a SLURM script a newline in a name would start a command)."""
    if found := _CONTROL.search(value):
        raise ValueError(
            f"{what} {value!r} holds a control character ({found.group()!r}): names, tags, "
            "paths and flags of a served model must be plain text on one line"
        )
    return value


class ServeConfig(Strict):
    """How crawdad serves this model itself (`crawdad serve`, or a run with no server up): the
    engine, the weights, and flags passed through. A model without it uses `base_urls`: a
    server someone else runs."""

    engine: Literal["vllm", "sglang", "llamacpp", "ollama"]  # the program that serves it
    # A Hugging Face id or local folder (vLLM, SGLang), a GGUF file (llama.cpp), an Ollama tag.
    weights: str = Field(min_length=1)
    # Servers of this model, each on its own GPUs; "auto": one more on each GPU the plan leaves
    # free.
    replicas: int | Literal["auto"] = 1
    tensor_parallel: int | None = Field(None, ge=1, le=1024)  # None: as few GPUs as it needs
    gpu_memory: float | None = Field(None, gt=0, le=1)  # fraction of each GPU; None: planned
    # Tokens of each sequence; None: the longest prompt + max_tokens (the model's own at most).
    context_length: int | None = Field(None, ge=256, le=100_000_000)
    args: list[str] = Field(default_factory=list)  # engine flags, passed through as they are
    env: dict[str, str] = Field(default_factory=dict)  # extra environment of the server
    # The engine's program, where it is not the one on PATH (`vllm`, `llama-server`, `ollama`):
    # a path, e.g. a venv's `bin/vllm`; for llama.cpp also a Python that has llama-cpp-python.
    executable: str | None = None
    # The weights' size in GB where crawdad cannot read it yet (a Hugging Face id not
    # downloaded on the machine that plans, as a SLURM login node); None: read from the files.
    weights_gb: float | None = Field(None, gt=0, le=1_000_000)

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_REPLICAS:
            raise ValueError(f'give 1 to {MAX_REPLICAS} servers, or "auto" (got {value})')
        return value

    @field_validator("weights", "executable")
    @classmethod
    def _plain(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else plain_text(value, f"serve.{info.field_name}")

    @field_validator("args")
    @classmethod
    def _plain_args(cls, value: list[str]) -> list[str]:
        return [plain_text(arg, "serve.args item") for arg in value]

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not ENV_NAME.fullmatch(key):
                raise ValueError(
                    f"serve.env key {key!r} is not an environment variable name: use letters, "
                    "digits and _ (not first a digit), such as VLLM_LOGGING_LEVEL"
                )
            plain_text(text, f"serve.env.{key}")
        return value


class ModelSpec(Strict):
    """One served model and how to ask it."""

    model: str  # the model's name on its server (Ollama tag, or vLLM's served model name)
    # "ollama": Ollama's native API; "openai": an OpenAI-compatible server (vLLM, llama.cpp, SGLang).
    backend: Backend = "ollama"
    # Several URLs are replicas of the same model: requests go to the least busy one.
    base_urls: list[ServerURL] = Field(default_factory=list)
    api_key: SecretStr | None = None  # sent as a bearer token (prefer api_key_env)
    api_key_env: str | None = None  # name of the environment variable holding the key
    # Sampling (the paper: 0.6 and 0.95; never greedy for reasoning models, which then repeat).
    temperature: float = Field(0.6, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)  # nucleus sampling
    top_k: int | None = Field(None, ge=1)  # None: the server's default
    max_tokens: int = Field(8192, ge=1)  # output budget, thinking included (num_predict)
    # Ollama context window; "auto" sizes it to the prompt plus max_tokens, in steps of 4096.
    num_ctx: int | Literal["auto"] = "auto"
    think: bool = True  # let a reasoning model think (Ollama `think`, vLLM enable_thinking)
    keep_alive: str | None = "30m"  # Ollama: how long the model stays loaded after a request
    timeout: float = Field(1800.0, gt=0)  # seconds for one response, start to end
    max_in_flight: int | None = Field(None, ge=1)  # per endpoint; None: no cap but concurrency
    stream: bool = True  # stream the response (lets crawdad stop a looping generation early)
    options: dict[str, Any] = Field(default_factory=dict)  # passed through to the server
    # Tools the model may call in its turns (crawdad/tools): "causal", the causal calculator;
    # "data", the data tools over the question's table (task cladder-data), or some of them by
    # name; "independence_test", the Causal Agent's Fisher-z test, only by name.
    tools: list[ToolName] = Field(default_factory=list)
    # "native": the server's tool calling (Ollama `tools`, OpenAI `tools`); "text": the model
    # writes a JSON call in its answer and crawdad answers in a follow-up message; "auto":
    # native, and text once the server refuses tools for this model.
    tool_mode: Literal["auto", "native", "text"] = "auto"
    max_tool_calls: int = Field(4, ge=1, le=32)  # per turn; then the model must answer
    # How crawdad starts this model's server itself (None: `base_urls` names a running one).
    serve: ServeConfig | None = None

    @model_validator(mode="after")
    def _plain_served_name(self) -> ModelSpec:
        if self.serve is not None:  # the name a server is started with: it reaches a script
            plain_text(self.model, "model")
        return self

    @model_validator(mode="after")
    def _default_url(self) -> ModelSpec:
        if not self.base_urls:
            default = DEFAULT_OPENAI_URL
            if self.backend == "ollama":
                host = os.environ.get("OLLAMA_HOST", "")
                default = ollama_host_url(host) if host.strip() else DEFAULT_OLLAMA_URL
                try:
                    check_url(default)
                except ValueError as e:
                    raise ValueError(f"OLLAMA_HOST={host!r}: {e}") from None
            object.__setattr__(self, "base_urls", [default])
        return self

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        return None


class AgentConfig(ModelSpec):
    """One debater: a served model and the name its turns carry."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")  # the agent's name in records and reports


class ExtractorConfig(ModelSpec):
    """The model that reads each response's answer and confidence as JSON (paper: Granite 3.3
    2B at temperature 0, thinking off)."""

    model: str = "granite3.3:2b"
    tools: list[ToolName] = Field(default_factory=list, max_length=0)  # never
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=16)
    think: bool = False
    timeout: float = Field(120.0, gt=0)
    stream: bool = False  # a short JSON reply: one response costs less than a stream of chunks


ProtocolKind = Literal["crawdad", "judge", "simultaneous", "solo", "coding", "pipeline"]


class ProtocolConfig(Strict):
    """Who speaks when and what each sees."""

    # crawdad: the paper's turn-taking debate (N >= 2 debaters); judge: debaters argue before a
    # judge model who gives a verdict or a follow-up question (MAC, MAD); simultaneous: all agents
    # answer, then revise seeing each other's answers (Du et al.); solo: independent samples;
    # coding: debaters argue for a discovery algorithm's plan, each plan run on the data (MAC).
    # pipeline: LLM4Causal's three steps over a table (task JSON, the tool run, interpretation).
    kind: ProtocolKind = "crawdad"
    max_turns: int = Field(4, ge=1, le=32)  # crawdad: responses per debate, the first one included
    # Stop when the agents agree: crawdad (a response agrees with the one before it; with N > 2,
    # the latest answers of all agents agree) and simultaneous (every answer of a round agrees).
    # None: the kind's default (on for crawdad, off for simultaneous, as Du et al.).
    early_stop: bool | None = None
    rounds: int = Field(3, ge=1, le=32)  # judge: rounds at most; simultaneous: rounds after round 0
    samples: int = Field(1, ge=1, le=256)  # solo: independent answers per agent (k)
    rows: int = Field(1000, ge=10, le=1_000_000)  # coding: rows sampled from a CLadder model
    # coding: a judge ([judge]) reads the debate and picks the final plan among the debaters'
    # latest plans that ran (MAC); false: the last plan that ran is the final answer.
    plan_judge: bool = True
    # Discovery tasks: the run folder of another system whose graphs every prompt shows as prior
    # knowledge (MAC's hybrids: Coding-Debating, Debating-Coding); None: no prior.
    prior_from: str | None = None
    stances: bool = False  # judge: give the debaters sides, affirmative and negative (MAC)
    # judge with stances: "mac": the first speaker is the affirmative side and opens with its own
    # answer, and the others are negative, each told to argue against the affirmative's answer
    # (MAC); "fixed": the affirmative argues "yes" and the negative "no", sides alternating in
    # speaking order from a side drawn per question (Liang et al.'s MAD; crawdad before this).
    stance_mode: Literal["mac", "fixed"] = "mac"
    # What a runaway turn (loop, length, timeout) does: count as an unextracted answer and go on,
    # or fail the debate (recorded with error, retried on resume).
    on_runaway: Literal["unextracted", "error"] = "unextracted"
    loop_detection: bool = True  # stop a streamed response that repeats itself (a runaway loop)
    loop_min_chars: int = Field(2000, ge=200)  # never call a response a loop before this length
    turn_time_budget: float | None = Field(None, gt=0)  # seconds; None: only the request timeout
    store_prompts: bool = False  # store every rendered prompt in the records (bigger files)

    @model_validator(mode="after")
    def _kind_defaults(self) -> ProtocolConfig:
        if self.early_stop is None:
            object.__setattr__(self, "early_stop", self.kind in ("crawdad", "coding"))
        return self


class SelectionConfig(Strict):
    """Which questions of the dataset a run takes (the filters, then sample or limit)."""

    questions_file: str | None = None  # which questions file in a folder or zip (default balanced)
    ranges: list[str] = Field(default_factory=list)  # index ranges "0-99", "500-"
    rungs: list[int] = Field(default_factory=list)  # only these rungs (1-3); empty: all
    query_types: list[str] = Field(default_factory=list)  # only these query types; empty: all
    # Only these commonsense alignments; empty: all.
    alignments: list[Alignment] = Field(default_factory=list)
    sample: int | None = Field(None, ge=1)  # seeded sample of N, stratified by rung and alignment
    limit: int | None = Field(None, ge=1)  # first N of the run's order, after the filters
    # The order the run works through its questions (and `limit` takes the first of): "seeded",
    # drawn from the run's seed (the same for every variant of an experiment and on resume), or
    # "file", the questions file's (run folders of record schema 7 and older resume so).
    order: Literal["seeded", "file"] = "seeded"


class RetryConfig(Strict):
    """Retries of requests that fail for reasons a server calls transient (503, resets)."""

    attempts: int = Field(6, ge=1, le=100)  # tries of one request, the first included
    initial_wait: float = Field(1.0, ge=0)  # seconds before the first retry, then doubling
    max_wait: float = Field(60.0, ge=0)  # the longest wait between two tries
    # A server that cannot be reached is set aside this long, doubling up to 60 s, then retried.
    down_wait: float = Field(5.0, ge=0)
    # A request with no chunk or answer for this long is shown as stalled on the progress line.
    stall_report: float = Field(60.0, gt=0)
    # The run stops when every server of an agent (or of the extractor) has been unreachable
    # this long, or has had requests in flight and sent nothing for `hung_stop` seconds.
    down_stop: float = Field(120.0, gt=0)
    hung_stop: float = Field(600.0, gt=0)  # seconds: see down_stop


class JudgeConfig(ModelSpec):
    """The judge of the judge protocol (reads the debaters' final texts, gives a verdict) and of
    the coding protocol (picks the final plan)."""

    model: str = "qwen3:32b"


class GraderConfig(ModelSpec):
    """Grading by a grader model against the ideal answer (paper 004: another LLM compares the
    final answer with the ideal one, OpenAI evals' closed_qa template). Off unless the section
    is given; its verdicts are recorded beside the exact scoring, never instead of it."""

    # The grader's prompt: a template of the prompt set (`<name>.txt`, with $input, $submission
    # and $ideal); the paper set's grader.txt is paper 004's Listing 5.
    template: str = Field("grader", pattern=r"^[A-Za-z0-9_-]+$")
    tools: list[ToolName] = Field(default_factory=list, max_length=0)  # never
    # A grader reads, it does not create: greedy, as paper 004's t = 1e-10.
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    # The template asks for written reasoning before the letter: no separate thinking (paper
    # 004's grader was GPT-3.5, a model without it).
    think: bool = False


class ScoringConfig(Strict):
    """Extra scoring of the debaters' responses."""

    # Step scoring: a second extractor call per debater response reads its CausalCoT steps
    # (graph, query type, estimand, numbers read, result), scored against the causal engine.
    steps: bool = False


class ToolLimits(Strict):
    """Bounds on one tool call (crawdad/tools/boundary.py). A call's arguments are written by
    the model; a call past a bound is answered with a tool error naming it, and the turn goes on."""

    max_argument_chars: int = Field(100_000, ge=1_000)  # the arguments as JSON text
    max_nesting: int = Field(32, ge=4, le=500)  # brackets deep in the arguments
    max_variables: int = Field(64, ge=2)  # distinct variable names in a call
    max_edges: int = Field(256, ge=1)  # edges of a graph in one call
    max_probabilities: int = Field(1024, ge=1)  # also bounds the terms of an adjustment sum
    # The exact engine enumerates 2^n states: it takes whole models up to this many variables.
    max_exact_variables: int = Field(16, ge=2, le=24)
    seconds: float = Field(10.0, gt=0)  # compute of one call, in a worker process killed past it
    memory_mb: int = Field(2048, ge=0)  # address space of a worker; 0: no bound
    workers: int = Field(2, ge=1, le=64)  # worker processes computing calls at once

    @field_validator("memory_mb")
    @classmethod
    def _room_to_start(cls, value: int) -> int:
        if 0 < value < 256:
            raise ValueError("a worker needs at least 256 MB to start; 0 sets no bound")
        return value


class TableLimits(Strict):
    """Bounds on a question's table file (crawdad/data/table_files.py), checked before anything
    runs: a table past one is named with its size and refused."""

    max_rows: int = Field(2_000_000, ge=1)  # rows of one table (its file is not read past it)
    # Columns of one table; the data tools count 2^n combinations, so 16 at most.
    max_columns: int = Field(16, ge=1, le=16)


class InputLimits(Strict):
    """Bounds on the files crawdad reads that a user names (datasets and their tables, CSVs,
    prompt sets, audits): a file past one is refused, named with its size, before it is read,
    and a FIFO, a device or a folder where a file is expected is refused before it is opened
    (crawdad/safe_files.py). The config file itself is read under the default."""

    max_file_mb: int = Field(DEFAULT_MAX_FILE_MB, ge=1)  # megabytes of one input file


SERVED_URLS_ENV = "CRAWDAD_SERVED_URLS"
# The job's keys file (base URL -> key, 0600; each server start has a key of its own): it becomes
# `serving.keys_file` where the config sets none, and is read again when it changes.
SERVED_KEYS_ENV = "CRAWDAD_SERVED_KEYS"


def served_urls_from_env() -> dict[str, list[str]]:
    """CRAWDAD_SERVED_URLS: a JSON object of served model name -> the URLs of servers already
    up for it (a URL ending in /v1: OpenAI-compatible, else Ollama); empty when unset."""
    raw = os.environ.get(SERVED_URLS_ENV, "").strip()
    if not raw:
        return {}
    import json

    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{SERVED_URLS_ENV} is not JSON ({e})") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and all(isinstance(u, str) for u in v) for v in data.values()
    ):
        raise ValueError(
            f'{SERVED_URLS_ENV} must map model names to URL lists: {{"qwen3:32b": '
            '["http://node1:8100/v1"]}'
        )
    return data


def _default_agents() -> list[AgentConfig]:
    return [
        AgentConfig(name="qwen3", model="qwen3:32b"),
        AgentConfig(name="deepseek-r1", model="deepseek-r1:32b"),
    ]


MIN_FREEZE = 5.0  # seconds: serving.freeze_timeout's floor
MIN_CHECK, MAX_CHECK = 0.05, 60.0  # seconds: serving.check_interval's range
MIN_STARTUP = 5.0  # seconds: serving.startup_timeout's floor


class ServingConfig(Strict):
    """How crawdad runs the servers it starts itself (models with a `serve` table)."""

    # Seconds for a server to answer its health (a week at most).
    startup_timeout: float = Field(1200.0, gt=0, le=604_800)
    max_restarts: int = Field(3, ge=0, le=10_000)  # per server within restart_window; then stop
    restart_window: float = Field(1800.0, gt=0, le=31_536_000)  # seconds (a year at most)
    # A server that has neither answered its health check nor sent a token of any request for
    # this long is taken as frozen: restarted (a busy one may answer its health late). 5 s or more.
    freeze_timeout: float = Field(120.0, gt=0, le=604_800)
    # Seconds between checks of each running server (its exit, its health, its tokens): a frozen
    # one is restarted within freeze_timeout + check_interval of its last sign of life.
    check_interval: float = Field(1.0, gt=0)
    # The share of each GPU's memory the plan may give out (the rest: CUDA context, fragments).
    gpu_memory_limit: float = Field(0.9, gt=0, le=1)
    first_port: int = Field(8100, ge=1024, le=65000)  # ports are taken from here upwards
    # false: the served models' servers run already (`crawdad serve`, `--keep-servers`) and
    # base_urls point at them; crawdad starts none.
    start: bool = True
    # With start = false: the servers' API keys, as `crawdad serve` or `--keep-servers` wrote
    # them (`keys.json`, mode 0600, beside the servers' logs); each server is sent its own.
    keys_file: Path | None = None
    # A planned port that another crawdad holds or another program listens on moves to the next
    # free one (the start says so); false: the start is refused, naming what holds it.
    replan_ports: bool = True

    @model_validator(mode="after")
    def _sane_timing(self) -> ServingConfig:
        """Timings that would restart healthy servers, or give up on a start at once, are
        refused here, each naming the key to change."""
        if not MIN_CHECK <= self.check_interval <= MAX_CHECK:
            raise ValueError(
                f"serving.check_interval = {self.check_interval:g} s: set it between "
                f"{MIN_CHECK:g} and {MAX_CHECK:g} s (1 s is the default)"
            )
        floor = max(MIN_FREEZE, 4 * self.check_interval)
        if self.freeze_timeout < floor:
            raise ValueError(
                f"serving.freeze_timeout = {self.freeze_timeout:g} s would restart servers that "
                f"are only busy: set it to {floor:g} s or more (at least {MIN_FREEZE:g} s and 4 "
                f"checks of serving.check_interval = {self.check_interval:g} s; 120 s is the "
                "default)"
            )
        if self.startup_timeout < max(MIN_STARTUP, self.check_interval):
            raise ValueError(
                f"serving.startup_timeout = {self.startup_timeout:g} s is too short for any "
                f"server to load its model: set it to {MIN_STARTUP:g} s or more (1200 s is the "
                "default; a large model on vLLM takes minutes)"
            )
        return self


class RunConfig(Strict):
    # What an item is and how it is scored (crawdad.tasks.TASKS); CLadder's questions by default.
    task: str = "cladder"
    agents: list[AgentConfig] = Field(default_factory=_default_agents, min_length=1, max_length=16)
    extractor: ExtractorConfig = Field(default_factory=ExtractorConfig)
    judge: JudgeConfig | None = None  # the judge protocol's, and the coding protocol's plan judge
    # A grader model that grades each debate's final response against the ideal answer (paper
    # 004); None (the default): no grading, the exact scoring only.
    grader: GraderConfig | None = None
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig)
    # A set under prompts/ ("paper", "no-confidence", "no-be-confident", "crawdad-v1") or a folder.
    prompt_set: str = "paper"
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    tool_limits: ToolLimits = Field(default_factory=ToolLimits)  # what one tool call may take
    table_limits: TableLimits = Field(default_factory=TableLimits)  # a question's table's size
    input_limits: InputLimits = Field(default_factory=InputLimits)  # any input file's size
    retry: RetryConfig = Field(default_factory=RetryConfig)
    seed: int = 0  # every random choice derives from (seed, question id, round or sample)
    # Sampling temperature of every debater and the judge, set once for all (MAC's configs: 0,
    # greedy, as MAC ran); None: each its own (agents[].temperature, judge.temperature).
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    concurrency: int = Field(32, ge=1, le=4096)  # debates in flight
    # "grouped": prefer turns of the model the server already has loaded (one-GPU workstations).
    schedule: Literal["fifo", "grouped"] = "fifo"
    # Seconds between samples of each server's own metrics (vLLM's and SGLang's /metrics,
    # llama.cpp's /metrics and /slots, Ollama's /api/ps), written to servers.jsonl in the run
    # folder beside crawdad's own figures; 0: not sampled.
    server_metrics: float = Field(default=5.0, ge=0)
    prompts_dir: Path | None = None  # older spelling of a prompt_set folder; overrides prompt_set
    serving: ServingConfig = Field(default_factory=ServingConfig)  # servers crawdad starts

    @model_validator(mode="after")
    def _unique_names(self) -> RunConfig:
        names = [a.name for a in self.agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agent names must differ, got {names}")
        if "judge" in names:
            raise ValueError("no agent may be named 'judge': the judge's turns use that name")
        kind = self.protocol.kind
        if kind not in ("solo", "pipeline") and len(names) < 2:
            raise ValueError(f"the {kind} protocol needs at least 2 agents, got {len(names)}")
        if kind == "pipeline" and (with_tools := [a.name for a in self.agents if a.tools]):
            raise ValueError(
                f"the pipeline protocol runs the data tool itself (step 2): give its agents no "
                f"tools (agents {', '.join(with_tools)} have some)"
            )
        judged = kind == "judge" or (kind == "coding" and self.protocol.plan_judge)
        if judged and self.judge is None:
            object.__setattr__(self, "judge", JudgeConfig())
        elif not judged and self.judge is not None:
            object.__setattr__(self, "judge", None)  # only a judged protocol has one
        return self

    @model_validator(mode="after")
    def _one_temperature(self) -> RunConfig:
        """`temperature` sets every debater's and the judge's; one of them set otherwise as
        well is a contradiction, named (not silently overridden)."""
        if self.temperature is None:
            return self
        specs = [(f"agents[{i}]", a) for i, a in enumerate(self.agents)]
        for where, spec in [*specs, *([("judge", self.judge)] if self.judge else [])]:
            if "temperature" in spec.model_fields_set and spec.temperature != self.temperature:
                raise ValueError(
                    f"temperature = {self.temperature} sets every debater's and the judge's "
                    f"temperature, but {where}.temperature is {spec.temperature}: change "
                    f"temperature itself (--set temperature={spec.temperature}), or remove it "
                    "to give each its own"
                )
            spec.temperature = self.temperature
        return self

    @model_validator(mode="after")
    def _served_elsewhere(self) -> RunConfig:
        """CRAWDAD_SERVED_URLS, set by a `crawdad serve --slurm` job that started the servers
        itself: each served model is pointed at them, instead of crawdad starting its own."""
        served = served_urls_from_env()
        keys = os.environ.get(SERVED_KEYS_ENV, "").strip()
        for spec in [*self.agents, self.extractor, *self.readers()]:
            urls = served.get(spec.model) if spec.serve is not None else None
            if urls:
                object.__setattr__(spec, "base_urls", [check_url(u) for u in urls])
                backend = "openai" if urls[0].rstrip("/").endswith("/v1") else "ollama"
                object.__setattr__(spec, "backend", backend)
                object.__setattr__(spec, "serve", None)
        if served and keys and self.serving.keys_file is None:
            object.__setattr__(self.serving, "keys_file", Path(keys))
        return self

    @property
    def prompt_source(self) -> str | Path:
        return self.prompts_dir if self.prompts_dir is not None else self.prompt_set

    def tool_model_names(self) -> list[str]:
        """The models of the debaters and judge that have a tool."""
        specs = [*self.agents, *([self.judge] if self.judge else [])]
        return list(dict.fromkeys(s.model for s in specs if s.tools))

    def model_names(self) -> list[str]:
        """Every model the debaters and the judge use (not the extractor)."""
        names = [a.model for a in self.agents] + ([self.judge.model] if self.judge else [])
        return list(dict.fromkeys(names))

    def agent(self, name: str) -> AgentConfig:
        return next(a for a in self.agents if a.name == name)

    def readers(self) -> list[ModelSpec]:
        """The judge and the grader, where the config has them."""
        return [s for s in (self.judge, self.grader) if s is not None]

    def serve_all_from(self, url: str, backend: Backend = "ollama") -> RunConfig:
        """Point the agents, the judge and the extractor at one server (demos, tests, one-box
        setups)."""
        for spec in [*self.agents, self.extractor, *self.readers()]:
            spec.backend = backend
            spec.base_urls = [url]
            spec.serve = None  # served by that server, not by one crawdad starts
        return self


# Settings that change how a run is executed but not what its records say: they may differ when
# a run is resumed. Everything else must match the manifest.
OPERATIONAL = {
    "base_urls",
    "serve",
    "serving",
    "api_key",
    "api_key_env",
    "keep_alive",
    "timeout",
    "max_in_flight",
    "stream",
    "selection",
    "retry",
    "concurrency",
    "schedule",
    "server_metrics",
    "prompts_dir",
    "workers",
    "table_limits",
    "input_limits",
}


def public_dump(config: RunConfig) -> dict[str, Any]:
    """The config as written to the manifest: JSON types, secrets removed."""
    data = config.model_dump(mode="json")
    readers = [data[k] for k in ("judge", "grader") if data.get(k)]
    for spec in [*data["agents"], data["extractor"], *readers]:
        spec["api_key"] = "***" if spec.get("api_key") else None
    return data


def result_settings(dumped: dict[str, Any]) -> dict[str, Any]:
    """The part of a dumped config that determines the records (OPERATIONAL keys removed)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in OPERATIONAL}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(dumped)


def normalized_config(dumped: dict[str, Any], schema_version: int = 2) -> dict[str, Any]:
    """A manifest's config with the settings added since it was written at their defaults (and,
    for schema 1, the prompt set that crawdad 0.1 used), so that only real differences show."""
    data = dict(dumped)
    if schema_version < 2 and data.get("prompts_dir") is None:
        data.setdefault("prompt_set", "crawdad-v1")
    agents = data.get("agents")
    specs = [
        *(agents if isinstance(agents, list) else []),
        data.get("extractor"),
        data.get("judge"),
        data.get("grader"),
    ]
    for spec in specs:
        # a manifest not written by RunConfig (a synthetic run's) may hold other shapes
        if isinstance(spec, dict) and spec.get("api_key") == "***":
            spec["api_key"] = None
    try:
        return public_dump(RunConfig.model_validate(data))
    except ValidationError:
        return dumped


def diff_settings(old: Any, new: Any, path: str = "") -> list[str]:
    """Human-readable differences between two dumped configs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else str(key)
            out += diff_settings(old.get(key), new.get(key), sub)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (o, n) in enumerate(zip(old, new, strict=True))
            for d in diff_settings(o, n, f"{path}[{i}]")
        ]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


Origins = dict[tuple[str | int, ...], str]


def _origin(loc: tuple[str | int, ...], path: Path | str | None, origins: Origins) -> str:
    """Where the value at `loc` came from: the flag that set it, else the file (or both)."""
    owners = [key for key in origins if loc[: len(key)] == key]
    if owners:
        return origins[max(owners, key=len)]
    below = [label for key, label in origins.items() if key[: len(loc)] == loc]
    return " with ".join(([str(path)] if path else []) + below) or str(path or "the settings")


def _error_line(err: Any, model: type[BaseModel] | None = None, kind: str = "") -> str:
    """One bad value, in words. `model`: the model the error is of (a run config's by
    default); with `kind` ("stopping") an unknown key is told with every key of its kind, its
    guess first: a [stop] table is short, and its keys are not the run config's."""
    loc = ".".join(str(p) for p in err["loc"]) or "(whole config)"
    if err["type"] == "extra_forbidden":
        known = _known_keys(err["loc"][:-1], model or RunConfig)
        hint = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        guess = f"did you mean '{hint[0]}'?" if hint else ""
        if kind:
            listed = f"{kind} keys: {', '.join(known)}"
            extra = f" ({guess} {listed})" if guess else f" ({listed})"
        else:
            extra = f" ({guess})" if hint else f" (known keys: {', '.join(sorted(known))})"
        return f"  - {loc}: unknown key{extra}"
    if err["type"] == "value_error":  # our own validators: the message names the value and fix
        return f"  - {loc}: {err['msg'].removeprefix('Value error, ')}"
    got = repr(err.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    return f"  - {loc}: {err['msg']} (got {got})"


def _describe(
    error: ValidationError,
    path: Path | str | None,
    origins: Origins | None = None,
    alone: set[tuple[tuple[Any, ...], str]] | None = None,
) -> str:
    """One block per origin of the bad values: the file, a flag, or a --set item. `alone`: the
    errors the settings make without the flags; a flag is named only where it changes the
    outcome (a file that needs two agents is wrong with or without --limit)."""
    groups: dict[str, list[str]] = {}
    for err in error.errors():
        loc = tuple(err["loc"])
        owned = any(loc[: len(key)] == key for key in origins or {})
        if not owned and (loc, err["msg"]) in (alone or set()):
            origin = str(path or "the settings")
        else:
            origin = _origin(loc, path, origins or {})
        groups.setdefault(origin, []).append(_error_line(err))
    lines = []
    for origin, errs in groups.items():
        if path is not None and origin == str(path):
            lines.append(f"{origin} is not a valid crawdad config:")
        elif origin == "the settings":
            lines.append("the settings are not valid:")
        elif " with " in origin:
            lines.append(f"{origin} do not make a valid crawdad config together:")
        else:
            lines.append(f"{origin} is not a valid setting:")
        lines += errs
    return "\n".join(lines)


def _known_keys(loc: tuple[Any, ...], model: type[BaseModel] = RunConfig) -> list[str]:
    for part in loc:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[str(part)].annotation
        inner = getattr(annotation, "__args__", (annotation,))
        model = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), model)
    return list(model.model_fields)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """A config or experiment file: a path, or a ready config by name (`protocols/judge`)."""
    fix = "pass a TOML file with --config, or a ready config by name (`crawdad configs`)"
    if path.is_dir():
        raise ConfigError(f"--config {path} is a folder, not a file: {fix}")
    path = find_config(path)
    try:
        return tomllib.loads(read_input(path, "config file").decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}; {fix}") from None
    except PermissionError:
        raise ConfigError(f"config file {path} cannot be read (permission denied)") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path} is not a UTF-8 text file (byte {e.start}): is it really a TOML config?"
            " Save it as UTF-8 text."
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None


def load_config(
    path: Path | None = None,
    overrides: dict[str, Any] | None = None,
    origins: Origins | None = None,
) -> RunConfig:
    """Build the run config: defaults, then the TOML file, then flag overrides.

    `origins` maps setting paths (("protocol", "max_turns")) to the flag that set them
    ("--set protocol.max_turns=0"), so that an error names the flag rather than the file.
    """
    data = read_toml(path) if path else {}
    if path is not None and {"variants", "axes"} & set(data):
        raise ConfigError(
            f"{path} is an experiment file (it has variants or axes), not a run config: "
            f"run it with `crawdad experiment {path} --data DATA`"
        )
    merged = deep_merge(data, overrides or {})
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as e:
        alone = _errors_of(data) if overrides else None
        raise ConfigError(_describe(e, path, origins, alone)) from None
    use_input_limit(config.input_limits.max_file_mb)  # the inputs read from here on
    return config


def _errors_of(data: dict[str, Any]) -> set[tuple[tuple[Any, ...], str]]:
    """The (location, message) of each error the settings make on their own."""
    try:
        RunConfig.model_validate(data)
    except ValidationError as e:
        return {(tuple(err["loc"]), err["msg"]) for err in e.errors()}
    return set()


# Overrides as Python gives them: {"agents.0.model": "qwen3:8b"}, or ["agents.0.model=qwen3:8b"]
# as `--set` takes them (values read as TOML scalars).
Overrides = Mapping[str, Any] | Sequence[str]


def override_items(
    items: Overrides, label: str = "overrides"
) -> list[tuple[tuple[str | int, ...], Any, str]]:
    """Each override as (its key's path, its value, how to name it in an error)."""
    out: list[tuple[tuple[str | int, ...], Any, str]] = []
    pairs: list[tuple[str, Any, str]] = []
    if isinstance(items, Mapping):
        pairs = [(str(k), v, f"{label}[{k!r}]") for k, v in items.items()]
    else:
        for item in items:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(
                    f"{label}: {item!r} needs KEY=VALUE with a dotted key, as in "
                    "agents.0.model=qwen3:8b"
                )
            try:
                value: Any = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                value = raw
            pairs.append((key.strip(), value, f"{label} {item!r}"))
    for key, value, name in pairs:
        if not key or "" in key.split("."):
            raise ConfigError(
                f"{name}: a key is dotted, as in agents.0.model or protocol.max_turns"
            )
        path = tuple(int(p) if p.isdigit() else p for p in key.split("."))
        out.append((path, value, name))
    return out


def with_overrides(
    config: RunConfig, items: Overrides | None, label: str = "overrides"
) -> RunConfig:
    """The config with settings replaced by dotted key, as `--set` replaces them: numbers index
    lists (`agents.1.base_urls`). Errors name the override and the fix."""
    if not items:
        return config
    data = config.model_dump(exclude_unset=True)
    origins: Origins = {}
    for path, value, name in override_items(items, label):
        node: Any = data
        for i, part in enumerate(path):
            last = i == len(path) - 1
            where = ".".join(str(p) for p in path[: i + 1])
            if isinstance(node, list):
                if not isinstance(part, int) or part >= len(node):
                    raise ConfigError(
                        f"{name}: {'.'.join(str(p) for p in path[:i])} has {len(node)} entries, "
                        f"numbered 0..{len(node) - 1}"
                    )
            elif not isinstance(node, dict):
                raise ConfigError(f"{name}: {where} is inside a value, not a table of settings")
            if last:
                node[part] = value
            elif isinstance(node, list):
                node = node[part]  # type: ignore[index]
            else:
                node = node.setdefault(part, {})
        origins[path] = name
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_describe(e, None, origins)) from None
    use_input_limit(config.input_limits.max_file_mb)  # the inputs read from here on
    return config


def url_hints(config: RunConfig) -> list[str]:
    """URLs that are valid but probably wrong for their backend (warnings, not errors)."""
    hints = []
    specs = [(f"agents[{i}]", a) for i, a in enumerate(config.agents)]
    grader = [("grader", config.grader)] if config.grader is not None else []
    for where, spec in [*specs, ("extractor", config.extractor), *grader]:
        for j, url in enumerate(spec.base_urls):
            path = urlsplit(url).path.rstrip("/")
            name = f"{where}.base_urls[{j}] {url!r}"
            if spec.backend == "openai" and not path:
                hints.append(
                    f"{name} has no path, but OpenAI-compatible servers (vLLM, llama.cpp, SGLang)"
                    f" serve under /v1: did you mean '{url}/v1'?"
                )
            elif spec.backend == "ollama" and path == "/v1":
                hints.append(
                    f"{name} is Ollama's OpenAI-compatible path: for backend 'ollama' write"
                    f" '{url.removesuffix('/v1')}', or set backend = 'openai'"
                )
    return hints
