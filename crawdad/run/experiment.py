"""Experiment files: a base config plus named variants (each a set of overrides), or axes whose
product makes the variants, with exclusions. Each variant is an ordinary RunConfig; running them
runs them all in one process (`run_experiment`).

    baseline = "paper"
    [base]
    concurrency = 64
    [variants.paper]
    [variants.sc5]
    protocol = { kind = "solo", samples = 5 }
    [axes]
    prompt_set = ["no-confidence", "no-be-confident"]
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawdad import __version__
from crawdad.backends.schedule import ModelGate
from crawdad.config import RunConfig, _describe, _error_line, deep_merge, read_toml
from crawdad.data.questions import Dataset
from crawdad.errors import ConfigError, StoreError
from crawdad.records import ExperimentManifest
from crawdad.resources import find_config
from crawdad.run.response_store import RESPONSES, ResponseStore
from crawdad.run.runner import (
    Job,
    RunSummary,
    build_setup,
    check_servers_of,
    make_job,
    manifest_for,
    run_jobs,
    server_pools,
)
from crawdad.run.scheduler import Scheduler, check_random_order, pool_of, rule_judge
from crawdad.run.store import (
    EXPERIMENT,
    RunStore,
    Scan,
    changed_selection_history,
    changed_stop_history,
    read_experiment,
    selection_change_note,
    selection_differences,
    selection_for,
    selection_identity,
    stop_change_note,
    stop_differences,
)
from crawdad.safe_files import Folder, plain_name_problem, read_input, use_input_limit

log = logging.getLogger("crawdad")

VARIANT_NAME = re.compile(r"^[A-Za-z0-9_.=,+-]+$")


class ExperimentFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline: str | None = None  # the variant every other is compared with
    base: dict[str, Any] = Field(default_factory=dict)  # run config keys shared by all
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> overrides
    axes: dict[str, list[Any]] = Field(default_factory=dict)  # dotted key -> values
    exclude: list[dict[str, Any]] = Field(default_factory=list)  # dotted key -> value, all match
    # The stopping rule (`crawdad.stopping.decide.Rule`: alpha, margin, min_questions,
    # max_questions, max_gpu_seconds); absent: every variant answers every question (the
    # paper's full run).
    stop: dict[str, Any] | None = None


def nest(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"protocol.kind": "judge"} -> {"protocol": {"kind": "judge"}}"""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _axis_name(key: str, value: Any) -> str:
    text = value if isinstance(value, str) else str(value).lower()
    return f"{key.split('.')[-1]}={text}"


def _excluded(combo: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    return any(all(combo.get(k) == v for k, v in rule.items()) for rule in rules)


def expand(spec: ExperimentFile) -> dict[str, dict[str, Any]]:
    """Variant name -> its overrides (nested), named variants first, then the axes' product."""
    variants = dict(spec.variants)
    if spec.axes:
        keys = list(spec.axes)
        for values in itertools.product(*(spec.axes[k] for k in keys)):
            combo = dict(zip(keys, values, strict=True))
            if _excluded(combo, spec.exclude):
                continue
            name = ",".join(_axis_name(k, v) for k, v in combo.items())
            if name in variants:
                raise ConfigError(f"variant {name!r} is named twice (once by the axes)")
            variants[name] = nest(combo)
    return variants


def load_experiment(path: Path) -> tuple[ExperimentFile, str]:
    """The experiment file (a path, or a ready one by name) and its sha256; errors name the file
    and the key."""
    path = find_config(path)
    data = read_toml(path)
    try:
        spec = ExperimentFile.model_validate(data)
    except ValidationError as e:
        lines = [f"{path} is not a valid crawdad experiment file:"]
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            hint = (
                " (known keys: baseline, base, variants, axes, exclude, stop)"
                if err["type"] == "extra_forbidden"
                else ""
            )
            lines.append(f"  - {loc}: {err['msg']}{hint}")
        raise ConfigError("\n".join(lines)) from None
    check_stop(spec, str(path))
    return spec, hashlib.sha256(read_input(path, "experiment file")).hexdigest()


def check_stop(spec: ExperimentFile, source: str) -> None:
    """A stopping rule is refused before any work where it cannot hold."""
    if spec.stop is None:
        return
    stop_rule(spec.stop, source)
    if spec.baseline is None:
        raise ConfigError(
            f"{source}: [stop] decides each variant against the baseline: name one with "
            'baseline = "VARIANT"'
        )


def stop_rule(stop: Mapping[str, Any], source: str = "[stop]") -> Any:
    """The stopping rule of `[stop]` (or `--stop KEY=VALUE`), validated."""
    from crawdad.stopping.decide import Rule

    try:
        return Rule.model_validate(dict(stop))
    except ValidationError as e:
        where = source if source.startswith(("[stop]", "--")) else f"{source}, [stop]"
        lines = [f"{where} is not a valid stopping rule:"]
        lines += [_error_line(err, Rule, "stopping") for err in e.errors()]
        raise ConfigError("\n".join(lines)) from None


def recorded_rule(stop: Mapping[str, Any]) -> Any:
    """The stopping rule a run folder's manifest records. A manifest written before rules named
    their target (run manifest schema 8, experiment manifest schema 2) has none: its decisions
    were about the run (the only sequence there was), and are read so. One written before rules
    named their method (issue 52) was decided by its sequence's edges: `method = "cs"`."""
    return stop_rule({"target": "run", "method": "cs", **stop}, "the manifest's [stop]")


def short_run_warning(rule: Any, selected: int) -> str | None:
    """A warning, before a run starts, where the rule cannot decide anything: fewer questions
    selected than its min_questions."""
    if selected >= rule.min_questions:
        return None
    return (
        f"only {selected} question(s) selected, fewer than the stopping rule's min_questions = "
        f"{rule.min_questions}: nothing can be decided and every comparison will end undecided; "
        "select more questions (--limit, the data) or lower min_questions"
    )


def variant_configs(
    spec: ExperimentFile, source: str, flags: dict[str, Any] | None = None
) -> dict[str, RunConfig]:
    """Each variant's RunConfig: defaults, then [base], then its overrides, then the command's
    flags (which apply to every variant). The selection belongs to the experiment, not a variant:
    every variant runs on the same questions."""
    variants = expand(spec)
    if not variants:
        raise ConfigError(f"{source} names no variants: add [variants.NAME] tables or [axes]")
    for name, overrides in variants.items():
        if problem := plain_name_problem(name):
            raise ConfigError(
                f"{source}: variant name {problem}: it names the variant's folder inside the "
                "experiment folder, so it must be letters, digits and _ . = , + - (not . or ..)"
            )
        if not VARIANT_NAME.match(name):
            raise ConfigError(
                f"{source}: variant name {name!r} must be letters, digits and _ . = , + - "
                "(it names the variant's folder)"
            )
        if "selection" in overrides:
            raise ConfigError(
                f"{source}: variant {name!r} sets a selection; every variant runs on the same "
                "questions, so set it in [base] or with the command's flags"
            )
    if spec.baseline is not None and spec.baseline not in variants:
        raise ConfigError(
            f"{source}: baseline {spec.baseline!r} is not a variant (variants: "
            f"{', '.join(variants)})"
        )
    configs = {}
    for name, overrides in variants.items():
        data = deep_merge(deep_merge(spec.base, overrides), flags or {})
        try:
            configs[name] = RunConfig.model_validate(data)
        except ValidationError as e:
            raise ConfigError(_describe(e, f"{source}, variant {name!r},")) from None
    return configs


# --- running -----------------------------------------------------------------------------


def experiment_manifest(
    spec: ExperimentFile, source: str, sha256: str, names: list[str]
) -> ExperimentManifest:
    variants = expand(spec)
    return ExperimentManifest(
        crawdad_version=__version__,
        created_at=datetime.now(UTC),
        file=source,
        file_sha256=sha256,
        baseline=spec.baseline,
        variants={n: variants[n] for n in names},
        base=spec.base,
        stop=stop_rule(spec.stop).model_dump(mode="json") if spec.stop is not None else None,
    )


def _lock(out: Path) -> IO[bytes]:
    with Folder(out) as folder:
        handle = folder.lock(".lock", wait=False)
    if handle is None:
        raise StoreError(
            f"another crawdad process is running the experiment in {out}; wait for it or stop it"
        ) from None
    return handle


async def run_experiment(
    configs: dict[str, RunConfig],
    manifest: ExperimentManifest,
    dataset: Dataset | Mapping[str, Any],
    out: Path,
    *,
    force: bool = False,
    progress: bool = True,
    simulated: bool = False,
    check_servers: bool = True,
    on_summary: Callable[[list[RunSummary]], None] | None = None,
) -> list[RunSummary]:
    """Every variant over the same questions, in one process: their debates in flight together
    through pools shared per server, identical requests answered once from DIR/responses.jsonl.
    Each variant is an ordinary run folder DIR/<variant>; the same command resumes them all.
    `dataset`: one for every variant, or variant name -> its own (variants of two tasks, such
    as MAC's pairs and whole graphs, select the same graphs as two kinds of items). Served
    models (`serve` tables) get their servers started first, and stopped at the end."""
    from crawdad.run.served import served_experiment

    out = Path(out)
    # (a dataset of any task has its items as `questions`)
    if isinstance(dataset, Mapping):
        questions = {name: d.questions for name, d in dataset.items()}
    else:
        questions = {name: dataset.questions for name in configs}
    async with served_experiment(configs, out, progress=progress, questions=questions) as (
        configs,
        supervisor,
    ):
        return await _run_experiment(
            configs,
            manifest,
            dataset,
            out,
            force=force,
            progress=progress,
            simulated=simulated,
            check_servers=check_servers,
            on_summary=on_summary,
            supervisor=supervisor,
        )


async def _run_experiment(
    configs: dict[str, RunConfig],
    manifest: ExperimentManifest,
    dataset: Dataset | Mapping[str, Any],
    out: Path,
    *,
    force: bool,
    progress: bool,
    simulated: bool,
    check_servers: bool,
    on_summary: Callable[[list[RunSummary]], None] | None,
    supervisor: Any | None,
) -> list[RunSummary]:
    first = dataset[next(iter(configs))] if isinstance(dataset, Mapping) else dataset
    first_config = next(iter(configs.values()))
    if manifest.stop is not None:
        check_random_order(first_config.selection.order, str(manifest.file))
    info = getattr(first, "info", None)
    if info is not None:  # the questions: a stopped experiment's identity, as its rule is
        manifest = manifest.model_copy(
            update={"selection": selection_identity(info, first_config.seed)}
        )
    earlier = _earlier_manifest(out, manifest, force)
    lock = _lock(out)
    grouped = any(c.schedule == "grouped" for c in configs.values())
    gate = ModelGate() if grouped else None
    pools = server_pools(list(configs.values()), gate)
    responses = ResponseStore(out / RESPONSES).open()
    stores: list[RunStore] = []
    scans: list[Scan] = []
    try:
        jobs = []
        for name, config in configs.items():
            data = dataset[name] if isinstance(dataset, Mapping) else dataset
            setup, _ = build_setup(config, simulated, pools, responses)
            servers = await check_servers_of(config) if check_servers else None
            if servers is not None and servers.simulated:  # fakes: every record says so too
                setup.simulated = True
            store = RunStore(out / name, root=out)
            try:
                started = (
                    [
                        r
                        for r in supervisor.records()
                        if any(m.startswith(f"{name}:") for m in r.models)
                    ]
                    if supervisor is not None
                    else None
                )
                scan = store.open(
                    manifest_for(config, data, setup, servers, simulated, started), force=force
                )
            except StoreError as e:
                raise StoreError(f"variant {name!r}: {e}") from None
            stores.append(store)
            scans.append(scan)
            jobs.append(
                make_job(setup, store, scan, data.questions, name, getattr(data, "known_ids", None))
            )
        _write_manifest(out, manifest, earlier, _finished(manifest, jobs, scans))
        concurrency = max(c.concurrency for c in configs.values())  # per variant
        every = min(c.server_metrics for c in configs.values())  # the servers are shared
        scheduler = None
        if manifest.stop is not None:
            words = pool_of(info) if info is not None else ""
            scheduler = experiment_scheduler(manifest, jobs, scans, concurrency, words)
        return await run_jobs(
            jobs,
            gate,
            progress,
            concurrency,
            on_summary,
            responses,
            metrics=(out, every),
            scheduler=scheduler,
            supervisor=supervisor,
        )
    finally:
        for store in stores:
            store.close()
        responses.close()
        for pool in pools.values():
            await pool.aclose()
        lock.close()


def experiment_scheduler(
    manifest: ExperimentManifest,
    jobs: list[Job],
    scans: list[Scan],
    concurrency: int,
    pool: str = "",
) -> Scheduler:
    """The scheduler of an experiment with a stopping rule: every variant against the baseline,
    alpha shared among them (Bonferroni), over the run's order of questions."""
    from tqdm.auto import tqdm

    rule = recorded_rule(manifest.stop or {})
    orders = {tuple(j.order) for j in jobs}
    if len(orders) != 1:
        raise ConfigError(
            "[stop] compares variants question by question: every variant must run the same "
            "questions (these are of different tasks); leave [stop] out"
        )
    names = [j.name for j in jobs]
    return Scheduler.of_scans(
        names,
        scans,
        concurrency,
        order=list(orders.pop()),
        baseline=manifest.baseline,
        judge=rule_judge(rule, comparisons=max(1, len(names) - 1)),
        max_questions=rule.max_questions,
        max_gpu_seconds=rule.max_gpu_seconds,
        say=tqdm.write,
        pool=pool,
    )


def _earlier_manifest(
    out: Path, manifest: ExperimentManifest, force: bool
) -> ExperimentManifest | None:
    """The experiment's manifest from before this command (None: a new or damaged one). A
    stopping rule other than the one it was run under is refused without `force`: the rule's
    guarantee holds only for a rule fixed before any decision was seen."""
    try:
        old = read_experiment(out)
    except StoreError:  # a damaged one is written anew
        return None
    if old is None or force:
        return old
    if diffs := stop_differences(old.stop, manifest.stop):
        raise StoreError(
            f"{out} holds an experiment run under another stopping rule:\n  - "
            + "\n  - ".join(diffs)
            + "\nIts decisions hold with the stated probability only under a rule fixed before "
            "any of them was seen. Resume with the rule it was run under (the same [stop] and "
            "--stop), use another --out folder, or pass --force to change it anyway (the "
            "report then says that the guarantee no longer holds as stated)."
        )
    if old.stop is not None and (diffs := selection_differences(old.selection, manifest.selection)):
        raise StoreError(
            f"{out} holds a stopped experiment run on other questions:\n  - "
            + "\n  - ".join(diffs)
            + "\nIts decisions were made on those questions and hold only for questions fixed "
            "before any decision was seen. Resume with the selection it was run with (the same "
            "--rung, --limit, filters and data file), use another --out folder, or pass --force "
            "to change them anyway (the manifest keeps the history, and the report then says "
            "that the guarantee no longer holds as stated)."
        )
    return old


def _finished(manifest: ExperimentManifest, jobs: list[Job], scans: list[Scan]) -> int:
    """Questions finished so far: the baseline's, or the most any variant has (no baseline)."""
    counts = {j.name: len(s.finished) for j, s in zip(jobs, scans, strict=True)}
    if manifest.baseline in counts:
        return counts[manifest.baseline]
    return max(counts.values(), default=0)


def _write_manifest(
    out: Path,
    manifest: ExperimentManifest,
    old: ExperimentManifest | None = None,
    finished: int = 0,
) -> None:
    """experiment.json: when the experiment was first made is kept, and the stopping rules it
    went through (a rule changed by --force is added, with the question it took over at)."""
    if old is not None:  # keep when the experiment was first made
        history = old.stop_history
        if stop_differences(old.stop, manifest.stop):
            history = changed_stop_history(
                old.stop_history, old.stop, old.created_at, manifest.stop, finished
            )
            log.warning("%s: %s", out, stop_change_note(history))
        selections = old.selection_history
        if old.stop is not None and selection_differences(old.selection, manifest.selection):
            selections = changed_selection_history(
                old.selection_history, old.selection, old.created_at, manifest.selection, finished
            )
            log.warning("%s: %s", out, selection_change_note(selections))
        manifest = manifest.model_copy(
            update={
                "created_at": old.created_at,
                "stop_history": history,
                "selection_history": selections,
            }
        )
    with Folder(out) as folder:
        folder.write_text(EXPERIMENT, manifest.model_dump_json(indent=2))


def prepare(
    file: Path,
    data: Path,
    flags: dict[str, Any] | None = None,
    out: Path | None = None,
    stop: dict[str, Any] | None = None,
) -> tuple[dict[str, RunConfig], ExperimentManifest, dict[str, Any]]:
    """What `crawdad experiment FILE --data DATA` runs: each variant's config (the command's
    `flags` applied to all), the experiment's manifest, and each variant's questions (variants of
    two tasks, as MAC's pairs and whole graphs, each get their task's items), in the order drawn
    from the first variant's seed (every variant's, so that their outcomes stay paired); an
    experiment folder `out` made before that order resumes in file order."""
    from crawdad.tasks import load_items, task_named

    spec, sha = load_experiment(file)
    if stop:  # --stop KEY=VALUE over the file's [stop]
        spec = spec.model_copy(update={"stop": {**(spec.stop or {}), **stop}})
        check_stop(spec, "--stop")
    configs = variant_configs(spec, str(file), flags)
    use_input_limit(max(c.input_limits.max_file_mb for c in configs.values()))
    first = next(iter(configs.values()))
    if out is not None:
        selection = selection_for(first.selection, out)
        for cfg in configs.values():
            cfg.selection = selection
    by_task: dict[str, Any] = {}
    for cfg in configs.values():
        if cfg.task not in by_task:
            task = task_named(cfg.task)
            loaded = load_items(task, data, first.selection.questions_file, first.table_limits)
            by_task[cfg.task] = task.select(loaded, first.selection, first.seed)
    dataset = {name: by_task[cfg.task] for name, cfg in configs.items()}
    return configs, experiment_manifest(spec, str(file), sha, list(configs)), dataset
