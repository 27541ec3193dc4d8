"""Take the README's screenshots of `crawdad view` with headless Chromium.

    .venv/bin/crawdad demo --out /tmp/shots/demo
    .venv/bin/crawdad demo --config configs/protocols/judge.toml --out /tmp/shots/judge
    .venv/bin/python docs/screenshots.py /tmp/shots/demo /tmp/shots/judge

Writes docs/assets/viewer-table.png, viewer-debate.png and viewer-outcomes.png, and
live-view-1280.png and live-view-800.png: the live view at 1280 and 800 pixels wide, of a
synthetic experiment of two variants still being written (its folders locked as a run locks
them) with an hour of a vLLM server's metrics, or with `--live FOLDER` of an experiment being
written now. The docs' shots are of a stopping experiment on the fakes (docs/how-to/view.md):

    crawdad fake-server --kind openai --port 11611 --latency 1 --capacity 8 -c exp.toml \
        --accuracy paper:32b=0.6 --accuracy stronger:32b=0.9 &
    crawdad fake-server --port 11612 --latency 1 -c exp.toml --accuracy same:32b=0.6 &
    OLLAMA_HOST=127.0.0.1:11612 crawdad experiment exp.toml --data examples --out runs/stop &
    sleep 50; .venv/bin/python docs/screenshots.py --live runs/stop

where exp.toml is the stopping tutorial's, with `concurrency = 4`, `server_metrics = 1`, and
the variants paper and stronger served by the first (`backend = "openai"`, `base_urls`).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from crawdad.analysis.synthetic_runs import synthetic_records, write_synthetic_run
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from crawdad.records import ExperimentManifest
from crawdad.view import Server, Viewer

DOCS = Path(__file__).parent / "assets"


def main(runs: list[Path], live: Path | None = None) -> None:
    os.environ["SE_OFFLINE"] = "true"
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,760"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        if runs:  # the demo's folders (none given: the live view's shot alone)
            server = Server(Viewer.open(runs), 0)
            url = server.start()
            try:
                driver.get(server.token_url)  # the session's cookie: the pages below need it
                driver.get(url + "?consensus=no&sort=length&dir=desc")
                driver.save_screenshot(DOCS / "viewer-table.png")
                driver.get(url + "?run=demo&rung=3&consensus=no&sort=length&dir=desc")
                driver.find_element(By.CSS_SELECTOR, "table.debates tbody a.qid").click()
                driver.find_element(By.CSS_SELECTOR, "details.thinking summary").click()
                driver.save_screenshot(DOCS / "viewer-debate.png")
                driver.get(url + "outcomes")
                driver.save_screenshot(DOCS / "viewer-outcomes.png")
            finally:
                server.stop()
        if live is not None:
            live_view(driver, live)
            return
        with tempfile.TemporaryDirectory() as tmp:
            locks = _experiment(Path(tmp) / "experiment")
            try:
                live_view(driver, Path(tmp) / "experiment")
            finally:
                for lock in locks:
                    lock.close()
    finally:
        driver.quit()


def _experiment(folder: Path) -> list[IO[str]]:
    """Two variants of 2,000 questions, 1,240 and 610 done, finishing up to now; an hour of
    a vLLM server's samples every 10 s. Returns the locks held (a run holds its folder's)."""
    now = time.time()
    variants = {"baseline": 1240, "judge": 610}
    manifest = ExperimentManifest(
        crawdad_version="0.1.0",
        created_at=datetime.now(UTC),
        file="experiment.toml",
        file_sha256="0" * 64,
        baseline="baseline",
        variants={v: {} for v in variants},
    )
    folder.mkdir(parents=True)
    (folder / "experiment.json").write_text(manifest.model_dump_json())
    locks = []
    for k, (name, done) in enumerate(variants.items()):
        run = write_synthetic_run(folder / name, 2000, seed=k, trace_chars=(50, 100))
        step = 3600 / done * (2 if k else 1)  # the second started half an hour ago
        with (run / "debates.jsonl").open("w") as f:
            for i, rec in enumerate(synthetic_records(done, seed=k, trace_chars=(50, 100))):
                end = datetime.fromtimestamp(now - step * (done - 1 - i), UTC)
                stamps = {"finished_at": end, "started_at": end - timedelta(seconds=rec.seconds)}
                f.write(rec.model_copy(update=stamps).model_dump_json() + "\n")
        lock = (run / ".lock").open("a")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        locks.append(lock)
    with (folder / "servers.jsonl").open("w") as f:
        f.write(json.dumps({"session": now - 3600, "every": 10}) + "\n")
        gen = tokens = 0.0
        for i in range(361):
            at = now - 3600 + 10 * i
            busy = 0.5 + 0.5 * math.sin(i / 40)  # load that comes and goes
            running = round(40 + 24 * busy)
            waiting = max(0, round(30 * (busy - 0.6)))
            gen += 10 * (1400 + 900 * busy)
            tokens += 10 * (1380 + 880 * busy)
            fig = {
                "kind": "vllm",
                "source": "GET /metrics",
                "running": running,
                "waiting": waiting,
                "kv_cache": min(0.99, 0.35 + 0.6 * busy),
                "generation_tokens": round(gen),
                "in_flight": running + waiting,
                "tokens": round(tokens),
            }
            line = {"at": at, "t": 10 * i, "servers": {"http://gpu-1:8000/v1": fig}}
            f.write(json.dumps(line) + "\n")
    return locks


def live_view(driver: webdriver.Chrome, folder: Path) -> None:
    """The live page at 1280 and 800 pixels wide, down to its servers (PNGs of 256 colours,
    under 200 KB each)."""
    from PIL import Image

    server = Server(Viewer.open([folder]), 0)
    url = server.start()
    try:
        driver.get(server.token_url)
        for width, height in ((1280, 1500), (800, 1800)):
            driver.set_window_size(width, height)
            driver.get(url + "live")
            WebDriverWait(driver, 30).until(
                lambda d: "updated" in d.find_element(By.ID, "live-state").text
            )
            WebDriverWait(driver, 20).until(
                expected_conditions.presence_of_element_located(
                    (By.CSS_SELECTOR, ".server-card svg")
                )
            )
            shot = DOCS / f"live-view-{width}.png"
            driver.save_screenshot(shot)
            image = Image.open(shot).convert("RGB")
            image.quantize(
                colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
            ).save(shot, optimize=True)
    finally:
        server.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--live"]:
        main([], Path(args[1]))
    else:
        main([Path(a) for a in args])
