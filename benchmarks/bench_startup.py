"""Start-up: the CPU seconds (user + system, of the child process) that short commands cost,
which every resume with nothing left, every `show` and every test that starts the CLI pays.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 5]

Measures `crawdad --help`, `crawdad run` on a folder whose every debate is finished (against a
fake Ollama server started here: the run still checks its servers), `crawdad show` and
`crawdad configs`, each `--repeat` times in a fresh process; prints the median and the range.
Goal (issue 30): a run with nothing to do under 1.5 s of CPU on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import header

from crawdad.data.demo_questions import EXAMPLES
from crawdad.data.questions import load_cladder
from crawdad.demo import answer_key
from crawdad.fake import FakeServer, paper_models

CRAWDAD = [sys.executable, "-m", "crawdad"]


def cpu_of(args: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU seconds of one child process running `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, cwd=cwd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    header("start-up: CPU seconds of short commands", args)
    key = answer_key(load_cladder(EXAMPLES).questions)
    with tempfile.TemporaryDirectory() as tmp, FakeServer("ollama", paper_models(key)) as server:
        cwd = Path(tmp)
        env = {**os.environ, "OLLAMA_HOST": server.url.removeprefix("http://")}
        run = [*CRAWDAD, "run", "--data", str(EXAMPLES), "--limit", "6", "--out", "done"]
        subprocess.run([*run, "--no-progress"], env=env, cwd=cwd, check=True, capture_output=True)
        commands = {
            "crawdad --help": [*CRAWDAD, "--help"],
            "crawdad run (nothing to do)": [*run, "--no-progress"],
            "crawdad show done 0": [*CRAWDAD, "show", "done", "0"],
            "crawdad configs": [*CRAWDAD, "configs"],
        }
        print(f"{'command':<30} {'median s':>9} {'min':>6} {'max':>6}")
        for name, command in commands.items():
            seconds = [cpu_of(command, env, cwd) for _ in range(args.repeat)]
            print(
                f"{name:<30} {statistics.median(seconds):>9.2f} {min(seconds):>6.2f}"
                f" {max(seconds):>6.2f}"
            )


if __name__ == "__main__":
    main()
