"""A stand-in inference engine: a program that serves crawdad's fake OpenAI-compatible server
the way `vllm serve` would, so that the supervisor's tests start, kill and restart a real child
process in seconds.

    python -m crawdad.fake.standin [serve WEIGHTS] --port N [--host H] [--served-model-name M]

Other flags (vLLM's `--max-model-len`, ...) are accepted and ignored. An API key, as vLLM takes
it (`--api-key`, else the variable `VLLM_API_KEY`), guards `/v1/*` as vLLM's does: a missing or
wrong key is 401 `{"error": "Unauthorized"}`; `/health`, `/version` and `/metrics` stay open. It serves the paper's
three fake models and every `--served-model-name` (a name with "granite" or "extract" in it is
played by the fake extractor, any other by a Qwen3-like debater).

Faults, by the environment (`CRAWDAD_STANDIN_FAULT`), counted in generation requests, never in
seconds, so that a test's outcome does not depend on timing:

- `fail-start:oom|weights|unsupported|port` prints the engine's own error for that cause to
  stderr and exits 1 before listening; `fail-start:hang` never listens (a start that times out);
- `die-after:N` is SIGKILLed by itself when the N-th generation request arrives;
- `freeze-after:N` stops itself (SIGSTOP) at the N-th: it neither answers nor exits, as a
  server whose GPU hangs;
- `slow-health:SECONDS` answers /health that late (llama-cpp-python's while it generates) and
  streams its tokens at a pace (10 ms each), so that requests show it works meanwhile;
- `slow-start:SECONDS` loads for that long before it listens, printing vLLM's lines as it goes
  (coloured, and a progress bar's carriage returns): a start a user waits for. With
  `CRAWDAD_STANDIN_GATE=FILE` it listens as soon as FILE exists, so that a test waits for an
  event, not for the seconds.

With `CRAWDAD_STANDIN_ONCE=FILE`, the fault fires only while FILE does not exist, and the
stand-in creates FILE as it fires: the restarted server then serves normally.

Its process tree, by `CRAWDAD_STANDIN_WORKERS` (comma-separated, started before it listens, so
that they all run once it answers; crawdad/fake/standin_workers.py):

- `vllm`: an EngineCore child, which starts a worker of its own in a new session (setsid);
- `daemon`: a child that daemonizes (double fork, setsid; its parent exits).

The log line `stand-in: workers ready PID ROLE, ...` names them. With
`CRAWDAD_STANDIN_FLOOD=MB` it writes that many MiB of numbered lines to stdout as fast as it
can before it listens, then `stand-in: flood done` (a server whose log floods).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawdad.fake.server import FakeServer

FAULT_ENV = "CRAWDAD_STANDIN_FAULT"
ONCE_ENV = "CRAWDAD_STANDIN_ONCE"
GATE_ENV = "CRAWDAD_STANDIN_GATE"
LOADING = "Loading safetensors checkpoint shards"  # vLLM's line while it loads weights
WORKERS_ENV = "CRAWDAD_STANDIN_WORKERS"
FLOOD_ENV = "CRAWDAD_STANDIN_FLOOD"

# What the real engines print for each cause (the supervisor's tests match these lines).
START_ERRORS = {
    "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.19 GiB of which 1.06 GiB is free.",
    "weights": "OSError: stand-in/missing is not a local folder and is not a valid model "
    "identifier listed on 'https://huggingface.co/models'",
    "unsupported": "ValueError: Model architectures ['FancyForCausalLM'] are not supported for "
    "now.",
    "port": "OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
    "address already in use",
}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="standin", allow_abbrev=False)
    parser.add_argument("serve", nargs="?")
    parser.add_argument("weights", nargs="?")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--served-model-name", action="append", default=[])
    parser.add_argument("--api-key", default=None)
    args, _ = parser.parse_known_args(argv)
    return args


def _models(names: list[str]) -> dict[str, Any]:
    from crawdad.fake.answer_key import AnswerKey
    from crawdad.fake.extractor import FakeExtractor
    from crawdad.fake.profile import ProfileModel
    from crawdad.fake.setups import paper_models

    key = AnswerKey()
    models: dict[str, Any] = paper_models(key)
    for name in names:
        if name not in models:
            extractor = "granite" in name or "extract" in name
            models[name] = FakeExtractor() if extractor else ProfileModel(key, "qwen3")
    return models


def _fault() -> tuple[str, str]:
    """(kind, argument) of the fault to play, ("", "") for none (or one that already fired)."""
    text = os.environ.get(FAULT_ENV, "")
    once = os.environ.get(ONCE_ENV)
    if not text or (once and Path(once).exists()):
        return "", ""
    kind, _, arg = text.partition(":")
    return kind, arg


def _fired() -> None:
    if once := os.environ.get(ONCE_ENV):
        Path(once).touch()


def _arm(server: FakeServer, kind: str, after: int) -> None:
    """Wrap the engine's generation so that the `after`-th request kills or freezes us."""
    generate = server.engine.generate
    count = 0
    lock = threading.Lock()

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        with lock:
            count += 1
            hit = count == after
        if hit:
            _fired()
            print(f"stand-in: {kind} at generation request {after}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL if kind == "die-after" else signal.SIGSTOP)
        return await generate(*args, **kwargs)

    server.engine.generate = counted  # type: ignore[method-assign]


def _load_slowly(seconds: float) -> bool:
    """Print vLLM's loading lines for `seconds` (or until the gate file exists); False when
    SIGTERM or SIGINT came meanwhile (they are blocked: taken here by sigtimedwait)."""
    import time

    gate = os.environ.get(GATE_ENV)
    print("\x1b[32mINFO\x1b[0m Starting to load model stand-in...", flush=True)
    began = time.monotonic()
    step = 0
    while time.monotonic() - began < seconds and not (gate and Path(gate).exists()):
        step += 1
        sys.stderr.write(f"\r{LOADING}: {step} steps | {time.monotonic() - began:.1f} s")
        sys.stderr.flush()
        if signal.sigtimedwait({signal.SIGTERM, signal.SIGINT}, 0.1) is not None:
            return False
    print(file=sys.stderr, flush=True)
    return True


def _workers() -> None:
    from crawdad.fake.standin_workers import start

    kinds = {k.strip() for k in os.environ.get(WORKERS_ENV, "").split(",") if k.strip()}
    lines = (start("engine-core") if "vllm" in kinds else []) + (
        start("daemon") if "daemon" in kinds else []
    )
    if lines:
        said = ", ".join(line.removeprefix("ready ") for line in lines)
        print(f"stand-in: workers ready {said}", flush=True)


def _flood() -> None:
    mib = float(os.environ.get(FLOOD_ENV) or 0)
    line = b"x" * 90
    block = b"".join(b"stand-in flood %08d %s\n" % (i, line) for i in range(8192))
    written, out = 0, sys.stdout.buffer
    while written < mib * (1 << 20):
        out.write(block)
        written += len(block)
    out.write(b"stand-in: flood done\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    kind, arg = _fault()
    # Blocked in every thread, and taken by sigwait: SIGTERM and SIGINT end it cleanly.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    print(f"stand-in engine: serving {args.weights or '-'} on {args.host}:{args.port}", flush=True)
    if kind == "fail-start":
        _fired()
        if arg == "hang":
            signal.sigwait({signal.SIGTERM, signal.SIGINT})
            return 0
        print(START_ERRORS.get(arg, f"stand-in: failing as told ({arg})"), file=sys.stderr)
        return 1
    if kind == "slow-start" and not _load_slowly(float(arg)):
        return 0
    # Imported only now: a start that fails says so at once, as an engine that checks first.
    from crawdad.fake.latency import LatencyModel
    from crawdad.fake.server import FakeServer

    slow_health = float(arg) if kind == "slow-health" else 0.0
    _workers()
    _flood()
    server = FakeServer(
        "openai",
        _models(args.served_model_name),
        latency=LatencyModel(capacity=64, per_token_seconds=0.01 if slow_health else 0.0),
        host=args.host,
        port=args.port,
        health_delay=slow_health,
        api_key=args.api_key or os.environ.get("VLLM_API_KEY") or None,
    )
    if slow_health:
        _fired()
    if kind in ("die-after", "freeze-after"):
        _arm(server, kind, int(arg))
    server.start()
    print(f"INFO:     Uvicorn running on http://{args.host}:{server.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
