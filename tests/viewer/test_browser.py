"""The HTML viewer in a real browser: Debian's chromium, driven by Playwright (never a downloaded browser).

`.ci/run` installs chromium with apt; where it is missing these tests skip and say so.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pseudoformer.cli import main
from pseudoformer.viewer import notebook_html
from tests.viewer.models import cli_args, small

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium: `apt-get install chromium` (.ci/run does)"),
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    with sync_api.sync_playwright() as p:
        # A persistent context is Chromium with a fresh --user-data-dir of our own.
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 850})
        yield context
        context.close()


class Page:
    """A page that records console errors, uncaught exceptions and every request it makes."""

    def __init__(self, context: object) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def open(self, url: str) -> float:
        t = time.perf_counter()
        self.page.goto(url)
        self.page.wait_for_selector("[data-ready]", timeout=30_000)
        return time.perf_counter() - t

    def labels(self) -> set[str]:
        return set(self.page.eval_on_selector_all(
            ".pfv-cluster > text, .pfv-box text.pfv-op", "els => els.map(e => e.firstChild.textContent.replace('▾ ', ''))"))

    def click_visible_node(self, op: str) -> None:
        """A real mouse click on the first box of `op` that is on screen."""
        box = self.page.evaluate("""op => {
            const host = document.querySelector('.pfv-graph').getBoundingClientRect();
            for (const g of document.querySelectorAll('.pfv-node:not(.pfv-box):not(.pfv-io)')) {
                const r = g.getBoundingClientRect(), t = g.querySelector('.pfv-op').textContent;
                if (t.endsWith(' ' + op) && r.left >= host.left && r.right <= host.right && r.top >= host.top
                    && r.bottom <= host.bottom) return [r.left + r.width / 2, r.top + r.height / 2];
            }
            return null; }""", op)
        assert box, f"no {op} box on screen"
        self.page.mouse.click(*box)


def _write(tmp_path: Path, name: str) -> Path:
    out = tmp_path / f"{name}.html"
    assert main(["inspect", *cli_args(name), "--format", "html", "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize(("name", "groups", "op"), [
    ("gpt2", {"GPT2", "layers.0", "layers.1", "MHAttention", "layer_norm #2"}, "gather"),
    ("bart", {"BART", "layers.0", "layers.1"}, "gather"),
])
def test_viewer_opens_offline_and_a_click_shows_the_source_line(browser: object, tmp_path: Path, name: str,
                                                                  groups: set[str], op: str) -> None:
    html = _write(tmp_path, name)
    page = Page(browser)
    seconds = page.open(html.as_uri())
    print(f"{name}: ready in {seconds:.2f} s; {page.page.inner_text('.pfv-status')}")
    assert page.requests == [html.as_uri()]  # the file itself, nothing else
    assert groups <= page.labels()
    if "MHAttention" not in page.labels():  # a closed group opens on a click
        page.page.locator(".pfv-box", has_text="layers.0").first.click()
        assert {"MHAttention", "layer_norm"} <= page.labels()

    page.click_visible_node(op)
    info = page.page.inner_text(".pfv-info")
    assert info.startswith("%") and f"= {op}" in info.splitlines()[0]
    file, line, _ = re.search(r"source\s+(\S+):(\d+):(\d+)", info).groups()
    expected = Path(file).read_text(encoding="utf-8").splitlines()[int(line) - 1]
    current = page.page.inner_text(".pfv-source .pfv-line.pfv-cur")
    assert current == f"{line}{expected}"  # the line number, then the line as the file has it
    assert page.page.eval_on_selector_all(".pfv-sel", "els => els.length") == 1

    shot = tmp_path / f"{name}-viewer.png"
    page.page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert not page.errors


def test_source_lines_search_and_passes(browser: object, tmp_path: Path) -> None:
    html = _write(tmp_path, "gpt2")
    page = Page(browser)
    page.open(html.as_uri())
    p = page.page
    # A source line selects the nodes it made: Algorithm 4's softmax line, once per head and layer.
    p.select_option(".pfv-file", label=next(f for f in p.eval_on_selector_all(
        ".pfv-file option", "os => os.map(o => o.textContent)") if f.endswith("primitives.alg")))
    line = p.locator(".pfv-line.pfv-has", has_text="softmax(S / √d_attn)")
    line.click()
    # div, softmax and the product with V, in each of L=2 layers × H=2 heads
    assert "made 12 nodes" in p.inner_text(".pfv-info h3")
    assert p.eval_on_selector_all(".pfv-sel", "els => els.length") == 1
    assert p.eval_on_selector_all(".pfv-hl", "els => els.length") >= 1

    p.fill(".pfv-search", "W_q")
    p.press(".pfv-search", "Enter")
    assert p.inner_text(".pfv-info h3").startswith("4 matches")  # a parameter is found where it is folded

    k = p.eval_on_selector_all(".pfv-pass option", "os => os.findIndex(o => o.textContent.includes('layer_norm_fusion'))")
    p.select_option(".pfv-pass", str(k))
    assert "after layer_norm_fusion" in p.inner_text(".pfv-info h3")
    assert p.eval_on_selector_all(".pfv-new", "els => els.length") > 0  # what the pass made is marked
    assert page.requests == [html.as_uri()] and not page.errors


def test_two_notebook_outputs_on_one_page_do_not_meet(browser: object) -> None:
    page = Page(browser)
    m = small("gpt2")
    page.page.set_content(f"<html><body><h1>notebook</h1>{notebook_html(m.graph)}{notebook_html(m.graph, 2)}</body></html>")
    page.page.wait_for_function("document.querySelectorAll('[data-ready]').length == 2", timeout=30_000)
    ids = page.page.eval_on_selector_all(".pfv", "els => els.map(e => e.id)")
    assert len(set(ids)) == 2
    passes = page.page.eval_on_selector_all(".pfv-pass", "els => els.map(e => e.selectedOptions[0].textContent)")
    assert passes[0].startswith("-O0") and "after simplify" in passes[1]  # each opened on its own level
    assert not page.errors and page.requests == []


def test_notebook_output_works_in_a_sandboxed_frame(browser: object) -> None:
    """As VS Code and Colab show outputs: in an iframe with scripts allowed and an opaque origin."""
    import html

    page = Page(browser)
    frag = notebook_html(small("bart").graph)
    page.page.set_content(f'<iframe sandbox="allow-scripts" style="width:1200px;height:700px" '
                          f'srcdoc="{html.escape(frag, quote=True)}"></iframe>')
    frame = page.page.frames[1]
    frame.wait_for_selector("[data-ready]", timeout=30_000)
    assert "BART" in frame.inner_text(".pfv-title")
    assert frame.eval_on_selector_all(".pfv-cluster, .pfv-box", "els => els.length") > 3
    assert not page.errors and [r for r in page.requests if not r.startswith("about:")] == []
