"""Retake docs/report-demo.png, README's picture: the report page of `make demo`'s group session, opened in headless
Chromium at 1280×900, the top of the page. Run it after a change to the page (`make screenshot`): the picture shows
what a newcomer's `make demo` draws, with no path of this machine in it (the page names the database relatively).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_KEY = "onebot11:tokyo-ob11:group:856301447"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def main() -> int:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="zhin-demo-") as top:
        demo = Path(top) / "demo"
        (demo / ".zhin").mkdir(parents=True)
        shutil.copyfile(ROOT / "tests/data/upstream-db/data.sqlite", demo / ".zhin/data.sqlite")
        subprocess.run([sys.executable, "-m", "zhin_cli", "report", "html", DEMO_KEY, "-o", "report.html"],
                       cwd=demo, check=True)
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto((demo / "report.html").as_uri())
            page.wait_for_selector("section[data-turn]")
            (ROOT / "docs/report-demo.png").write_bytes(page.screenshot())
            browser.close()
    print("wrote docs/report-demo.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
