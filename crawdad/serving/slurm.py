"""`crawdad serve --slurm`: a SLURM batch script from a plan. The script itself only sets up:
it writes the plan as data (`job.json`, a quoted here-document of one JSON line) into the job's
folder, starts `crawdad serve --node` on every node (one `srun` task each; without SLURM, on this
machine), waits for every node's servers (`crawdad serve --await`), and runs the driver beside
them with their URLs and keys (`keys.json`). crawdad's own supervisor starts, keeps (restarts)
and stops each node's servers, on ports reserved on the node when the job runs, each start with
a key of its own.
A node whose crawdad or servers end ends the job with a message, at once (`wait -n`).

Nothing from a config becomes code: every value that reaches the script is quoted
(`shlex.quote`), comments included, and the plan travels as JSON. The only shell written by the
user is the `--driver` line and the `--setup` lines, both shown in the script's header.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable

from crawdad.config import ServingConfig
from crawdad.errors import CrawdadError
from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.node import (
    AWAIT_MARGIN,
    JOB_FILE,
    KEYS_FILE,
    JobSpec,
    keyless,
)

STOP_GRACE = 30  # seconds between the node's SIGTERM and its SIGKILL
CRAWDAD_CPUS = 2  # crawdad and the driver
CRAWDAD_MEM_GIB = 8
HEREDOC = "CRAWDAD_JOB_JSON"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TIME = re.compile(r"^[0-9]+(-[0-9]+)?(:[0-9]+){0,2}$")


def comment(text: str) -> str:
    """A comment line that stays one: control characters (a newline would start a command)
    shown as '?'."""
    return "# " + _CONTROL.sub("?", text)


def cpus_for(server: ServerPlan) -> int:
    """A GPU server: 2, and 2 per GPU (tokenizer, scheduler, one worker per GPU); a CPU server
    computes on them: 8."""
    return 2 + 2 * len(server.gpus) if server.gpus else 8


def mem_gib_for(server: ServerPlan) -> int:
    """Host memory: what the server holds on all its GPUs (the weights pass through host memory
    as they load), or on the CPU all it holds; a quarter more, at least 4 GiB."""
    held = server.memory_gib * max(1, len(server.gpus))
    return max(4, math.ceil(held * 1.25))


def requests(plan: Plan) -> tuple[int, int]:
    """(--cpus-per-task, --mem in GiB) of one node: each server's share and crawdad's."""
    cpus = CRAWDAD_CPUS + sum(cpus_for(s) for s in plan.servers)
    mem = CRAWDAD_MEM_GIB + sum(mem_gib_for(s) for s in plan.servers)
    return cpus, mem


def _plain(text: str, what: str) -> str:
    if _CONTROL.search(text):
        raise CrawdadError(f"{what} {text!r} holds a newline or control character: one line")
    return text


def _job_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:64] or "crawdad"


def _sbatch_lines(plan: Plan, job_name: str, nodes: int, time: str, sbatch: list[str]) -> list[str]:
    if not _TIME.match(time):
        raise CrawdadError(f"--time {time!r}: use SLURM's form, such as 24:00:00 or 2-00:00:00")
    given = [_plain(line.strip(), "--sbatch") for line in sbatch if line.strip()]
    options = {re.split(r"[= ]", line, maxsplit=1)[0] for line in given}
    cpus, mem = requests(plan)
    gpus = len(plan.gpus)
    name = _job_name(job_name)
    return [
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gres=gpu:{gpus}"] if gpus else []),
        *([] if options & {"--cpus-per-task", "-c"} else [f"#SBATCH --cpus-per-task={cpus}"]),
        *([] if any(o.startswith("--mem") for o in options) else [f"#SBATCH --mem={mem}G"]),
        f"#SBATCH --time={time}",
        f"#SBATCH --output={name}-%j.out",
        *(f"#SBATCH {line}" for line in given),
    ]


def slurm_script(
    plan: Plan,
    driver: str,
    *,
    source: str,
    serving: ServingConfig | None = None,
    job_name: str = "crawdad",
    nodes: int = 1,
    time: str = "24:00:00",
    sbatch: Iterable[str] = (),
    setup: Iterable[str] = (),
) -> str:
    """The batch script: `driver` (a shell command line, such as `crawdad run ...`) runs on the
    first node once every server of every node answers. `setup` (shell lines, such as
    `source ~/venvs/crawdad/bin/activate`) runs first, as written."""
    serving = serving or ServingConfig()
    if nodes > 1 and (bare := [s.key for s in plan.servers if keyless(s)]):
        raise CrawdadError(
            f"servers {', '.join(bare)} take no API key (Ollama), so on several nodes anyone "
            "on the network could use them: serve them on one node (--nodes 1), or with vLLM, "
            "SGLang or llama.cpp"
        )
    setup = [_plain(line, "--setup") for line in setup if line.strip()]
    spec = JobSpec(
        plan=plan, serving=serving, nodes=nodes, bind="node" if nodes > 1 else "loopback"
    )
    data = json.dumps(spec.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))
    assert "\n" not in data and data != HEREDOC
    cpus, mem = requests(plan)
    head = [
        "#!/usr/bin/env bash",
        *_sbatch_lines(plan, job_name, nodes, time, list(sbatch)),
        "# shellcheck disable=SC2016,SC2317  # lines quoted for later; functions run from traps",
        "#",
        comment(f"Written by `crawdad serve --slurm {shlex.quote(source)}` from this plan (every"),
        "# node alike; each node chooses its ports when the job starts):",
        *(comment(f"  {line}") for line in describe(plan)),
        comment(
            f"Requests: {cpus} CPUs ({CRAWDAD_CPUS} for crawdad, 2 + 2 per GPU for each GPU "
            "server, 8 for a CPU one)"
        ),
        comment(
            f"and {mem} GiB ({CRAWDAD_MEM_GIB} for crawdad, 1.25 x what each server holds); "
            "--sbatch lines win."
        ),
        "# crawdad's supervisor runs each node's servers (`crawdad serve --node`): it restarts",
        "# one that dies, and a node whose servers cannot be kept ends the job.",
        "# Environment setup (--setup; shell, run as written):",
        *(comment(f"  {line}") for line in setup or ["(none: crawdad must be on PATH)"]),
        "# Driver (--driver; shell, run as written once every server answers):",
        *(comment(f"  {line}") for line in driver.strip().splitlines()),
        "set -euo pipefail",
        "",
    ]
    body = [
        *setup,
        "command -v crawdad > /dev/null || {",
        "  echo 'crawdad: crawdad is not on PATH here: give `crawdad serve --slurm` a --setup"
        " line that activates its environment' >&2",
        "  exit 1",
        "}",
        'JOB="${CRAWDAD_JOB_DIR:-$PWD/crawdad-job-${SLURM_JOB_ID:-$$}}"',
        'mkdir -p "$JOB"',
        'chmod 700 "$JOB"',
        "# A job run again in the same folder: its nodes' earlier records are not this run's.",
        'rm -f -- "$JOB"/nodes/*.json "$JOB"/nodes/*.failed',
        f'CRAWDAD_STARTUP_TIMEOUT="${{CRAWDAD_STARTUP_TIMEOUT:-'
        f'{int(serving.startup_timeout) + AWAIT_MARGIN}}}"',
        "# Weights come from `crawdad serve --fetch`, run before the job where the internet is:",
        "# a compute node does not download (export HF_HUB_OFFLINE=0 before sbatch to let it).",
        'export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"',
        "export JOB CRAWDAD_STARTUP_TIMEOUT",
        f"cat > \"$JOB/{JOB_FILE}\" <<'{HEREDOC}'",
        data,
        HEREDOC,
        "",
        *_start(),
        "",
        "# In the background: a trap (scancel's SIGTERM) runs during `wait`, not during $(...).",
        'crawdad serve --await "$JOB" --watch "$SERVING" > "$JOB/urls.json" &',
        "AWAITING=$!",
        'wait "$AWAITING"',
        'CRAWDAD_SERVED_URLS=$(cat "$JOB/urls.json")',
        f'CRAWDAD_SERVED_KEYS="$JOB/{KEYS_FILE}"',
        "export CRAWDAD_SERVED_URLS CRAWDAD_SERVED_KEYS",
        "echo 'crawdad: every server is up; running the driver'",
        f"DRIVER_LINE={shlex.quote(driver.strip())}",
        'setsid bash -c "$DRIVER_LINE" &',
        "DRIVER=$!",
        "set +e",
        "wait -n",
        "status=$?",
        "set -e",
        'if kill -0 "$DRIVER" 2> /dev/null; then',
        '  echo "crawdad: the servers ended (exit $status) while the driver ran: see $JOB/nodes;'
        ' stopping the job" >&2',
        "  status=1",
        "else",
        '  echo "crawdad: the driver ended (exit $status); stopping the servers"',
        "fi",
        'exit "$status"',
        "",
    ]
    return "\n".join([*head, *body])


def describe(plan: Plan) -> list[str]:
    """One line per server: where, how much memory (its port is chosen when the job starts)."""
    lines = []
    for s in plan.servers:
        where = f"GPU {','.join(map(str, s.gpus))}" if s.gpus else "CPU"
        share = f"{s.memory_fraction:.3f} of each GPU, " if s.memory_fraction else ""
        names = ", ".join(shlex.quote(n) for n in s.tags or [s.served_name])
        lines.append(
            f"{s.key}: {names} ({s.engine}, {shlex.quote(s.weights)}) on {where}, {share}"
            f"{s.memory_gib:.1f} GiB"
        )
    return lines


def _start() -> list[str]:
    srun = 'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1'
    return [
        "# One crawdad per node serves the plan there; the driver runs here, on the first node.",
        'if [ -n "${SLURM_JOB_ID:-}" ]; then',
        f'  {srun} crawdad serve --node "$JOB" &',
        "else",
        '  crawdad serve --node "$JOB" &',
        "fi",
        "SERVING=$!",
        "DRIVER=",
        "AWAITING=",
        "stop_all() {",
        "  trap - EXIT",
        f"  local deadline=$((SECONDS + {STOP_GRACE}))",
        '  if [ -n "$AWAITING" ]; then kill -TERM "$AWAITING" 2> /dev/null || true; fi',
        '  if [ -n "$DRIVER" ]; then kill -TERM -- "-$DRIVER" 2> /dev/null || true; fi',
        '  kill -TERM "$SERVING" 2> /dev/null || true',
        '  while kill -0 "$SERVING" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done',
        '  kill -KILL "$SERVING" 2> /dev/null || true',
        '  if [ -n "$DRIVER" ]; then kill -KILL -- "-$DRIVER" 2> /dev/null || true; fi',
        "}",
        "trap stop_all EXIT",
        "trap 'exit 143' TERM",
        "trap 'exit 130' INT",
    ]
