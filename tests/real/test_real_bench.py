"""`crawdad bench` against REAL llama.cpp servers: the load generator's counts against the
server's own, and the whole command through the CLI.

- llama-cpp-python's server (the suite's `llamacpp`): its access log counts the requests
  exactly. Its per-request timings count decode runs, which are the generated tokens give or
  take one (a prompt already cached costs one run more; the last token of an answer cut at
  max_tokens is never decoded), so the tokens are checked to within one per request.
- llama-server, the C++ server the GPU benchmark builds (benchmarks/gpu/run.sh): its /metrics
  count every generated token (`llamacpp:tokens_predicted_total`) and its log prints the
  timings of each request it finishes. It is not part of `.ci/real_servers.sh`; the test runs
  when one is found ($CRAWDAD_LLAMA_SERVER, or $CRAWDAD_REAL_SERVERS_DIR/llama-server/llama-server)
  and is skipped, saying how to build one, when not.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

from crawdad.bench import run_bench
from crawdad.config import load_config
from crawdad.data.questions import load_cladder

from .realrun import crawdad, write_config, write_data
from .servers import RealServer, cache_dir, free_port, gguf_model, log_dir

pytestmark = pytest.mark.real

MAX_TOKENS = 24


def _log_since(server: RealServer, offset: int) -> str:
    return server.log_path.read_bytes()[offset:].decode("utf-8", "replace")


def _bench_config(server: RealServer, tmp_path: Path) -> Path:
    agents = [("smol-a", server), ("smol-b", server)]
    return write_config(
        tmp_path / "bench.toml",
        agents=agents,
        extractor=server,
        max_tokens=MAX_TOKENS,
        extractor_max_tokens=48,
        concurrency=2,
        timeout=120.0,
    )


def _ceiling(server: RealServer, tmp_path: Path, parallel: list[int]):  # type: ignore[no-untyped-def]
    config = load_config(_bench_config(server, tmp_path))
    data = load_cladder(write_data(tmp_path / "data", 6))
    return asyncio.run(
        run_bench(
            config,
            data,
            tmp_path / "bench",
            parallel=parallel,
            concurrencies=[],
            seconds=2.0,
            progress=False,
        )
    )


def test_bench_counts_match_llamacpp_python(llamacpp: RealServer, tmp_path: Path) -> None:
    offset = llamacpp.log_path.stat().st_size
    result = _ceiling(llamacpp, tmp_path, [1, 2])
    log = _log_since(llamacpp, offset)
    posts = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', log))
    runs = [
        int(n)
        for n in re.findall(r"^llama_perf_context_print:\s+eval time =.*?/\s+(\d+) runs", log, re.M)
    ]
    sent = sum(r.sent for r in result.ceiling)
    tokens = sum(r.tokens for r in result.ceiling)
    detail = f"{[(r.parallel, r.sent, r.tokens, r.errors) for r in result.ceiling]}\n{log[-3000:]}"
    assert sent == posts == len(runs) and sent >= 2, detail
    assert all(r.failed == 0 and r.answered == r.sent for r in result.ceiling), detail
    assert abs(sum(runs) - tokens) <= sent and tokens > 0, detail
    for r in result.ceiling:
        assert r.window.tokens_per_second > 0 and r.window.in_flight <= r.parallel + 1e-9


def test_bench_cli_end_to_end(llamacpp: RealServer, tmp_path: Path) -> None:
    config = _bench_config(llamacpp, tmp_path)
    data = write_data(tmp_path / "data", 8)
    out = tmp_path / "bench"
    result = crawdad(
        "bench", "--data", str(data), "--config", str(config), "--parallel", "1,2",
        "--concurrency", "2", "--seconds", "3", "--out", str(out), "--no-progress",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.describe()
    bench = json.loads((out / "bench.json").read_text())
    run = bench["crawdad"][0]
    assert run["tokens"] > 0 and run["answered"] > 0 and run["cpu_ms_per_token"] > 0
    assert all(c["tokens"] > 0 and c["failed"] == 0 for c in bench["ceiling"])
    assert bench["advice"]["fraction"] is not None
    assert "Verdict: " in result.stdout and "Use concurrency = " in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "bench.toml", "data"]


# --- llama-server (C++), when one was built --------------------------------------------------------


def llama_server_binary() -> Path | None:
    given = os.environ.get("CRAWDAD_LLAMA_SERVER")
    path = Path(given) if given else cache_dir() / "llama-server" / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _metric(origin: str, name: str) -> float:
    with urllib.request.urlopen(f"{origin}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    match = re.search(rf"^llamacpp:{name} ([0-9.e+]+)$", text, re.M)
    assert match, f"no llamacpp:{name} in /metrics:\n{text[:2000]}"
    return float(match.group(1))


def test_bench_counts_match_llama_server_metrics(tmp_path: Path) -> None:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip(
            "no llama-server binary: build one with `bash benchmarks/gpu/run.sh --cpu` (see "
            "benchmarks/gpu/README.md) and copy the files of WORK/src/build/bin/ to "
            "$CRAWDAD_REAL_SERVERS_DIR/llama-server/, or set CRAWDAD_LLAMA_SERVER"
        )
    port = free_port()
    argv = [
        str(binary), "-m", str(gguf_model()), "-a", "smollm2-135m-gguf", "--host", "127.0.0.1",
        "--port", str(port), "-np", "2", "-c", "4096", "--metrics", "--no-webui", "-ngl", "0",
    ]  # fmt: skip
    server = RealServer(
        "llamacpp", argv, model="smollm2-135m-gguf", port=port,
        log_path=log_dir() / f"llama-server-bench-{port}.log", startup_timeout=120,
    )  # fmt: skip
    with server:
        before = _metric(server.origin, "tokens_predicted_total")
        offset = server.log_path.stat().st_size
        result = _ceiling(server, tmp_path, [1, 2])
        after = _metric(server.origin, "tokens_predicted_total")
        log = _log_since(server, offset)
    finished = re.findall(r"\|\s+eval time =\s+[0-9.]+ ms /\s+(\d+) tokens", log)
    sent = sum(r.sent for r in result.ceiling)
    tokens = sum(r.tokens for r in result.ceiling)
    detail = f"{[(r.parallel, r.sent, r.tokens) for r in result.ceiling]}\n{log[-3000:]}"
    assert sent == len(finished) and sent >= 2, detail
    assert tokens == after - before == sum(int(n) for n in finished) and tokens > 0, detail
