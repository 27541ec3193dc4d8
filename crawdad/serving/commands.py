"""What `crawdad serve --plan` and `crawdad serve --slurm` do, and what `crawdad doctor` checks
of served models: kept out of cli.py, which only parses the options."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crawdad.config import RunConfig, read_toml
from crawdad.errors import CrawdadError
from crawdad.resources import find_config
from crawdad.serving.base import GPU, Plan


def is_experiment(path: Path) -> bool:
    """An experiment file (variants or axes), not a run config."""
    found = find_config(path)
    return bool({"variants", "axes"} & set(read_toml(found)))


def experiment_configs(path: Path) -> dict[str, RunConfig]:
    """An experiment file's variant configs, by variant name."""
    from crawdad.run.experiment import load_experiment, variant_configs

    spec, _sha = load_experiment(path)
    return variant_configs(spec, str(path))


def make_plan(configs: dict[str, RunConfig], gpus: list[GPU] | None = None) -> Plan:
    from crawdad.serving.plan import plan_configs

    plan = plan_configs(configs, gpus)
    if not plan.servers:
        raise CrawdadError(
            "no model of this config has a `serve` table, so there is nothing to serve: add one "
            '(e.g. serve = { engine = "vllm", weights = "Qwen/Qwen3-32B" }) or see '
            "docs/how-to/servers.md"
        )
    return plan


def plan_table(plan: Plan, source: str) -> str:
    """The plan as a reader checks it: one row per server, then each command line."""
    if plan.gpus:
        cards = ", ".join(f"{g.index}: {g.name} {g.memory_mib / 1024:.0f} GiB" for g in plan.gpus)
        head = f"Plan for {source} on {len(plan.gpus)} GPU(s) ({cards})"
    else:
        head = f"Plan for {source} on the CPU (no GPU found)"
    rows = [("GPU", "server", "serves", "memory", "port", "context")]
    for s in plan.servers:
        where = ",".join(map(str, s.gpus)) if s.gpus else "CPU"
        memory = f"{s.memory_gib:.1f} GiB"
        if s.memory_fraction is not None:
            memory = f"{s.memory_fraction:.3f} = {memory}"
        serves = f"{', '.join(s.tags or [s.served_name])} ({', '.join(s.models)})"
        rows.append((where, s.key, serves, memory, str(s.port), str(s.context_length)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += ["", "Commands (crawdad starts each in its own process group):"]
    for s in plan.servers:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in s.env.items())
        lines.append(f"  {s.key}: {env + ' ' if env else ''}{shlex.join(s.command)}")
    if plan.notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in plan.notes]
    return "\n".join(lines)


# -- doctor ------------------------------------------------------------------------------------


@dataclass
class ServedCheck:
    lines: list[str] = field(default_factory=list)  # what was found, for the reader
    problems: list[str] = field(default_factory=list)  # what stops a run from starting


def check_served(
    configs: dict[str, RunConfig],
    gpus: list[GPU] | None = None,
    say: Callable[[str], None] | None = None,
    every: float | None = None,
) -> ServedCheck:
    """Each served model's engine installed (else the line that installs it), its weights
    present, and the plan fits (else what would). `say` is told what is being checked before
    each engine's version probe (an import of vLLM takes half a minute), and every `every`
    seconds (STILL_EVERY) while a check lasts."""
    from crawdad.serving.engines import engine
    from crawdad.serving.plan import plan_configs, served_places
    from crawdad.serving.sizes import footprint
    from crawdad.serving.waits import STILL_EVERY, heartbeat

    def told(line: str) -> None:
        if say is not None:
            say(line)

    beat = every or STILL_EVERY

    check = ServedCheck()
    engines: set[tuple[str, str | None]] = set()
    weights: set[str] = set()
    missing = False
    for name, config in configs.items():
        for place, spec in served_places(config):
            serve = spec.serve
            assert serve is not None
            where = f"{name}: {place}" if name else place
            if (serve.engine, serve.executable) not in engines:
                engines.add((serve.engine, serve.executable))
                found = engine(serve.engine, serve.executable)
                told(
                    f"checking {serve.engine} ({found.executable}): is it installed, which version"
                )
                with heartbeat(f"checking {serve.engine} ({found.executable})", told, beat):
                    installed = found.installed()
                    version = found.version() if installed else None
                if not installed:
                    check.problems.append(
                        f"{where}: {serve.engine} is not installed ({found.executable} not "
                        f"found)\n      fix: {found.install_hint()}"
                    )
                else:
                    said = version or "version unknown"
                    check.lines.append(f"{serve.engine:7} {found.executable}: {said}")
            if serve.weights in weights:
                continue
            weights.add(serve.weights)
            try:
                with heartbeat(f"reading the size of {serve.weights}", told, beat):
                    size = footprint(spec.model, serve)
            except CrawdadError as e:
                check.problems.append(f"{where}: {e}")
                missing = True
            else:
                check.lines.append(
                    f"weights {serve.weights}: {size.weights_bytes / 1024**3:.1f} GiB"
                    f" ({size.source})"
                )
    if not engines or missing:  # nothing served, or the plan lacks a model's size
        return check
    try:
        plan = plan_configs(configs, gpus)
    except CrawdadError as e:
        check.problems.append(f"the plan does not fit: {e}")
    else:
        where = f"{len(plan.gpus)} GPU(s)" if plan.gpus else "the CPU"
        check.lines.append(f"plan    {len(plan.servers)} server(s) fit on {where}")
        check.lines += [f"        - {note}" for note in plan.notes]
    return check


# -- SLURM jobs and weights --------------------------------------------------------------------


def job_step(job: Path, *, node: bool, watch: int | None) -> int:
    """`crawdad serve --node JOB` (serve this node's share of a job) or `--await JOB` (print the
    served URLs once every node's servers answer): the steps of a `--slurm` script."""
    import json
    import os
    import sys

    from crawdad.serving.node import AWAIT_MARGIN, await_nodes, read_job, serve_node

    if node:
        return serve_node(job)
    raw = os.environ.get("CRAWDAD_STARTUP_TIMEOUT", "").strip()
    try:
        timeout = float(raw) if raw else read_job(job).serving.startup_timeout + AWAIT_MARGIN
    except ValueError:
        raise CrawdadError(f"CRAWDAD_STARTUP_TIMEOUT={raw!r}: give seconds, such as 1200") from None
    try:
        urls = await_nodes(job, timeout, watch)
    except CrawdadError as e:
        print(f"crawdad: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(urls), flush=True)
    return 0


def fetch_weights(configs: dict[str, RunConfig]) -> None:
    """`crawdad serve --fetch`: every served model's weights onto this machine."""
    import sys

    from crawdad.serving.prefetch import fetch

    count = fetch(configs, lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{count} served model weight(s) ready on this machine", file=sys.stderr)
