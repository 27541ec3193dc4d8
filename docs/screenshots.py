"""Take the README's screenshots of `crawdad view` with headless Chromium.

    .venv/bin/crawdad demo --out /tmp/shots/demo
    .venv/bin/crawdad demo --config configs/protocols/judge.toml --out /tmp/shots/judge
    .venv/bin/python docs/screenshots.py /tmp/shots/demo /tmp/shots/judge

Writes docs/assets/viewer-table.png, viewer-debate.png and viewer-outcomes.png.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from crawdad.view import Server, Viewer

DOCS = Path(__file__).parent / "assets"


def main(runs: list[Path]) -> None:
    os.environ["SE_OFFLINE"] = "true"
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,760"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
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
        driver.quit()
        server.stop()


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])
