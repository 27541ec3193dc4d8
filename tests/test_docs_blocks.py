"""Every code block of the documentation runs, or says why it cannot.

Each fenced block in `docs/**/*.md` and `README.md` (and in the docstrings the API reference
renders) is one of:

- run: shell (`bash`, `sh`, `shell`, `console`) blocks in one bash per page, so that a server
  started in one block (`... &`) and a variable exported in one are there for the next; `python`
  blocks in one interpreter per page, sharing their names as a notebook's cells do (with the
  shell's environment and folder at that point); `toml` blocks parsed and validated as crawdad
  validates them (a run config with `crawdad.config.load_config`, an experiment file with the
  experiment loader); `json` blocks parsed. A page's blocks run in page order, in a fresh folder,
  against crawdad's fake servers, with no network.
- not code: `text` (output, diagrams, layouts).
- marked, by an HTML comment on the line before the block (mkdocs shows nothing of it):
  `<!-- skip: WHY -->` (not run: it needs a GPU server, a download, a cluster ...),
  `<!-- xfail: WHY -->` (run, and expected to fail: a known bug, named; it fails the test once it
  passes, so the mark is removed with the fix), `<!-- fragment: WHAT OF -->` on a `toml` block
  that shows some keys of a run config (validated merged into the default config, an
  `[[agents]]` entry into the default agent of its name).

Steps a reader need not see (waiting for a server to start) are written `<!-- test-run: COMMAND
-->` (shell) or `<!-- test-python: CODE -->` (python), and run in their place. A block with
neither a runnable language nor a mark fails `test_every_block_runs_or_says_why`. See
docs/development.md.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import tomllib
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_PAGE = DOCS / "reference" / "api.md"
# Pages a reader follows from top to bottom: each runs as one script (`page_script`).
TUTORIALS = [DOCS / "getting-started.md", *sorted((DOCS / "tutorials").glob("*.md"))]

SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py"}
DATA = {"toml", "json"}
NOT_CODE = {"text"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
MARK = re.compile(
    r"^\s*<!--\s*(?P<kind>test|skip|xfail|fragment)\s*(?::\s*(?P<why>.*?))?\s*-->\s*$"
)
HIDDEN = re.compile(r"^\s*<!--\s*test-(?P<kind>run|python):\s*(?P<code>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced block (or a hidden step) of a page, where it is and how it is marked."""

    where: str  # "docs/tutorials/notebook.md:67"
    lang: str  # "" when the fence names none
    code: str
    mark: str = ""  # "", "test", "skip", "xfail" or "fragment"
    why: str = ""
    hidden: bool = False

    @property
    def kind(self) -> str:
        """'shell', 'python', 'data', 'text', or 'unknown'."""
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        if self.lang in DATA:
            return "data"
        return "text" if self.lang in NOT_CODE else "unknown"

    @property
    def runs(self) -> bool:
        return self.mark != "skip" and self.kind in {"shell", "python", "data"}


def blocks_of(text: str, name: str, first_line: int = 1) -> list[Block]:
    """The page's fenced blocks and hidden steps, in order (fences indented inside tabs and lists
    included, their indent removed)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = FENCE.match(line)
        if opened is None:
            hidden = HIDDEN.match(line)  # a line of its own (not one quoted in the text)
            if hidden is not None:
                lang = "bash" if hidden["kind"] == "run" else "python"
                where = f"{name}:{first_line + i}"
                blocks.append(Block(where, lang, hidden["code"] + "\n", hidden=True))
            i += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        close = re.compile(rf"^[ \t]*{fence[0]}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1 : j]]
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.match(before)
        info = opened["info"].split()
        blocks.append(
            Block(
                where=f"{name}:{first_line + i}",
                lang=info[0].lower().strip("{}.") if info else "",
                code="\n".join(body) + "\n",
                mark=mark["kind"] if mark else "",
                why=(mark["why"] or "") if mark else "",
            )
        )
        i = j + 1
    return blocks


def docstring_blocks() -> list[Block]:
    """The fenced blocks of the docstrings the API reference renders (`::: module.name`)."""
    blocks = []
    for ident in re.findall(r"^::: (\S+)", API_PAGE.read_text(), re.MULTILINE):
        module, _, attr = ident.rpartition(".")
        if ident.startswith(
            "analysis."
        ):  # the docs read `analysis/`, installed as crawdad.analysis
            module, ident = f"crawdad.{module}", f"crawdad.{ident}"
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            obj = importlib.import_module(ident)
        doc = inspect.getdoc(obj)
        if doc:
            blocks += blocks_of(doc, f"docstring of {ident}")
    return blocks


def pages() -> list[Path]:
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]


def name_of(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def page_blocks(page: Path, docstrings: bool = False) -> list[Block]:
    """The page's blocks; with `docstrings`, the API reference's are followed by those of the
    docstrings it renders (this imports the modules: only inside a test)."""
    blocks = blocks_of(page.read_text(), name_of(page))
    return blocks + docstring_blocks() if docstrings and page == API_PAGE else blocks


def problems(block: Block) -> list[str]:
    """Why a block breaks the rule (nothing when it runs, is text, or says why not)."""
    if block.mark in {"skip", "xfail", "fragment"} and not block.why:
        return [f"{block.where}: a `{block.mark}` mark names why: <!-- {block.mark}: WHY -->"]
    if block.mark == "fragment" and block.lang != "toml":
        return [f"{block.where}: `fragment` marks a part of a TOML config, not ```{block.lang}"]
    if block.kind == "unknown" and block.mark != "skip":
        what = f"```{block.lang}" if block.lang else "a block that names no language"
        return [
            f"{block.where}: {what} is neither run nor marked: name its language (one of "
            f"{sorted(SHELL | PYTHON | DATA | NOT_CODE)}; ```text for output) or mark it "
            "<!-- skip: WHY -->"
        ]
    return []


def test_every_block_runs_or_says_why() -> None:
    blocks = [b for p in pages() for b in page_blocks(p, docstrings=True)]
    found = [msg for b in blocks for msg in problems(b)]
    assert not found, "\n".join(found)
    shown = [b for b in blocks if not b.hidden]
    tally = Counter(
        "skip" if b.mark == "skip" else "xfail" if b.mark == "xfail" else b.kind for b in shown
    )
    print("documentation blocks:", dict(tally))
    # the tutorials' commands stay runnable (a tutorial all skipped would pass unnoticed)
    for tutorial in TUTORIALS:
        assert any(b.runs and b.mark != "xfail" for b in page_blocks(tutorial)), tutorial


def test_a_tutorial_hides_no_wait() -> None:
    """A tutorial runs as the reader pastes it: a wait for a server is a step the page shows
    (`crawdad wait-for`), not a hidden comment (a hidden step may check, and runs in the
    script, but never waits); nothing in it fails on purpose."""
    waits = re.compile(r"\bsleep\b|\buntil\b|\bwait\b")
    found = [
        f"{b.where}: {'a hidden wait' if b.hidden else 'an xfail block'} in a tutorial: show it"
        for page in TUTORIALS
        for b in page_blocks(page)
        if (b.hidden and waits.search(b.code)) or b.mark == "xfail"
    ]
    found += [
        f"{name_of(page)}: a tutorial runs as one script, shell or Python, not both"
        for page in TUTORIALS
        if {"shell", "python"} <= {b.kind for b in page_blocks(page) if b.runs}
    ]
    assert not found, "\n".join(found)


def test_the_markers_are_found() -> None:
    """The scanner itself: marks, indented fences, hidden steps."""
    page = textwrap.dedent(
        """\
        <!-- skip: needs a GPU server (vLLM) -->
        ```bash
        vllm serve x
        ```
        === "tab"

            ```python
            print(1)
            ```
        <!-- test-run: echo hidden -->
        quoted in the text, `<!-- test-run: COMMAND -->` is no step
        <!-- fragment: of a run config -->

        ```toml
        seed = 1
        ```
        ```
        plain
        ```
        """
    )
    got = [(b.lang, b.mark, b.why, b.code, b.hidden) for b in blocks_of(page, "p.md")]
    assert got == [
        ("bash", "skip", "needs a GPU server (vLLM)", "vllm serve x\n", False),
        ("python", "", "", "print(1)\n", False),
        ("bash", "", "", "echo hidden\n", True),
        ("toml", "fragment", "of a run config", "seed = 1\n", False),
        ("", "", "", "plain\n", False),
    ]
    assert problems(blocks_of(page, "p.md")[-1])  # a block that names no language


def test_toml_is_checked_as_crawdad_reads_it(tmp_path: Path) -> None:
    from crawdad.errors import ConfigError

    fragment = '[[agents]]\nname = "qwen3"\ntools = ["causal"]\n'
    check_toml(Block("p.md:1", "toml", fragment, "fragment", "an agent"), tmp_path)
    with pytest.raises(ConfigError, match="tool_mode"):
        bad = fragment + 'tool_mode = "sometimes"\n'
        check_toml(Block("p.md:1", "toml", bad, "fragment", "an agent"), tmp_path)
    with pytest.raises(ConfigError, match="at least 2 agents"):  # a whole config: as it stands
        check_toml(Block("p.md:1", "toml", fragment + 'model = "qwen3:32b"\n'), tmp_path)
    with pytest.raises(ConfigError, match="baseline"):
        check_toml(Block("p.md:1", "toml", 'baseline = "x"\n[variants.a]\nseed = 1\n'), tmp_path)


# --- running a page -----------------------------------------------------------------------------

# The page's Python interpreter: reads one JSON line per block (the code's file, the shell's
# environment and folder), runs it in __main__'s namespace (names carry over, as between a
# notebook's cells), prints the traceback of a failure, then `TOKEN STATUS`.
KERNEL = r"""
import json, os, sys, traceback, __main__
token = sys.argv[1]
for line in sys.stdin:
    step = json.loads(line)
    env = dict(e.split("=", 1) for e in open(step["env"]).read().split("\0") if "=" in e)
    os.environ.clear(); os.environ.update(env)
    os.chdir(open(step["cwd"]).read().strip())
    code = "\n" * (step["line"]) + open(step["file"]).read()  # tracebacks give the page's lines
    status = 0
    try:
        exec(compile(code, step["name"], "exec"), __main__.__dict__)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        status = 1
    sys.stdout.flush(); sys.stderr.flush()
    print(token, status, flush=True)
"""


@dataclass
class Outcome:
    ok: bool
    output: str


class PageRunner:
    """Runs a page's blocks in order: one bash, one Python interpreter (started when a Python
    block first needs it), in the page's folder."""

    def __init__(self, folder: Path, scratch: Path) -> None:
        self.folder, self.scratch = folder, scratch
        self.token = f"__docs_step_{uuid.uuid4().hex}__"
        self.env = dict(os.environ)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env['PATH']}"
        self.env.pop("OLLAMA_HOST", None)
        self.env["NO_COLOR"] = "1"
        self.env["MPLBACKEND"] = "Agg"
        self.bash = self._start(["bash"])
        self._send(
            self.bash, "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
        )
        self.python: subprocess.Popen[str] | None = None
        self.count = 0

    def _start(self, argv: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv,
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: every server it starts is stopped
        )

    @staticmethod
    def _send(proc: subprocess.Popen[str], text: str) -> None:
        stdin: IO[str] | None = proc.stdin
        assert stdin is not None
        stdin.write(text)
        stdin.flush()

    def _until_token(self, proc: subprocess.Popen[str]) -> Outcome:
        stdout = proc.stdout
        assert stdout is not None
        out: list[str] = []
        for line in stdout:
            if line.startswith(self.token):
                return Outcome(line.split()[-1] == "0", "".join(out))
            out.append(line)
        return Outcome(False, "".join(out) + f"(exited with {proc.wait()})\n")

    def shell(self, block: Block) -> Outcome:
        code = block.code
        if block.lang == "console":  # the commands are the lines after a `$ ` prompt
            code = "".join(ln[2:] + "\n" for ln in code.splitlines() if ln.startswith("$ "))
        if block.mark == "xfail":  # in a subshell, so that its failure leaves the page's shell
            step = f"( set -euo pipefail\n{code}\n) </dev/null && echo {self.token} 0 || echo {self.token} 1\n"
        else:  # in the page's shell: its exports, folder and background jobs last
            step = f"{{\n{code}\n}} </dev/null\necho {self.token} 0\n"
        self._send(self.bash, step)
        return self._until_token(self.bash)

    def python_block(self, block: Block) -> Outcome:
        self.count += 1
        env, cwd = self.scratch / "env", self.scratch / "cwd"
        self._send(self.bash, f"env -0 > '{env}'; pwd > '{cwd}'; echo {self.token} 0\n")
        self._until_token(self.bash)
        if self.python is None:
            self.python = self._start([sys.executable, "-u", "-c", KERNEL, self.token])
        file = self.scratch / f"block{self.count}.py"
        file.write_text(block.code)
        name, _, line = block.where.rpartition(":")
        first = int(line) if line.isdigit() and not block.hidden else 0
        step = {"file": str(file), "env": str(env), "cwd": str(cwd), "name": name, "line": first}
        self._send(self.python, json.dumps(step) + "\n")
        return self._until_token(self.python)

    def data(self, block: Block) -> Outcome:
        return check_data(block, self.scratch)

    def run(self, block: Block) -> Outcome:
        if block.kind == "shell":
            return self.shell(block)
        if block.kind == "python":
            return self.python_block(block)
        return self.data(block)

    def close(self) -> None:
        for proc in (self.python, self.bash):
            if proc is None:
                continue
            if proc.stdin:
                proc.stdin.close()  # the end of its input: bash runs its EXIT trap
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # whatever it left running (servers: `&`)
            proc.wait()


def check_data(block: Block, scratch: Path) -> Outcome:
    try:
        if block.lang == "json":
            json.loads(block.code)
        else:
            check_toml(block, scratch)
    except Exception as e:
        return Outcome(False, f"{type(e).__name__}: {e}\n")
    return Outcome(True, "")


def _merge_fragment(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    from crawdad.config import deep_merge

    agents = [dict(a) for a in base.get("agents", [])]
    for agent in part.get("agents", []):
        same = [a for a in agents if a.get("name") == agent.get("name")]
        if same:
            same[0].update(deep_merge(same[0], agent))
        else:
            agents.append(agent)
    merged = deep_merge(base, {k: v for k, v in part.items() if k != "agents"})
    merged["agents"] = agents
    return merged


def check_toml(block: Block, scratch: Path) -> None:
    """Parse a TOML block; validate it as crawdad does (a run config, an experiment file, or a
    fragment merged into the default config)."""
    from crawdad.config import RunConfig, load_config
    from crawdad.run.experiment import load_experiment, variant_configs

    data = tomllib.loads(block.code)
    if block.mark == "fragment":
        defaults = {
            "agents": [
                a.model_dump(exclude_defaults=True) for a in RunConfig.model_validate({}).agents
            ]
        }
        load_config(None, overrides=_merge_fragment(defaults, data))
        return
    path = scratch / "block.toml"
    path.write_text(block.code)
    if {"variants", "axes"} & set(data):
        spec, _ = load_experiment(path)
        variant_configs(spec, block.where)
    else:
        load_config(path)


def test_a_page_runs_in_one_shell_and_one_interpreter(tmp_path: Path) -> None:
    page = textwrap.dedent(
        """\
        ```bash
        export GREETING=hello && mkdir sub && cd sub
        ```
        ```python
        import os
        seen = os.environ["GREETING"], os.path.basename(os.getcwd())
        ```
        <!-- xfail: fails on purpose -->
        ```bash
        false
        ```
        ```python
        assert seen == ("hello", "sub"), seen  # names carry over between blocks
        ```
        ```python
        raise ValueError("the page's line")
        ```
        """
    )
    (tmp_path / "page").mkdir()
    runner = PageRunner(tmp_path / "page", tmp_path)
    try:
        outcomes = [runner.run(b) for b in blocks_of(page, "p.md")]
    finally:
        runner.close()
    assert [o.ok for o in outcomes] == [True, True, False, True, False]
    assert 'File "p.md", line 16' in outcomes[-1].output  # tracebacks give the page's lines


def runnable_pages() -> list[Path]:
    """The pages run block by block (a tutorial runs as one script instead)."""
    return [p for p in pages() if p not in TUTORIALS and any(b.runs for b in page_blocks(p))]


def page_script(page: Path) -> tuple[list[str], str]:
    """A tutorial as a reader who pastes it all at once runs it: its runnable shell blocks one
    after another in one `bash` with `set -euo pipefail` (or its Python blocks as one Python
    file), with the hidden checks between them; the command line that runs the script, and
    the script."""
    blocks = [b for b in page_blocks(page) if b.runs and b.kind in {"shell", "python"}]
    python = any(b.kind == "python" for b in blocks)
    parts = []
    for block in blocks:
        code = block.code
        if block.lang == "console":
            code = "".join(ln[2:] + "\n" for ln in code.splitlines() if ln.startswith("$ "))
        parts.append(f"# --- {block.where}\n{code}")
    if python:
        return [sys.executable, "-u", "script"], "".join(parts)
    head = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
    return ["bash", "script"], head + "".join(parts)


def test_a_page_script_is_its_blocks_in_order() -> None:
    argv, script = page_script(DOCS / "tutorials" / "cladder-debates.md")
    assert argv == ["bash", "script"] and script.startswith("set -euo pipefail\n")
    started = script.index("crawdad fake-server --port 11501")
    assert (
        started < script.index("crawdad wait-for 127.0.0.1:11501") < script.index("crawdad doctor")
    )
    assert "seq 100" not in script  # no hidden step: what the page shows, and only that
    argv, script = page_script(DOCS / "tutorials" / "notebook.md")
    assert argv[0] == sys.executable and "crawdad.load_frames" in script


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", TUTORIALS, ids=name_of)
def test_a_tutorial_runs_as_one_script(page: Path, tmp_path: Path) -> None:
    """The page's blocks pasted into one script, run with `set -e` on crawdad's fakes: each
    command must be ready for the next with no pause a reader would add (a server started with
    `&` is waited for by a step the page shows). Its TOML blocks are checked as crawdad reads
    them."""
    for block in page_blocks(page):
        if block.runs and block.kind == "data":
            outcome = check_data(block, tmp_path)
            assert outcome.ok, f"{block.where}: the documented {block.lang} block\n{outcome.output}"
    argv, script = page_script(page)
    folder = tmp_path / "page"
    folder.mkdir()
    (folder / "script").write_text(script)
    env = dict(os.environ, NO_COLOR="1", MPLBACKEND="Agg")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.pop("OLLAMA_HOST", None)
    proc = subprocess.Popen(
        argv,
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: every server it starts is stopped
    )
    try:
        output, _ = proc.communicate(timeout=540)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    assert proc.returncode == 0, (
        f"{name_of(page)} run as one script failed ({proc.returncode})\n--- its output\n"
        f"{output[-8000:]}"
    )
    assert "Traceback" not in output, output[-8000:]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", runnable_pages(), ids=name_of)
def test_a_pages_blocks_run(page: Path, tmp_path: Path) -> None:
    folder, scratch = tmp_path / "page", tmp_path / "scratch"
    folder.mkdir()
    scratch.mkdir()
    runner = PageRunner(folder, scratch)
    expected: list[str] = []
    try:
        for block in page_blocks(page, docstrings=True):
            if not block.runs:
                continue
            outcome = runner.run(block)
            if block.mark == "xfail":
                assert not outcome.ok, (
                    f"{block.where} passes now: remove its mark <!-- xfail: {block.why} -->"
                )
                said = [ln for ln in outcome.output.strip().splitlines() if ln.strip()][-1:]
                expected.append(f"{block.where} ({block.why}): {' '.join(said)[:300]}")
                print(f"--- {block.where}, failing as expected:\n{outcome.output[-3000:]}")
                continue
            assert outcome.ok, (
                f"{block.where}: the documented {block.lang} block failed\n"
                f"--- the block\n{block.code}--- its output\n{outcome.output[-6000:]}"
            )
            assert "Traceback" not in outcome.output, f"{block.where}\n{outcome.output[-6000:]}"
    finally:
        runner.close()
    if expected:
        pytest.xfail("expected failures: " + "; ".join(expected))
