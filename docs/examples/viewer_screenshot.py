"""The README's picture of the viewer: GPT-2 at two layers, -O0, a softmax of head 0 selected.

    pseudoformer inspect models/gpt2.alg -D L=2 --format html -o gpt2.html
    python docs/examples/viewer_screenshot.py gpt2.html docs/images/viewer.png

Needs Debian's chromium (apt-get install chromium) and playwright (pip install playwright).
"""

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

page_file, out = Path(sys.argv[1]).resolve(), sys.argv[2]
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(page_file.as_uri())
    page.wait_for_selector("[data-ready]")
    page.fill(".pfv-search", "softmax")
    page.press(".pfv-search", "Enter")  # lists the matches
    page.press(".pfv-search", "Enter")  # selects the first: its groups open, its source line shows
    page.screenshot(path=out)
    browser.close()
