"""crawdad view in a real headless browser: the system's Chromium, driven by selenium through the
system's chromedriver (nothing is downloaded; .ci/run installs both from Debian's packages)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run

from crawdad.records import DebateRecord
from crawdad.view import Server, Viewer
from crawdad.view.index import outcome_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="no Chromium: install it with `apt-get install -y chromium chromium-driver` "
    "(.ci/run does) to drive the viewer in a headless browser",
)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def make_driver() -> webdriver.Chrome:
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM or ""
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,900",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER or ""))


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver = make_driver()
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture
def site(tmp_path: Path, browser: webdriver.Chrome) -> Iterator[tuple[str, Path]]:
    """The viewer over a run, opened once by its tokened URL (as `crawdad view` prints it): the
    browser keeps the session's cookie, so `url` and its links work from there on."""
    run = write_synthetic_run(tmp_path / "run", 200, trace_chars=(200, 400), error_rate=0.02)
    server = Server(Viewer.open([run]), 0)
    url = server.start()
    browser.get(server.token_url)
    assert browser.current_url == url  # the token left the address for the cookie
    yield url, run
    server.stop()


def records(run: Path) -> dict[str, DebateRecord]:
    out = {}
    for line in (run / "debates.jsonl").read_bytes().splitlines():
        rec = DebateRecord.model_validate_json(line)
        out[str(rec.question_id)] = rec
    return out


def shown_count(driver: webdriver.Chrome) -> int:
    return int(driver.find_element(By.ID, "matched").text.replace(",", ""))


def choose(driver: webdriver.Chrome, name: str, value: str) -> None:
    """Pick a filter value the way a user does; the page reloads with the filter applied."""
    old = driver.find_element(By.ID, "count")
    Select(driver.find_element(By.NAME, name)).select_by_value(value)
    WebDriverWait(driver, 10).until(expected_conditions.staleness_of(old))


def test_filters_give_the_counts_of_the_records(browser: webdriver.Chrome, site) -> None:
    url, run = site
    recs = records(run)
    browser.get(url)
    assert shown_count(browser) == len(recs)
    choose(browser, "rung", "2")
    assert shown_count(browser) == sum(r.rung == 2 for r in recs.values())
    choose(browser, "outcome", "I->C")

    def first_answer(r: DebateRecord) -> str | None:
        return next((t.answer for t in r.turns if t.round == 0), None)

    want = [
        r
        for r in recs.values()
        if r.rung == 2 and outcome_of(first_answer(r), r.final_answer, r.gold, not r.ok) == "I->C"
    ]
    assert shown_count(browser) == len(want) > 0
    assert "rung=2" in browser.current_url and "outcome=I-%3EC" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "table.debates tbody a.qid")
    assert sorted(a.text for a in rows) == sorted(str(r.question_id) for r in want)


def test_a_debate_opens_and_its_trace_unfolds(browser: webdriver.Chrome, site) -> None:
    url, run = site
    rec = next(r for r in records(run).values() if len(r.turns) >= 3)
    browser.get(url)
    browser.find_element(By.LINK_TEXT, str(rec.question_id)).click()
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith(f"Question {rec.question_id}")
    texts = browser.find_elements(By.CSS_SELECTOR, "article.turn .text")
    assert [t.text for t in texts] == [t.text.strip() for t in rec.turns]
    trace = browser.find_element(By.CSS_SELECTOR, "details.thinking pre")
    assert not trace.is_displayed()
    browser.find_element(By.CSS_SELECTOR, "details.thinking summary").click()
    assert trace.is_displayed()
    assert trace.text == rec.turns[0].thinking.strip()


def test_a_run_being_written_shows_new_debates_on_reload(browser: webdriver.Chrome, site) -> None:
    url, run = site
    browser.get(url)
    before = shown_count(browser)
    new = list(synthetic_records(3, seed=7, ids=[9001, 9002, 9003], trace_chars=(20, 40)))
    with (run / "debates.jsonl").open("a") as f:
        for rec in new:
            f.write(rec.model_dump_json() + "\n")
        f.write(new[0].model_dump_json()[:50])  # a line still being written
    browser.refresh()
    assert shown_count(browser) == before + 3
    browser.get(url + "?sort=order&dir=desc")
    first = browser.find_element(By.CSS_SELECTOR, "table.debates tbody a.qid").text
    assert first == "9003"


def test_without_the_token_the_viewer_says_what_to_open(tmp_path: Path, browser) -> None:
    run = write_synthetic_run(tmp_path / "run", 5, trace_chars=(20, 40))
    server = Server(Viewer.open([run]), 0)
    url = server.start()
    try:
        browser.get(url)
        assert "open the URL that `crawdad view` printed" in browser.page_source
    finally:
        server.stop()


def test_scripts_styles_and_posts_of_its_own_work_under_its_policy(
    browser: webdriver.Chrome, site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CSP lets the viewer's own script (the filters above), its nonced bar widths and its own
    form post through; the report itself is faked (drawing the figures takes seconds)."""
    import crawdad.analysis.report

    def fake_report(run_dirs: list[Path], out: Path, **options: object) -> Path:
        out.mkdir(exist_ok=True)
        (out / "report.md").write_text("# A written report\n\n| a |\n|:--|\n| 1 |\n")
        return out / "report.md"

    monkeypatch.setattr(crawdad.analysis.report, "write_report", fake_report)
    url, _ = site
    browser.get(url + "outcomes")
    segs = browser.find_elements(By.CSS_SELECTOR, "a.seg")
    widths = [s.size["width"] for s in segs[:6]]
    assert segs and all(w > 0 for w in widths) and len(set(widths)) > 1
    browser.get(url + "report")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(browser, 20).until(
        lambda d: d.find_elements(By.XPATH, "//h1[text()='A written report']")
    )
    assert browser.current_url == url + "report#source-0"


def test_the_live_view_follows_a_growing_run_without_a_reload(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    """The live page redraws from /live.json as debates.jsonl and servers.jsonl grow: its
    progress text changes and the servers' charts appear, in the same page (no navigation)."""
    run = write_synthetic_run(tmp_path / "run", 30, trace_chars=(10, 20), error_rate=0)
    lines = (run / "debates.jsonl").read_bytes().splitlines(keepends=True)
    (run / "debates.jsonl").write_bytes(b"".join(lines[:10]))
    server = Server(Viewer.open([run]), 0)
    url = server.start()
    try:
        browser.get(server.token_url)
        browser.get(url + "live")
        progress = (By.CSS_SELECTOR, "#live-runs .progress")
        WebDriverWait(browser, 20).until(
            expected_conditions.text_to_be_present_in_element(progress, "10 / 30")
        )
        browser.execute_script("window.notReloaded = true;")
        at = 1_800_000_000.0
        fig = {"kind": "vllm", "source": "GET /metrics", "running": 12, "waiting": 3}
        with (run / "servers.jsonl").open("w") as f:
            for i in range(3):
                f.write(json.dumps({"at": at + 5 * i, "servers": {"http://gpu:8000/v1": fig}}))
                f.write("\n")
        with (run / "debates.jsonl").open("ab") as f:
            f.write(b"".join(lines[10:25]))
        WebDriverWait(browser, 20).until(
            expected_conditions.text_to_be_present_in_element(progress, "25 / 30")
        )
        WebDriverWait(browser, 20).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".server-card svg"))
        )
        card = browser.find_element(By.CSS_SELECTOR, ".server-card").text
        assert "vLLM at http://gpu:8000/v1" in card and "requests running" in card
        assert browser.execute_script("return window.notReloaded === true;")
        newest = browser.find_element(By.CSS_SELECTOR, "#live-newest a.qid")
        assert newest.text == "24" and newest.get_attribute("href").endswith(
            "/debate?run=run&id=24"
        )
    finally:
        server.stop()


def _servers_file(folder: Path, at: float) -> None:
    """A vLLM server generating about 11,400 tokens/s, and an Ollama server (only /api/ps)."""
    ollama = {
        "kind": "ollama",
        "source": "GET /api/ps",
        "models": {"same:32b": {"size_vram": 19851349856, "context_length": 40960}},
        "in_flight": 8,
        "responses": 0,
        "tokens": 0,
    }
    with (folder / "servers.jsonl").open("w") as f:
        for i in range(6):
            vllm = {
                "kind": "vllm",
                "source": "GET /metrics",
                "running": 40,
                "waiting": 2,
                "kv_cache": 0.5,
                "generation_tokens": 57_055 * i,
                "in_flight": 42,
                "responses": 0,
                "tokens": 50_000 * i,
            }
            ollama["tokens"] = 9_000 * i
            servers = {"http://gpu:8000/v1": vllm, "http://127.0.0.1:11434": ollama}
            f.write(json.dumps({"at": at + 5 * i, "servers": servers}) + "\n")


CLIPPED_TEXT = """
const out = [];
for (const svg of document.querySelectorAll("svg.spark")) {
  const w = svg.width.baseVal.value, h = svg.height.baseVal.value;
  for (const t of svg.querySelectorAll("text")) {
    const b = t.getBBox();
    if (b.x < 0 || b.y < 0 || b.x + b.width > w + 0.5 || b.y + b.height > h + 0.5) out.push(t.textContent);
  }
}
return out;
"""


def test_the_live_view_labels_its_charts_and_follows_its_runs(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    """Issue 46's live view: signed band ends, margin lines apart from 0, no axis label cut at
    the chart's edge, the header's chips following each poll (a decided variant says so), an
    Ollama card saying which figures Ollama does not give, every time of day in UTC."""
    import fcntl
    import re

    from test_viewer_live import stop_experiment

    from crawdad.run.store import LOCK

    rights = {"base": lambda i: i % 2 == 0, "good": lambda i: True, "same": lambda i: i % 2 == 0}
    exp = stop_experiment(
        tmp_path / "exp", rights, 300, {"alpha": 0.05, "margin": 0.03, "min_questions": 10}
    )
    _servers_file(exp, 1_800_000_000.0)
    held = []
    for name in rights:  # a crawdad process writes every variant
        lock = (exp / name / LOCK).open("a")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        held.append(lock)
    same = exp / "same" / "debates.jsonl"
    lines = same.read_bytes().splitlines(keepends=True)
    same.write_bytes(b"".join(lines[:200]))
    server = Server(Viewer.open([exp]), 0)
    url = server.start()
    try:
        for width in (1280, 800):
            browser.set_window_size(width, 900)
            browser.get(server.token_url)
            browser.get(url + "live")
            WebDriverWait(browser, 20).until(
                lambda d: "updated" in d.find_element(By.ID, "live-state").text
            )
            state = browser.find_element(By.ID, "live-state").text
            assert re.fullmatch(r"running, updated \d\d:\d\d:\d\d UTC", state), state
            WebDriverWait(browser, 20).until(
                expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "svg.band"))
            )
            assert browser.execute_script(CLIPPED_TEXT) == []
            texts = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.band text")]
            assert "+100 pts" in texts and "-100 pts" in texts
            assert "+3.0" in texts and "-3.0" in texts  # the margin, labelled
            ends = [
                t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.band text.band-end")
            ]
            assert ends and all(re.fullmatch(r"[+-]\d+\.\d|0\.0", e) for e in ends), ends
            # the margin lines stand apart from 0 (the chart's scale is linear within ±margin)
            gaps = browser.execute_script("""
              const out = [];
              for (const svg of document.querySelectorAll("svg.band")) {
                const zero = svg.querySelector(".zero-line").getBBox().y;
                for (const m of svg.querySelectorAll(".margin-line")) out.push(Math.abs(m.getBBox().y - zero));
              }
              return out;""")
            assert gaps and min(gaps) >= 10, gaps
            # the chips: counts and states of now, a decided variant says so
            chip = browser.find_element(By.CSS_SELECTOR, '.run-chip[data-run="good"]')
            assert chip.find_element(By.CSS_SELECTOR, ".chip-state").text == "decided: better"
            base = browser.find_element(By.CSS_SELECTOR, '.run-chip[data-run="base"] .chip-state')
            assert base.text == "writing"
            # the Ollama card says what Ollama does not give, and shows what it does
            cards = {
                c.find_element(By.TAG_NAME, "h3").text: c
                for c in browser.find_elements(By.CSS_SELECTOR, ".server-card")
            }
            ollama = cards["Ollama at http://127.0.0.1:11434"]
            assert "GET /api/ps lists only the models loaded" in ollama.text
            assert "requests waiting" not in [
                g.text for g in ollama.find_elements(By.CSS_SELECTOR, ".gauge > div")
            ]
            assert "same:32b" in ollama.text and "18.5 GiB" in ollama.text
            vllm = cards["vLLM at http://gpu:8000/v1"]
            assert "15k" in [t.text for t in vllm.find_elements(By.CSS_SELECTOR, "svg text")]
            for cell in browser.find_elements(By.CSS_SELECTOR, "#live-newest tr td:first-child"):
                assert re.fullmatch(r"\d\d:\d\d:\d\d", cell.text), cell.text
        chip = browser.find_element(By.CSS_SELECTOR, '.run-chip[data-run="same"] .chip-count')
        assert chip.text == "200"
        with same.open("ab") as f:
            f.write(b"".join(lines[200:260]))
        WebDriverWait(browser, 20).until(lambda d: chip.text == "260")
    finally:
        server.stop()
        for lock in held:
            lock.close()
        browser.set_window_size(1400, 900)


ODD_IDS = [
    "a/b",
    "a#b",
    "a?b=c&d",
    "sp ace",
    "ünïcødé ✓",
    ".hidden",
    ".",
    "..",
    "",
    "%2F",
    "a+b",
    "../..",
    "x\\y",
    "tab\there",
    "<b>",
]


def _odd_run(folder: Path, seed: int) -> Path:
    """A run whose question ids are ODD_IDS (each a string a record may carry)."""
    write_synthetic_run(folder, len(ODD_IDS), seed=seed, trace_chars=(10, 20), error_rate=0)
    lines = (folder / "debates.jsonl").read_text().splitlines()
    out = []
    for qid, raw in zip(ODD_IDS, lines, strict=True):
        d = json.loads(raw)
        d["question_id"] = qid
        out.append(json.dumps(d) + "\n")
    (folder / "debates.jsonl").write_text("".join(out))
    return folder


def test_every_link_the_viewer_draws_to_a_debate_opens_it(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    """Issue 46: ids with `/`, `#`, `?`, spaces, Unicode, leading dots (and `.`, `..`, empty) in
    runs whose names hold `#` and `?`: every link of the table, of a debate page (the same
    question in the other run, previous, next, plain text) and of the live page opens its debate."""
    runs = [_odd_run(tmp_path / "run #1", 1), _odd_run(tmp_path / "run ?2 ü", 2)]
    server = Server(Viewer.open(runs), 0)
    url = server.start()
    seen: set[tuple[str, str]] = set()

    def hrefs(css: str) -> list[str]:
        return [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, css)]

    def opens(href: str) -> None:
        browser.get(href)
        h1 = browser.find_element(By.TAG_NAME, "h1").text
        run = browser.find_element(By.CSS_SELECTOR, "table.compact b").text
        assert h1.endswith(f" in {run}")
        shown = " ".join(h1.removesuffix(f" in {run}").split()[1:])  # the text after "Question"
        qid = next(q for q in ODD_IDS if " ".join(q.split()) == shown)
        seen.add((run, qid))

    browser.implicitly_wait(0)  # a link a page lacks is looked for without waiting
    try:
        browser.get(server.token_url)
        table = hrefs("table.debates tbody a.qid")
        assert len(table) == 2 * len(ODD_IDS)
        for href in table:
            opens(href)
        assert seen == {(r.name, q) for r in runs for q in ODD_IDS}
        browser.get(table[0])
        others = hrefs("a.variant") + hrefs("a[rel=prev]") + hrefs("a[rel=next]")
        assert len(others) >= 2
        for href in others:
            opens(href)
        for href in table[:: len(ODD_IDS) // 5]:
            browser.get(href)
            h1 = browser.find_element(By.TAG_NAME, "h1").text
            browser.get(hrefs("nav.crumbs a")[-1])  # as plain text
            text = browser.find_element(By.TAG_NAME, "body").text
            assert text.startswith(h1.rsplit(" in ", 1)[0].rstrip() + " ")
        browser.get(url + "live")
        WebDriverWait(browser, 20).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#live-newest a.qid"))
        )
        for href in hrefs("#live-newest a.qid"):
            opens(href)
    finally:
        browser.implicitly_wait(5)
        server.stop()
