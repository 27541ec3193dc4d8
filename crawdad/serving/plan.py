"""The plan: each model with a `serve` table placed on the machine's GPUs, before any is touched.

A pure function of the config, the GPUs and each model's footprint (`plan_config` reads the two
itself when not given). Memory is planned conservatively, per GPU:

    weights / tensor_parallel + KV cache of the planned sequences at the planned context
    + OVERHEAD_GIB (CUDA context, activations, graphs)

never above `serving.gpu_memory_limit` of a card. vLLM and SGLang page their KV cache: the plan
holds one full-length sequence for each and gives a server alone on its GPU the whole limit (the
rest becomes KV cache for more sequences); servers that share a GPU split it in proportion to
their needs. llama.cpp and Ollama hold a context per parallel slot, planned in full.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from crawdad.config import ModelSpec, RunConfig, ServeConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import GPU, EngineName, Footprint, Plan, ServerPlan
from crawdad.serving.processes import port_free
from crawdad.serving.sizes import kv_estimate

GIB = 1024**3
# Per server and GPU: the CUDA context and activations of one process. vLLM counts its
# activation peak inside its fraction, and the card's memory past gpu_memory_limit is the margin.
OVERHEAD_GIB = 0.5
CONTEXT_STEP = 256  # planned contexts are rounded up to this many tokens
# Tokens a prompt holds besides its template, where the data is not read (cheap, and safe):
QUESTION_TOKENS = 512  # CLadder's longest question is about 330 tokens
ANSWER_TOKENS = 1024  # one earlier response in a history, its thinking split off by the parser
TOOL_RESULT_TOKENS = 512  # one tool call and its result inside a turn
CHARS_PER_TOKEN = 3  # a conservative count for English prompts
MAX_SLOTS = 8  # llama.cpp slots and OLLAMA_NUM_PARALLEL at most (each holds a full context)
TP_SIZES = (1, 2, 4, 8)
MAX_PORT = 65535


@dataclass
class _Need:
    """One server to place (a replica counts as one)."""

    key: str
    engine: EngineName
    serve: ServeConfig
    model: str  # served name
    places: list[str]
    footprint: Footprint
    context: int
    parallel: int
    tags: list[str] = field(default_factory=list)
    tensor_parallel: int = 1
    replica: int = 0
    kv_cache_dtype: str | None = None
    structured: bool = False

    @property
    def elastic(self) -> bool:
        """Takes a fraction of its GPUs and fills it with KV cache (vLLM, SGLang)."""
        return self.engine in ("vllm", "sglang")

    def kv_bytes_per_token(self) -> int:
        found = self.footprint
        # A shape that could not be read: estimated from the size at 16 bits (sizes.py).
        per_token = found.kv_bytes_per_token or kv_estimate(
            found.parameters * 2 if found.parameters else found.weights_bytes
        )
        return per_token // 2 if self.kv_cache_dtype == "fp8" else per_token

    def kv_gib(self) -> float:
        sequences = 1 if self.elastic else self.parallel
        return self.kv_bytes_per_token() * self.context * sequences / GIB

    def gib_per_gpu(self, tp: int | None = None) -> float:
        """What the plan holds for this server on each of its GPUs."""
        tp = tp or self.tensor_parallel
        return (self.footprint.weights_bytes / GIB + self.kv_gib()) / tp + OVERHEAD_GIB


def plan_config(
    config: RunConfig,
    gpus: list[GPU] | None = None,
    footprints: dict[str, Footprint] | None = None,
    *,
    check_ports: bool | None = None,
    prompt_tokens: int | None = None,
    question_tokens: int | None = None,
) -> Plan:
    """Place every model of `config` that has a `serve` table. `gpus`: the inventory (None:
    read this machine's); `footprints`: by `serve.weights` (None or missing: read from the
    weights). Ports are taken from `serving.first_port` upwards, skipping ports in use on this
    machine unless `check_ports` is False (default: checked when the inventory is read here).
    `question_tokens`: the longest question of the data (`question_tokens_of`); None:
    QUESTION_TOKENS. A plan that cannot fit raises a CrawdadError saying what would."""
    return plan_configs({"": config}, gpus, footprints, check_ports, prompt_tokens, question_tokens)


def plan_configs(
    configs: dict[str, RunConfig],
    gpus: list[GPU] | None = None,
    footprints: dict[str, Footprint] | None = None,
    check_ports: bool | None = None,
    prompt_tokens: int | None = None,
    question_tokens: int | None = None,
) -> Plan:
    """One plan for several configs (an experiment's variants, by name): a served model that
    several variants share is served once. Places are "VARIANT:agents.0" ("agents.0" for the
    config named "")."""
    if gpus is None:
        from crawdad.serving.gpus import inventory

        gpus = inventory()
    if check_ports is None:
        check_ports = footprints is None
    needs = _needs(configs, dict(footprints or {}), prompt_tokens, question_tokens)
    notes = _context_notes(needs)
    if prompt_tokens is None:
        notes.append(
            f"contexts sized for questions of up to {question_tokens:,} tokens (the longest of "
            "the data)"
            if question_tokens is not None
            else f"contexts sized for questions of up to {QUESTION_TOKENS} tokens (the data is "
            "not read here; a run sizes them from its questions)"
        )
    if not needs:
        return Plan(gpus=gpus, notes=["no model of this config has a `serve` table"])
    first = next(iter(configs.values()))
    limit = first.serving.gpu_memory_limit
    for need in needs:
        tp = need.serve.tensor_parallel
        if gpus and tp and tp > len(gpus):
            raise CrawdadError(
                f"{', '.join(need.places)}: tensor_parallel = {tp}, but there are "
                f"{len(gpus)} GPU(s): set it to {len(gpus)} or fewer, or leave it out to let "
                "the plan choose"
            )
    placed, kv_notes = _fit(needs, gpus, limit)
    if placed is None:
        raise CrawdadError(_refusal(first, needs, gpus, limit))
    notes += kv_notes
    if not gpus:
        total = sum(n.footprint.weights_bytes for n in needs) / GIB
        notes.append(
            f"no GPU found: every server runs on the CPU ({total:.1f} GiB of weights in memory)"
        )
    placed += _auto_replicas(placed, gpus, limit)
    taken = _port_picker(first.serving.first_port, check_ports)
    servers = [_server(need, on, gpus, placed, limit, taken()) for need, on in placed]
    notes += _sharing_notes(servers, gpus)
    notes += _kv_room_notes([need for need, _ in placed], servers)
    return Plan(gpus=gpus, servers=servers, notes=notes)


def apply_plan(config: RunConfig, plan: Plan) -> RunConfig:
    """A copy of `config` whose served models point at the plan's servers (their base_urls and
    backend); the other models keep theirs."""
    backends = {place: s.engine for s in plan.servers for place in s.models}
    out = config.model_copy(deep=True)
    for place, urls in plan.urls().items():
        spec = _spec_at(out, place)
        engine_name = backends[place]
        backend = "ollama" if engine_name == "ollama" else "openai"
        object.__setattr__(spec, "base_urls", list(dict.fromkeys(urls)))
        object.__setattr__(spec, "backend", backend)
    return out


# -- what each model needs -------------------------------------------------------------------


def served_places(config: RunConfig) -> list[tuple[str, ModelSpec]]:
    """(place, spec) of each model with a `serve` table: "agents.0", "judge", "extractor"..."""
    specs: list[tuple[str, ModelSpec]] = [(f"agents.{i}", a) for i, a in enumerate(config.agents)]
    if config.judge is not None:
        specs.append(("judge", config.judge))
    specs.append(("extractor", config.extractor))
    if config.grader is not None:
        specs.append(("grader", config.grader))
    return [(place, spec) for place, spec in specs if spec.serve is not None]


def _spec_at(config: RunConfig, place: str) -> ModelSpec:
    if place.startswith("agents."):
        return config.agents[int(place.split(".", 1)[1])]
    spec = getattr(config, place)
    assert isinstance(spec, ModelSpec)
    return spec


def question_tokens_of(config: RunConfig, questions: list[Any]) -> int | None:
    """The longest of `questions` as the config's task shows them in a prompt, in tokens
    (counted conservatively, as the templates are); None for no question."""
    from crawdad.tasks import task_named

    task = task_named(config.task)
    longest = max((len(task.show(q)) for q in questions), default=None)
    return None if longest is None else math.ceil(longest / CHARS_PER_TOKEN)


def _needs(
    configs: dict[str, RunConfig],
    footprints: dict[str, Footprint],
    prompt_tokens: int | None,
    question_tokens: int | None = None,
) -> list[_Need]:
    groups: dict[str, list[tuple[RunConfig, str, ModelSpec]]] = {}
    for name, config in configs.items():
        for place, spec in served_places(config):
            assert spec.serve is not None
            if spec.serve.engine == "ollama":  # one `ollama serve` holds every tag
                include = {"executable", "args", "env"}
                key = "ollama|" + spec.serve.model_dump_json(include=include)
            else:  # identical serve tables of one served name share a server
                key = spec.model + "|" + spec.serve.model_dump_json()
            groups.setdefault(key, []).append((config, f"{name}:{place}" if name else place, spec))
    templates = {
        id(c): _template_tokens(c) if prompt_tokens is None else 0 for c in configs.values()
    }
    needs: list[_Need] = []
    names: set[str] = set()
    for members in groups.values():
        config, _, first = members[0]
        serve = first.serve
        assert serve is not None
        tags = list(dict.fromkeys(s.serve.weights for _, _, s in members if s.serve is not None))
        found = [_footprint(s, footprints) for _, _, s in members]
        context = max(
            s.serve.context_length
            if s.serve is not None and s.serve.context_length
            else _context(
                c, place.rpartition(":")[2], s, templates[id(c)], prompt_tokens, question_tokens
            )
            for c, place, s in members
        )
        key = "ollama" if serve.engine == "ollama" else _slug(first.model)
        while key in names:
            key += "-b"
        names.add(key)
        need = _Need(
            key=key,
            engine=serve.engine,
            serve=serve,
            model=first.model,
            places=list(dict.fromkeys(p for _, p, _ in members)),
            footprint=_combined(found) if serve.engine == "ollama" else found[0],
            context=context,
            parallel=max(_parallel(c, [(p, s)]) for c, p, s in members),
            tags=tags if serve.engine == "ollama" else [],
            structured=any(p.rpartition(":")[2] == "extractor" for _, p, _ in members),
        )
        replicas = serve.replicas if isinstance(serve.replicas, int) else 1
        needs += [replace(need, replica=r, key=_replica_key(key, r)) for r in range(replicas)]
    return needs


def _replica_key(key: str, replica: int) -> str:
    return key if replica == 0 else f"{key}-r{replica}"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "model"


def _footprint(spec: ModelSpec, footprints: dict[str, Footprint]) -> Footprint:
    assert spec.serve is not None
    if spec.serve.weights in footprints:
        return footprints[spec.serve.weights]
    from crawdad.serving.sizes import footprint

    ollama_url = spec.base_urls[0] if spec.serve.engine == "ollama" and spec.base_urls else None
    found = footprint(spec.model, spec.serve, ollama_url)
    footprints[spec.serve.weights] = found
    return found


def _combined(found: list[Footprint]) -> Footprint:
    """Several Ollama tags in one server: their weights and KV caches side by side."""
    unique = list({id(f): f for f in found}.values())
    return Footprint(
        weights_bytes=sum(f.weights_bytes for f in unique),
        kv_bytes_per_token=sum(
            f.kv_bytes_per_token or kv_estimate(f.weights_bytes) for f in unique
        ),
        max_context=min((f.max_context for f in unique if f.max_context), default=None),
        source="; ".join(f.source for f in unique),
    )


def _parallel(config: RunConfig, members: list[tuple[str, ModelSpec]]) -> int:
    """Sequences in flight on one server: each debate has one turn at a time, so an agent sees
    about concurrency / agents of them (the extractor and readers fewer, as many as a cap)."""
    caps = [s.max_in_flight for _, s in members if s.max_in_flight]
    share = math.ceil(config.concurrency * len(members) / max(1, len(config.agents)))
    assert members[0][1].serve is not None
    slots = [MAX_SLOTS] if members[0][1].serve.engine in ("llamacpp", "ollama") else []
    return max(1, min([share, *caps, *slots, config.concurrency]))


def _template_tokens(config: RunConfig) -> int:
    """The longest template of the prompt set, in tokens (counted conservatively)."""
    from crawdad.prompts import resolve_set

    try:
        folder = resolve_set(config.prompt_set)
        longest = max((p.stat().st_size for p in folder.glob("*.txt")), default=0)
    except (CrawdadError, OSError):
        longest = 6000
    return math.ceil(max(longest, 2000) / CHARS_PER_TOKEN)


def _context(
    config: RunConfig,
    place: str,
    spec: ModelSpec,
    template: int,
    prompt_tokens: int | None,
    question_tokens: int | None = None,
) -> int:
    """The longest prompt `place` gets plus its max_tokens, rounded up."""
    question = QUESTION_TOKENS if question_tokens is None else question_tokens
    protocol = config.protocol
    agents = len(config.agents)
    answer = min(ANSWER_TOKENS, max(a.max_tokens for a in config.agents))
    if prompt_tokens is not None:
        prompt = prompt_tokens
    elif place == "extractor":  # reads one response, thinking split off or not
        prompt = template + max(a.max_tokens for a in config.agents)
    elif place == "grader":
        prompt = template + question + max(a.max_tokens for a in config.agents)
    else:
        if protocol.kind in ("crawdad", "coding"):
            history = protocol.max_turns - 1
        elif protocol.kind == "judge":
            history = protocol.rounds * (agents + 1)
        elif protocol.kind == "simultaneous":
            history = agents
        else:
            history = 0
        tools = TOOL_RESULT_TOKENS * spec.max_tool_calls if spec.tools else 0
        prompt = template + question + history * answer + tools
    return math.ceil((prompt + spec.max_tokens) / CONTEXT_STEP) * CONTEXT_STEP


def _context_notes(needs: list[_Need]) -> list[str]:
    notes = []
    for need in needs:
        own = need.footprint.max_context
        if need.replica == 0 and own and need.context > own:
            notes.append(
                f"{need.model}: the planned context {need.context} is past the model's own "
                f"{own} tokens: served at {own} (longer prompts fail)"
            )
        if own:
            need.context = min(need.context, own)
        if need.replica == 0 and need.footprint.source.startswith(("estimate", "weights_gb")):
            notes.append(f"{need.key}: sized by {need.footprint.source}")
    return notes


# -- placing ---------------------------------------------------------------------------------


def _tp(need: _Need, gpus: list[GPU], limit: float) -> int | None:
    """The tensor parallelism of a server: the table's, or the fewest GPUs that hold it."""
    if need.serve.tensor_parallel:
        return need.serve.tensor_parallel
    largest = max(g.memory_mib for g in gpus) / 1024 * limit
    return next(
        (tp for tp in TP_SIZES if tp <= len(gpus) and need.gib_per_gpu(tp) <= largest), None
    )


Placement = list[tuple[_Need, list[int]]]


def _fit(needs: list[_Need], gpus: list[GPU], limit: float) -> tuple[Placement | None, list[str]]:
    """Place every server. Where that fails: fewer parallel slots for llama.cpp and Ollama
    (each slot holds a whole context), then an FP8 KV cache for FP8 weights (vLLM, SGLang)."""
    placed = _place(needs, gpus, limit)
    if placed is not None or not gpus:
        return placed, []
    notes: list[str] = []
    slots = {id(n): n.parallel for n in needs}
    fewer = [n for n in needs if not n.elastic and n.parallel > 1]
    while placed is None and any(n.parallel > 1 for n in fewer):
        for need in fewer:
            need.parallel = max(1, need.parallel // 2)
        placed = _place(needs, gpus, limit)
    if placed is not None:
        for need in fewer:
            if need.replica == 0:
                notes.append(
                    f"{need.key}: {need.parallel} parallel sequences ({slots[id(need)]} would "
                    "not fit); the other debates wait their turn in crawdad"
                )
        return placed, notes
    for need in fewer:
        need.parallel = slots[id(need)]
    fp8 = [n for n in needs if n.elastic and (n.footprint.quantization or "").lower() == "fp8"]
    for need in fp8:
        need.kv_cache_dtype = "fp8"
    placed = _place(needs, gpus, limit) if fp8 else None
    if placed is None:
        for need in fp8:
            need.kv_cache_dtype = None
        return None, []
    names = ", ".join(dict.fromkeys(n.model for n in fp8))
    return placed, [f"{names}: an FP8 KV cache (--kv-cache-dtype fp8) to fit beside the others"]


def _place(needs: list[_Need], gpus: list[GPU], limit: float) -> Placement | None:
    """Best fit, largest first: a GPU of its own while there are empty ones, else the one
    with the most memory left (None: some server fits nowhere)."""
    if not gpus:
        return [(need, []) for need in needs]
    free = {g.index: g.memory_mib / 1024 * limit for g in gpus}
    count = {g.index: 0 for g in gpus}
    for need in needs:
        tp = _tp(need, gpus, limit)
        if tp is None or tp > len(gpus):
            return None
        need.tensor_parallel = tp
    out: Placement = []
    for need in sorted(needs, key=lambda n: -n.gib_per_gpu() * n.tensor_parallel):
        per = _held(need, gpus)
        fits = [i for i in free if free[i] >= per]
        fits.sort(key=lambda i: (count[i] > 0, -free[i], i))
        if len(fits) < need.tensor_parallel:
            return None
        chosen = sorted(fits[: need.tensor_parallel])
        for i in chosen:
            free[i] -= per
            count[i] += 1
        out.append((need, chosen))
    order = {id(n): k for k, n in enumerate(needs)}
    return sorted(out, key=lambda item: order[id(item[0])])


def _held(need: _Need, gpus: list[GPU]) -> float:
    """GiB a server takes per GPU while placing: the table's fixed fraction, or its need."""
    if need.serve.gpu_memory is not None:
        return need.serve.gpu_memory * max(g.memory_mib for g in gpus) / 1024
    return need.gib_per_gpu()


def _auto_replicas(placed: Placement, gpus: list[GPU], limit: float) -> Placement:
    """replicas = "auto": one more replica on each group of GPUs the plan left empty."""
    if not gpus:
        return []
    used = {i for _, on in placed for i in on}
    empty = [g for g in gpus if g.index not in used]
    extra: Placement = []
    autos = [n for n, _ in placed if n.serve.replicas == "auto" and n.replica == 0]
    replica = {n.key: 1 for n in autos}
    while autos and empty:
        progressed = False
        for need in autos:
            tp = need.tensor_parallel
            room = [g for g in empty if g.memory_mib / 1024 * limit >= _held(need, gpus)]
            if len(room) < tp:
                continue
            chosen = room[:tp]
            empty = [g for g in empty if g not in chosen]
            r = replica[need.key]
            replica[need.key] += 1
            copy = replace(need, replica=r, key=_replica_key(need.key, r))
            extra.append((copy, [g.index for g in chosen]))
            progressed = True
        if not progressed:
            break
    return extra


def _port_picker(first: int, check: bool) -> Callable[[], int]:
    state = {"next": first}

    def take() -> int:
        port = state["next"]
        while check and port <= MAX_PORT and not port_free("127.0.0.1", port):
            port += 1
        if port > MAX_PORT:
            raise CrawdadError(
                f"the plan needs ports past {MAX_PORT} (from serving.first_port = {first}, "
                "ports in use skipped): set serving.first_port lower, or serve fewer replicas"
            )
        state["next"] = port + 1
        return port

    return take


def _server(
    need: _Need, on: list[int], gpus: list[GPU], placed: Placement, limit: float, port: int
) -> ServerPlan:
    from crawdad.serving.engines import engine

    engine_ = engine(need.engine, need.serve.executable)
    fraction, held = _memory(need, on, gpus, placed, limit)
    parser = getattr(engine_, "reasoning_parser")(need.model, need.serve.weights)  # noqa: B009
    if all(p.rpartition(":")[2] == "extractor" for p in need.places):
        parser = None  # the extractor answers JSON with thinking off
    draft = ServerPlan(
        key=need.key,
        engine=need.engine,
        weights=need.serve.weights,
        served_name=need.model,
        models=need.places,
        gpus=on,
        memory_fraction=fraction,
        memory_gib=round(held, 2),
        tensor_parallel=need.tensor_parallel if on else 1,
        replica=need.replica,
        port=port,
        context_length=need.context,
        reasoning_parser=parser,
        structured_output=need.structured,
        args=list(need.serve.args),
        command=[],
        parallel=need.parallel,
        kv_cache_dtype=need.kv_cache_dtype,
        tags=need.tags,
        executable=need.serve.executable,
        health_path=engine_.health_path(),
    )
    env: dict[str, str] = {}
    if on:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in on)
    environment = getattr(engine_, "environment", None)
    if environment is not None:
        env.update(environment(draft))
    if need.engine == "vllm" and not on:  # vLLM's CPU build sizes its KV cache from this (GiB)
        kv = need.kv_gib() * min(need.parallel, MAX_SLOTS)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv)))
    env.update(need.serve.env)
    return draft.model_copy(update={"command": engine_.command(draft), "env": env})


def _memory(
    need: _Need, on: list[int], gpus: list[GPU], placed: Placement, limit: float
) -> tuple[float | None, float]:
    """(fraction of each GPU, GiB held on each): an elastic server gets the room of its GPUs
    in proportion to its need; llama.cpp and Ollama hold what they need."""
    if not on:
        return None, need.gib_per_gpu()
    cards = {g.index: g.memory_mib / 1024 for g in gpus}
    if need.serve.gpu_memory is not None:
        return need.serve.gpu_memory, need.serve.gpu_memory * min(cards[i] for i in on)
    if not need.elastic:
        return None, need.gib_per_gpu()
    fractions = []
    for i in on:
        sharing = [n for n, where in placed if i in where]
        fixed = sum(_held(n, gpus) for n in sharing if not n.elastic or n.serve.gpu_memory)
        elastic = sum(n.gib_per_gpu() for n in sharing if n.elastic and not n.serve.gpu_memory)
        room = cards[i] * limit - fixed
        fractions.append(need.gib_per_gpu() * room / elastic / cards[i])
    fraction = math.floor(min(fractions) * 1000) / 1000
    return fraction, fraction * min(cards[i] for i in on)


def _sharing_notes(servers: Iterable[ServerPlan], gpus: list[GPU]) -> list[str]:
    notes = []
    for gpu in gpus:
        on = [s for s in servers if gpu.index in s.gpus]
        if len(on) > 1:
            parts = ", ".join(
                f"{s.key} {s.memory_fraction:.3f}" if s.memory_fraction else f"{s.key}" for s in on
            )
            notes.append(f"GPU {gpu.index} is shared: {parts}")
    return notes


def _kv_room_notes(needs: list[_Need], servers: list[ServerPlan]) -> list[str]:
    """Where an elastic server's KV cache holds, at their whole length, fewer than half the
    requests crawdad may send it at once (vLLM logs the same figure as its "maximum
    concurrency"): the rest wait at the server, which is safe, but that is the throughput to
    expect. (Most answers are shorter than the whole context, hence half.)"""
    notes = []
    for need, server in zip(needs, servers, strict=True):
        if not (need.elastic and server.gpus):
            continue
        tp = server.tensor_parallel
        room = server.memory_gib * tp - need.footprint.weights_bytes / GIB - OVERHEAD_GIB * tp
        tokens = max(0, int(room * GIB / need.kv_bytes_per_token()))
        contexts = tokens / need.context
        if contexts >= need.parallel / 2:
            continue
        more = [] if need.kv_cache_dtype == "fp8" else ["an FP8 KV cache"]
        more += [] if need.footprint.quantization else ["FP8 weights"]
        more += ["a shorter max_tokens", "another GPU"]
        notes.append(
            f"{server.key}: KV cache for about {tokens:,} tokens, {contexts:.1f} whole contexts "
            f"of {need.context:,}, where crawdad may send {need.parallel} requests at once: the "
            f"rest wait at the server (most answers are shorter). For more at once: "
            f"{', '.join(more[:-1])} or {more[-1]}"
        )
    return notes


# -- refusing --------------------------------------------------------------------------------


def _refusal(config: RunConfig, needs: list[_Need], gpus: list[GPU], limit: float) -> str:
    if not gpus:
        return "no GPU to place the servers on"
    largest = max(g.memory_mib for g in gpus) / 1024
    room = largest * limit
    asked = sum(n.gib_per_gpu() for n in needs)
    lines = [
        f"the served models do not fit on {len(gpus)} GPU(s) of {largest:.0f} GiB "
        f"({room:.1f} GiB each at serving.gpu_memory_limit {limit:g}): they need "
        f"{asked:.1f} GiB in all:"
    ]
    for need in needs:
        f = need.footprint
        lines.append(
            f"  {need.key}: {need.gib_per_gpu(1):.1f} GiB = weights {f.weights_bytes / GIB:.1f}"
            + (f" ({f.dtype})" if f.dtype else "")
            + f" + KV cache {need.kv_gib():.1f} for {need.context} tokens"
            f" + {OVERHEAD_GIB:g} overhead"
        )
    lines.append("What would fit:")
    lines += _what_fits(config, needs, gpus, limit)
    return "\n".join(lines)


def _what_fits(config: RunConfig, needs: list[_Need], gpus: list[GPU], limit: float) -> list[str]:
    out = []
    heaviest = max(n.footprint.weights_bytes for n in needs)
    big = [
        n
        for n in needs
        if not n.footprint.quantization
        and n.engine != "ollama"
        and n.footprint.weights_bytes >= heaviest / 4
    ]
    for label, scale, example in (
        ("FP8", 0.5, "e.g. Qwen/Qwen3-32B-FP8, with vLLM or SGLang"),
        ("4-bit (AWQ, GPTQ or a GGUF Q4_K_M)", 0.3, "AWQ with vLLM, a GGUF with llama.cpp"),
    ):
        if big and _fits(_scaled(needs, big, scale, label), gpus, limit):
            names = ", ".join(dict.fromkeys(n.model for n in big))
            out.append(f"  - a quantized checkpoint: {label} weights of {names} ({example})")
            break
    more = _gpus_needed(needs, gpus, limit)
    if more:
        name = max(gpus, key=lambda g: g.memory_mib).name
        out.append(f"  - another GPU: {more} GPUs like this one ({name}) hold this plan")
    shorter = _shorter_max_tokens(config, needs, gpus, limit)
    if shorter:
        out.append(f"  - a shorter max_tokens: {shorter} (the KV cache shrinks with the context)")
    if not out:
        out.append("  - smaller models, or a quantized checkpoint on more GPUs")
    return out


def _fits(needs: list[_Need], gpus: list[GPU], limit: float) -> bool:
    return _fit([replace(n) for n in needs], gpus, limit)[0] is not None


def _scaled(needs: list[_Need], which: list[_Need], scale: float, label: str) -> list[_Need]:
    ids = {id(n) for n in which}
    quant = "fp8" if label == "FP8" else "int4"
    out = []
    for n in needs:
        if id(n) in ids:
            weights = int(n.footprint.weights_bytes * scale)
            update = {"weights_bytes": weights, "quantization": quant}
            n = replace(n, footprint=n.footprint.model_copy(update=update))
        out.append(replace(n))
    return out


def _gpus_needed(needs: list[_Need], gpus: list[GPU], limit: float) -> int | None:
    card = max(gpus, key=lambda g: g.memory_mib)
    for count in range(len(gpus) + 1, 17):
        more = [card.model_copy(update={"index": i}) for i in range(count)]
        if _fits(needs, more, limit):
            return count
    return None


def _shorter_max_tokens(
    config: RunConfig, needs: list[_Need], gpus: list[GPU], limit: float
) -> int | None:
    longest = max(a.max_tokens for a in config.agents)
    tokens = longest // 2
    while tokens >= 1024:
        cut = longest - tokens
        shorter = [
            replace(n, context=max(CONTEXT_STEP, n.context - cut))
            if not n.serve.context_length
            else replace(n)
            for n in needs
        ]
        if _fits(shorter, gpus, limit):
            return tokens
        tokens //= 2
    return None
