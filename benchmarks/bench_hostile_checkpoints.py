"""What a hostile checkpoint, manifest or answer costs crawdad: time and peak memory per class
(issue 51). Each case runs in a child process of its own (its peak: the child's maxrss, minus
the same child doing nothing), on the code of this checkout or of another one (`--code DIR`, a
checkout's root: `git archive main | tar -x -C /tmp/old` gives the code before the bounds).

Cases, each at a size that shows the cost without taking the machine:

- many_dims: a safetensors header holding one shape of N dimensions (was quadratic: every
  multiplication a bigger number);
- big_config: a config.json of MB megabytes (sparse: zeros) (was read whole);
- gguf_long_string: a GGUF whose chat template is a string of MB megabytes (was read whole);
- gguf_strings: a GGUF tokenizer of N strings (each read and dropped, as before; now capped);
- big_header: a valid safetensors header of N tensors (parsed, as before; now capped at 32 MB);
- version_flood: `vllm --version` printing MB megabytes, then waiting (was kept whole);
- show_flood: Ollama's /api/show answering MB megabytes (was read whole);
- restarts: servers/restarts.jsonl of MB megabytes (was read whole).

    .venv/bin/python benchmarks/bench_hostile_checkpoints.py [--code DIR] [--cases a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SETUP = """
import json, os, resource, struct, sys, threading, time
from pathlib import Path
tmp = Path(sys.argv[1])
if code := os.environ.get("BENCH_CODE"):  # that checkout's crawdad, not the installed one
    import importlib.util
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, code)
    import crawdad
    spec = importlib.util.spec_from_file_location(
        "crawdad.analysis", f"{code}/analysis/__init__.py",
        submodule_search_locations=[f"{code}/analysis"])
    sys.modules["crawdad.analysis"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert crawdad.__file__.startswith(code), crawdad.__file__
def sparse(path, size, head=b""):
    path.write_bytes(head)
    os.truncate(path, size)
def hf(folder, config=b'{"num_hidden_layers": 4, "num_attention_heads": 8}'):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(config)
    return folder
def st(folder, header, data=0):
    raw = json.dumps(header).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + data)
def gstr(b):
    return struct.pack("<Q", len(b)) + b
def gguf(path, pairs, size=0):
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + b"".join(pairs))
    if size:
        os.truncate(path, size)
GOOD = [gstr(b"general.architecture") + struct.pack("<I", 8) + gstr(b"llama"),
        gstr(b"llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 30)]
"""

CASES = {
    "many_dims": (
        """
        folder = hf(tmp / "m")
        st(folder, {"w": {"dtype": "F16", "shape": [2] * N, "data_offsets": [0, 2]}})
        """,
        """
        from crawdad.serving import sizes
        sizes.hf_footprint(folder)
        """,
    ),
    "big_config": (
        """
        folder = tmp / "m"
        folder.mkdir()
        sparse(folder / "config.json", MB * 1_000_000, b'{"a": "')
        """,
        """
        from crawdad.serving import sizes
        sizes.hf_footprint(folder)
        """,
    ),
    "gguf_long_string": (
        """
        path = tmp / "m.gguf"
        template = gstr(b"tokenizer.chat_template") + struct.pack("<I", 8)
        head = b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + b"".join(GOOD) + template
        sparse(path, len(head) + 8 + MB * 1_000_000, head + struct.pack("<Q", MB * 1_000_000))
        """,
        """
        from crawdad.serving import sizes
        sizes.gguf_footprint(path)
        """,
    ),
    "gguf_strings": (
        """
        path = tmp / "m.gguf"
        tokens = b"".join(gstr(b"tok%d" % i) for i in range(N))
        array = gstr(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, N) + tokens
        gguf(path, [*GOOD, array])
        """,
        """
        from crawdad.serving import sizes
        sizes.gguf_footprint(path)
        """,
    ),
    "big_header": (
        """
        folder = hf(tmp / "m")
        header = {f"model.layers.{i}.w": {"dtype": "F16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i in range(N)}
        st(folder, header, 2 * N)
        del header
        """,
        """
        from crawdad.serving import sizes
        sizes.hf_footprint(folder)
        """,
    ),
    "version_flood": (
        """
        vllm = tmp / "vllm"
        vllm.write_text(f"#!/bin/sh\\nhead -c {MB * 1_000_000} /dev/zero | tr '\\\\0' v\\nsleep 5\\n")
        vllm.chmod(0o755)
        """,
        """
        from crawdad.serving.engines import _common
        _common.PROBE_TIMEOUT = 4.0
        _common.version_output(str(vllm))
        """,
    ),
    "show_flood": (
        """
        PREPARE
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", str(MB * 1_000_000))
                self.end_headers()
                try:
                    for _ in range(MB * 16):
                        self.wfile.write(b"[" + b" " * 62_498 + b"]")
                except OSError:
                    pass
        class S(ThreadingHTTPServer):
            daemon_threads = True
            def handle_error(self, *a): pass
        server = S(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        """,
        """
        try:
            from crawdad.serving.ollama_sizes import _api_show
        except ImportError:  # before the bounds: in sizes.py
            from crawdad.serving.sizes import _api_show
        _api_show(url, "x:1b")
        """,
    ),
    "restarts": (
        """
        (tmp / "servers").mkdir()
        line = b'{"key": "m", "at": "2026-01-01T00:00:00Z", "reason": "exited", "downtime": 2.0}\\n'
        (tmp / "servers" / "restarts.jsonl").write_bytes(line * (MB * 1_000_000 // len(line)))
        """,
        """
        import warnings
        warnings.simplefilter("ignore")
        from crawdad.analysis.metrics.servers import started_servers
        from crawdad.records import StartedServer
        s = StartedServer(key="m", engine="vllm", command=["v"], weights="w", served_name="m",
                          models=["agents.0"], base_url="http://x")
        started_servers(tmp, [s])
        """,
    ),
}
# Imports a case's action makes that are no part of its cost (made before the clock starts,
# and in its baseline).
WARM = {"restarts": "import crawdad.analysis.metrics.servers, crawdad.records\n"}
SIZES = {"N": 200_000, "MB": 200}
SIZES_BY_CASE = {
    "many_dims": {"N": 300_000},
    "big_header": {"N": 150_000},
    "gguf_strings": {"N": 1_000_000},
    "gguf_long_string": {"MB": 90},  # the old reader refused more than 100 MB
}


def script(case: str, part: str) -> str:
    """The child's program: `files` writes the case's files (a child of its own, so that
    their making weighs nothing in the measured one), `action` reads them, timed."""
    idle, _, case = case.rpartition(":")
    setup, action = CASES[case]
    if idle:
        setup, action = "", "pass\n"
    sizes = {**SIZES, **SIZES_BY_CASE.get(case, {})}
    head = SETUP + "".join(f"{k} = {v}\n" for k, v in sizes.items())
    setup = textwrap.dedent(setup).lstrip("\n")
    in_action = setup.startswith("PREPARE")
    if part == "files":
        return head + ("" if in_action else setup)
    return (
        head
        + (setup.removeprefix("PREPARE\n") if in_action else _names(case))
        + "import crawdad.serving.sizes, crawdad.serving.engines._common\n"
        + WARM.get(case, "")
        + "start = time.perf_counter()\n"
        + "try:\n"
        + textwrap.indent(textwrap.dedent(action), "    ")
        + "    outcome = 'done'\n"
        + "except Exception as e:\n"
        + "    outcome = type(e).__name__ + ': ' + str(e)[:90]\n"
        + "seconds = time.perf_counter() - start\n"
        + "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3\n"
        + "print(json.dumps({'seconds': seconds, 'peak_mb': peak, 'outcome': outcome}))\n"
    )


def _names(case: str) -> str:
    """The paths the action reads (the files' child made them)."""
    return 'folder = tmp / "m"\npath = tmp / "m.gguf"\nvllm = tmp / "vllm"\n'


def run(case: str, code: Path) -> dict[str, object]:
    """The case's seconds and the peak memory its action added (to the same child that only
    imports what it does)."""
    found = _run(case, code)
    base = _run(f"idle:{case}", code)
    return {**found, "peak_mb": float(found["peak_mb"]) - float(base["peak_mb"])}  # type: ignore[arg-type]


def _run(case: str, code: Path) -> dict[str, object]:
    env = {**os.environ, "BENCH_CODE": str(code.resolve())}
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("files", "action"):
            done = subprocess.run(
                [sys.executable, "-c", script(case, part), tmp],
                capture_output=True, text=True, env=env, timeout=600, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                return {"seconds": float("nan"), "peak_mb": float("nan"),
                        "outcome": done.stderr.strip().splitlines()[-1][:200]}  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print(f"code: {args.code}")
    print(f"{'case':18} {'seconds':>8} {'+MB':>6}  outcome")
    for case in args.cases.split(","):
        found = run(case, args.code)
        print(
            f"{case:18} {found['seconds']:8.2f} {found['peak_mb']:6.0f}  "
            f"{str(found['outcome'])[:110]}"
        )


if __name__ == "__main__":
    main()
