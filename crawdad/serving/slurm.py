"""`crawdad serve --slurm`: a SLURM batch script from a plan. It pins each server to its GPUs,
starts the servers on every allocated node (each in its own process group), waits for each to
answer within a time limit, runs the driver beside them with CRAWDAD_SERVED_URLS pointing its
served models at them, and stops every server when the driver ends, fails or the job is
cancelled. Run without SLURM (`bash job.sh`), it serves on this machine alone."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable

from crawdad.serving.base import Plan, ServerPlan
from crawdad.serving.engines import engine

STOP_GRACE = 30  # seconds between a server's SIGTERM and its SIGKILL
PULL_TIMEOUT = 3600  # seconds for `ollama pull` of one tag
POLL = 2  # seconds between health checks


def slurm_script(
    plan: Plan,
    driver: str,
    *,
    source: str,
    job_name: str = "crawdad",
    nodes: int = 1,
    time: str = "24:00:00",
    startup_timeout: float = 1200.0,
    sbatch: Iterable[str] = (),
) -> str:
    """The batch script: `driver` (a shell command line, such as `crawdad run ...`) runs on the
    first node once every server of every node answers."""
    servers = [_bound(s) for s in plan.servers] if nodes > 1 else list(plan.servers)
    gpus = len(plan.gpus)
    head = [
        "#!/usr/bin/env bash",
        "# shellcheck disable=SC2317  # the functions below run from traps and from srun",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gres=gpu:{gpus}"] if gpus else []),
        f"#SBATCH --time={time}",
        f"#SBATCH --output={job_name}-%j.out",
        *(f"#SBATCH {line.strip()}" for line in sbatch if line.strip()),
        "#",
        f"# Written by `crawdad serve --slurm {source}` from this plan (each node alike):",
        *(f"#   {line}" for line in describe(plan)),
        "# Each server runs pinned to its GPUs in its own process group. The driver starts once",
        "# every server answers (at most STARTUP_TIMEOUT seconds), and every server is stopped",
        "# when the driver ends, fails, or the job is cancelled.",
        "set -euo pipefail",
        "",
        f'STARTUP_TIMEOUT="${{CRAWDAD_STARTUP_TIMEOUT:-{int(startup_timeout)}}}"'
        "  # seconds for all servers to answer",
        f"STOP_GRACE={STOP_GRACE}  # seconds between a server's SIGTERM and its SIGKILL",
        'LOGS="${CRAWDAD_SERVER_LOGS:-$PWD/servers-${SLURM_JOB_ID:-local}}"',
        "export LOGS STOP_GRACE",
        'mkdir -p "$LOGS"',
        "command -v curl > /dev/null || { echo 'crawdad: curl is needed to wait for the servers'"
        " >&2; exit 1; }",
        "",
    ]
    return "\n".join(
        [
            *head,
            *_serve_here(servers, gpus),
            "",
            *_start(nodes),
            "",
            *_wait(servers),
            "",
            *_served_urls(servers),
            "",
            f"echo {shlex.quote('crawdad: every server is up; running the driver')}",
            "set +e",
            driver.strip(),
            "status=$?",
            "set -e",
            'echo "crawdad: the driver ended (exit $status); stopping the servers"',
            'exit "$status"',
            "",
        ]
    )


def describe(plan: Plan) -> list[str]:
    """One line per server: where, how much memory, which port."""
    lines = []
    for s in plan.servers:
        where = f"GPU {','.join(map(str, s.gpus))}" if s.gpus else "CPU"
        share = f"{s.memory_fraction:.3f} of each GPU, " if s.memory_fraction else ""
        lines.append(
            f"{s.key}: {', '.join(s.tags or [s.served_name])} on {where}, {share}"
            f"{s.memory_gib:.1f} GiB, port {s.port}"
        )
    return lines


def _bound(server: ServerPlan) -> ServerPlan:
    """The server listening on every interface: the driver reaches it from another node."""
    moved = server.model_copy(update={"host": "0.0.0.0"})
    env = dict(server.env)
    if "OLLAMA_HOST" in env:
        env["OLLAMA_HOST"] = f"0.0.0.0:{server.port}"
    command = engine(server.engine, server.executable).command(moved)
    return moved.model_copy(update={"command": command, "env": env})


def _serve_here(servers: list[ServerPlan], gpus: int) -> list[str]:
    default = ",".join(str(i) for i in range(max(gpus, 1)))
    lines = [
        "serve_here() {",
        "  # This node's servers. SLURM sets CUDA_VISIBLE_DEVICES to the job's GPUs on the node;",
        "  # the plan's GPU i is the i-th of them.",
        *(
            [
                "  local gpus=() pids=() logs",
                f'  IFS=, read -r -a gpus <<< "${{CUDA_VISIBLE_DEVICES:-{default}}}"',
            ]
            if any(s.gpus for s in servers)
            else ["  local pids=() logs"]
        ),
        '  logs="$LOGS/$(hostname -s)"',
        '  mkdir -p "$logs"',
        "  stop_here() {",
        "    local pid deadline=$((SECONDS + STOP_GRACE))",
        '    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2> /dev/null || true; done',
        '    for pid in "${pids[@]}"; do',
        '      while kill -0 -- "-$pid" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do',
        "        sleep 1",
        "      done",
        '      kill -KILL -- "-$pid" 2> /dev/null || true',
        "    done",
        "  }",
        "  trap 'stop_here; exit 0' TERM INT",
    ]
    for server in servers:
        env = [
            f"{k}={shlex.quote(v)}" for k, v in server.env.items() if k != "CUDA_VISIBLE_DEVICES"
        ]
        if server.gpus:
            pinned = ",".join(f"${{gpus[{i}]}}" for i in server.gpus)
            env.insert(0, f'CUDA_VISIBLE_DEVICES="{pinned}"')
        lines += [
            f"  # {describe(Plan(servers=[server]))[0]}",
            "  " + " ".join([*env, "setsid", shlex.join(server.command), "\\"]),
            f'    > "$logs/{server.key}.log" 2>&1 &',
            '  pids+=("$!")',
            f'  echo "$!" > "$logs/{server.key}.pid"',
        ]
    lines += ["  wait", "  stop_here", "}"]
    return lines


def _start(nodes: int) -> list[str]:
    if nodes > 1:
        start = [
            'mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            "# One task per node serves there; the driver runs here, on the first node.",
            'srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\',
            '  bash -c "set -euo pipefail; $(declare -f serve_here); serve_here" &',
        ]
    else:
        start = ["HOSTS=(127.0.0.1)", "serve_here &"]
    return [
        *start,
        "SERVING=$!",
        "stop_servers() {",
        "  trap - EXIT",
        "  local deadline=$((SECONDS + STOP_GRACE + 10)) file",
        '  kill -TERM "$SERVING" 2> /dev/null || true',
        '  while kill -0 "$SERVING" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 1; done',
        '  kill -KILL "$SERVING" 2> /dev/null || true',
        "  # Whatever is left on this node: each server's whole process group.",
        '  for file in "$LOGS/$(hostname -s)"/*.pid; do',
        '    if [ -f "$file" ]; then kill -KILL -- "-$(cat "$file")" 2> /dev/null || true; fi',
        "  done",
        "}",
        "trap stop_servers EXIT",
        "trap 'exit 143' TERM",
        "trap 'exit 130' INT",
    ]


def _wait(servers: list[ServerPlan]) -> list[str]:
    lines = [
        "DEADLINE=$((SECONDS + STARTUP_TIMEOUT))",
        "wait_up() {  # wait_up KEY HOST URL: until URL answers, the server exits, or the deadline",
        "  local here log",
        '  here="$LOGS/$(hostname -s)"',
        '  log="$LOGS/*/$1.log"',
        '  until curl -fsS -o /dev/null --max-time 10 "$3" 2> /dev/null; do',
        "    # A server of this node that exited (the others: their deadline) ends the wait.",
        '    if [ -f "$here/$1.pid" ] && ! kill -0 -- "-$(cat "$here/$1.pid")" 2> /dev/null \\',
        '      || ! kill -0 "$SERVING" 2> /dev/null; then',
        '      echo "crawdad: $1 on $2 exited before it answered $3; the end of its log:" >&2',
        '      tail -n 20 "$here/$1.log" >&2 || true',
        "      exit 1",
        "    fi",
        '    if [ "$SECONDS" -ge "$DEADLINE" ]; then',
        '      echo "crawdad: $1 on $2 did not answer $3 within $STARTUP_TIMEOUT s ($log)" >&2',
        "      exit 1",
        "    fi",
        f"    sleep {POLL}",
        "  done",
        '  echo "crawdad: $1 on $2 is up ($3)"',
        "}",
        'for host in "${HOSTS[@]}"; do',
    ]
    for server in servers:
        url = f"http://$host:{server.port}{server.health_path}"
        lines.append(f'  wait_up {server.key} "$host" "{url}"')
        exe = shlex.quote(server.command[0])
        for tag in server.tags:  # Ollama: pull what the node does not have yet
            lines.append(
                f'  OLLAMA_HOST="$host:{server.port}" timeout {PULL_TIMEOUT} {exe} pull '
                f"{shlex.quote(tag)}"
            )
    lines.append("done")
    return lines


def _served_urls(servers: list[ServerPlan]) -> list[str]:
    """CRAWDAD_SERVED_URLS: each served model name -> every node's servers of it."""
    ports: dict[str, list[tuple[int, str]]] = {}
    for server in servers:
        suffix = "" if server.engine == "ollama" else "/v1"
        for name in server.tags or [server.served_name]:
            ports.setdefault(name, []).append((server.port, suffix))
    lines = [
        "json_urls() {  # json_urls SUFFIX PORT...: every node's URL on each port, a JSON list",
        '  local suffix=$1 host port out=""',
        "  shift",
        '  for host in "${HOSTS[@]}"; do',
        '    for port in "$@"; do out+="${out:+, }\\"http://$host:$port$suffix\\""; done',
        "  done",
        "  printf '[%s]' \"$out\"",
        "}",
    ]
    formats, args = [], []
    for name, where in ports.items():
        formats.append(json.dumps(name).replace("%", "%%") + ": %s")
        suffix = where[0][1]
        args.append(f'"$(json_urls "{suffix}" {" ".join(str(p) for p, _ in where)})"')
    fmt = shlex.quote("{" + ", ".join(formats) + "}")
    lines += [
        "# The driver's served models point at these servers instead of starting their own.",
        f"CRAWDAD_SERVED_URLS=$(printf {fmt} {' '.join(args)})",
        "export CRAWDAD_SERVED_URLS",
    ]
    return lines
