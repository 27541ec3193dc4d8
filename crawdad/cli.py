"""The command line: parse options, build the config, call the library, print errors for humans."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from crawdad.config import RunConfig, load_config
from crawdad.errors import CrawdadError

app = typer.Typer(
    help="Dual-agent debates between local reasoning models on CLadder, and the CRAwDAD analysis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(help="Get and inspect CLadder.", no_args_is_help=True)
app.add_typer(data_app, name="data")

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML config file.", exists=False)
]


def _echo_err(message: str) -> None:
    typer.secho(message, fg=typer.colors.RED, err=True)


def _overrides(**flags: Any) -> dict[str, Any]:
    """Flags that were given, as a nested config dict."""
    out: dict[str, Any] = {}
    selection = {k: flags.pop(k) for k in list(flags) if k in SELECTION_FLAGS}
    out.update({k: v for k, v in flags.items() if v not in (None, [], ())})
    sel = {k: v for k, v in selection.items() if v not in (None, [], ())}
    if sel:
        out["selection"] = sel
    return out


SELECTION_FLAGS = {
    "limit",
    "sample",
    "ranges",
    "rungs",
    "query_types",
    "alignments",
    "questions_file",
}


def _parse_set(items: list[str]) -> dict[str, Any]:
    """--set agents.0.model=qwen3:8b style overrides (values parsed as TOML scalars)."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise CrawdadError(f"--set needs KEY=VALUE, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _apply_agent_sets(config_data: dict[str, Any], base: RunConfig) -> dict[str, Any]:
    """Numeric keys under "agents" index the agent list (agents.0.model=...)."""
    agents = config_data.get("agents")
    if isinstance(agents, dict):
        current = [a.model_dump(mode="json", exclude={"api_key"}) for a in base.agents]
        for index, values in agents.items():
            if not str(index).isdigit() or int(index) >= len(current):
                raise CrawdadError(
                    f"--set agents.{index}: use an agent index 0..{len(current) - 1}"
                )
            current[int(index)].update(values)
        config_data["agents"] = current
    return config_data


def build_config(config: Path | None, sets: list[str], **flags: Any) -> RunConfig:
    overrides = _overrides(**flags)
    extra = _parse_set(sets)
    if extra:
        base = load_config(config, overrides)
        overrides = {**overrides, **_apply_agent_sets(extra, base)}
    return load_config(config, overrides)


@app.command()
def run(
    data: Annotated[
        Path, typer.Option("--data", "-d", help="CLadder zip, folder or questions JSON file.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Run folder (created, or resumed if it exists).")
    ],
    config: ConfigOpt = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N selected questions.")] = None,
    seed: Annotated[
        int | None, typer.Option(help="Run seed (first speakers, sampling seeds).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="Debates in flight at once.")] = None,
    schedule: Annotated[
        str | None, typer.Option(help="fifo, or grouped (one-GPU workstations).")
    ] = None,
    sample: Annotated[
        int | None, typer.Option(help="Seeded sample of N, stratified by rung and alignment.")
    ] = None,
    ranges: Annotated[
        list[str], typer.Option("--range", help="Index range(s) like 0-99 or 500-.")
    ] = [],  # noqa: B006
    rungs: Annotated[list[int], typer.Option("--rung", help="Only these rungs (repeatable).")] = [],  # noqa: B006
    query_types: Annotated[
        list[str], typer.Option("--query-type", help="Only these query types.")
    ] = [],  # noqa: B006
    alignments: Annotated[
        list[str], typer.Option("--alignment", help="commonsense, anticommonsense, nonsense.")
    ] = [],  # noqa: B006
    questions_file: Annotated[
        str | None, typer.Option(help="Which questions file in a folder or zip.")
    ] = None,
    sets: Annotated[
        list[str], typer.Option("--set", help="Override a config key: agents.0.model=qwen3:8b.")
    ] = [],  # noqa: B006
    force: Annotated[
        bool, typer.Option(help="Resume even if the settings differ from the run's.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Run (or resume) the debates of the selected questions."""
    from crawdad.data import load_cladder, select

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
    dataset = select(load_cladder(data, cfg.selection.questions_file), cfg.selection, cfg.seed)
    _run(cfg, dataset, out, force=force, progress=progress)


def _run(cfg: RunConfig, dataset: Any, out: Path, **kwargs: Any) -> None:
    from crawdad.runner import RunSummary, ServersStuck
    from crawdad.runner import run as run_debates

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
    except ServersStuck as e:
        for line in e.summary.lines():
            typer.echo(line)
        raise
    for line in summaries[-1].lines():
        typer.echo(line)
    if summaries[-1].remaining:  # some debates failed: a script should notice
        raise typer.Exit(3)


@app.command()
def doctor(
    config: ConfigOpt = None,
    sets: Annotated[list[str], typer.Option("--set")] = [],  # noqa: B006
) -> None:
    """Check that the servers answer and have the models; print what to run if not."""
    from crawdad.doctor import diagnose

    cfg = build_config(config, sets)
    report = asyncio.run(diagnose(cfg))
    for url, check in report.servers.items():
        state = (
            "down"
            if check.error
            else f"up (version {check.version or '?'}, {len(check.models)} models)"
        )
        typer.echo(f"{check.backend:7} {url}: {state}")
    for warning in report.warnings:
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW)
    if not report.ok:
        for problem in report.problems:
            _echo_err(f"problem: {problem}")
        raise typer.Exit(1)
    typer.secho("All servers and models are ready.", fg=typer.colors.GREEN)


@app.command()
def show(
    run_dir: Annotated[Path, typer.Argument(help="Run folder.")],
    question_id: Annotated[str, typer.Argument(help="Question id.")],
    thinking: Annotated[bool, typer.Option(help="Print the reasoning traces too.")] = False,
) -> None:
    """Print one debate the way the paper's appendix C does."""
    from crawdad.show import format_debate
    from crawdad.store import RunStore, require_run_folder

    require_run_folder(run_dir)
    records = {str(r.question_id): r for r in RunStore(run_dir).records()}
    if question_id not in records:
        raise CrawdadError(f"question {question_id} is not in {run_dir / 'debates.jsonl'}")
    typer.echo(format_debate(records[question_id], thinking=thinking))


@app.command()
def analyze(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="One or more run folders, or one experiment folder.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Report folder (default: RUN/report).")
    ] = None,
) -> None:
    """Write the paper's tables and figures (and more) for one or more runs."""
    import warnings

    from analysis.report import write_report

    target = out or run_dirs[0] / "report"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", UserWarning)
        path = write_report(list(run_dirs), target)
    for w in seen:  # what the loader left out or could not read; also listed in the report
        typer.secho(f"warning: {w.message}", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"report written: {path}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o")] = Path("runs/demo"),
    limit: Annotated[int | None, typer.Option(help="Only the first N example questions.")] = None,
    concurrency: Annotated[int, typer.Option()] = 16,
    report: Annotated[bool, typer.Option(help="Write the analysis report afterwards.")] = True,
    progress: Annotated[bool, typer.Option()] = True,
) -> None:
    """Run debates on crawdad's example questions against simulated servers (no GPU needed)."""
    from crawdad.demo import run_demo

    run_demo(out, limit=limit, concurrency=concurrency, progress=progress)
    if report:
        from analysis.report import write_report

        typer.echo(f"report written: {write_report([out], out / 'report')}")


@app.command("fake-server")
def fake_server(
    kind: Annotated[str, typer.Option(help="ollama or openai.")] = "ollama",
    port: Annotated[int, typer.Option()] = 11434,
    latency: Annotated[float, typer.Option(help="Seconds per request.")] = 0.5,
    capacity: Annotated[int, typer.Option(help="Requests served at once.")] = 4,
) -> None:
    """Serve simulated debaters and extractor on 127.0.0.1 until Ctrl-C (for trying configs)."""
    from crawdad.demo import serve_forever

    serve_forever(kind, port, latency, capacity)


@data_app.command("fetch")
def data_fetch(
    dest: Annotated[Path, typer.Option(help="Folder to download into.")] = Path("data"),
    url: Annotated[str | None, typer.Option(help="Download from here instead.")] = None,
) -> None:
    """Download the official CLadder v1 zip into data/ and check it."""
    from crawdad.fetch import DEFAULT_URL, fetch

    path = fetch(dest, url or DEFAULT_URL)
    typer.echo(f"CLadder is ready: {path}\nrun with: crawdad run --data {path} --out runs/NAME")


@data_app.command("info")
def data_info(
    data: Annotated[Path, typer.Argument(help="CLadder zip, folder or questions file.")],
    questions_file: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Load a dataset, check it, and print its counts."""
    from crawdad.data import load_cladder, summary

    dataset = load_cladder(data, questions_file)
    typer.echo(
        f"{dataset.info.questions_file}: {dataset.info.n_total} questions (sha256 {dataset.info.sha256[:12]})"
    )
    for key, counts in summary(dataset.questions).items():
        typer.echo(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        app()  # handles usage errors and exit codes itself; our errors come through
    except CrawdadError as e:
        if os.environ.get("CRAWDAD_DEBUG"):
            raise
        _echo_err(f"Error: {e}")
        sys.exit(1)
