"""The interactive viewer as one self-contained HTML file, or a fragment for a notebook cell.

Everything the page needs is inside it: the stylesheet, the vendored dagre layout library (with
its licence), the viewer's script, and the graph data as zlib-compressed JSON in base64 that the
page inflates with the browser's DecompressionStream. The page makes no request at all; as a
file it also says so in a Content-Security-Policy, so a browser would refuse one.

In a notebook the fragment shares the page with other outputs, so every CSS rule and SVG id
starts with the fragment's own id, and the script keeps dagre and the viewer in one closure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import zlib
from functools import cache
from importlib import resources
from typing import Any

from pseudoformer.viewer.data import ViewData, payload

SCRIPTS = ("model.js", "graph.js", "viewer.js")
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


@cache
def _asset(*path: str) -> str:
    return resources.files("pseudoformer.viewer").joinpath(*path).read_text(encoding="utf-8")


def _dagre() -> str:
    """dagre.min.js without its sourceMappingURL (a browser would try to fetch the map), and the
    licence notice that the MIT licence asks every copy to carry."""
    code = "\n".join(line for line in _asset("vendor", "dagre.min.js").splitlines()
                     if not line.startswith("//# sourceMappingURL"))
    notice = (f"/*! @dagrejs/dagre 3.1.3 (bundling @dagrejs/graphlib 4.0.6), MIT License.\n"
              f"{_asset('vendor', 'LICENSE.dagre').strip()}\n*/")
    return f"{notice}\n{code}"


def _packed(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def _markup(uid: str, vd: ViewData, mode: str) -> str:
    from html import escape

    title = f"{escape(vd.name)}<small>{escape(vd.source)}</small>"
    return f"""<div id="{uid}" class="pfv pfv-{mode}">
<div class="pfv-bar"><span class="pfv-title">{title}</span>
<label>graph <select class="pfv-pass" title="the graph at -O0 and after each pass"></select></label>
<input class="pfv-search" type="search" placeholder="search op or name, or %N" title="Enter: search; again: next match">
<button data-act="overview" title="back to the overview">overview</button>
<button data-act="more" title="open one more level of groups">+ level</button>
<button data-act="less" title="close the deepest open level">− level</button>
<button data-act="fit" title="fit the whole graph">fit</button>
<button data-act="zout" title="zoom out">−</button><button data-act="zin" title="zoom in">+</button>
<span class="pfv-status">loading…</span></div>
<div class="pfv-main"><div class="pfv-graph"><svg xmlns="http://www.w3.org/2000/svg"></svg></div>
<div class="pfv-side"><div class="pfv-info"></div><div class="pfv-source"></div></div></div>
</div>"""


def fragment(vd: ViewData, *, uid: str | None = None, mode: str = "inline") -> str:
    """The viewer as an HTML fragment: markup, scoped style and script. A notebook gets a fresh
    random id each time (one model shown twice is two viewers); a file, one from its content."""
    packed = _packed(payload(vd))
    if uid is None:
        uid = "pfv-" + (hashlib.sha256(packed.encode()).hexdigest()[:12] if mode == "page" else secrets.token_hex(6))
    css = _asset("static", "viewer.css").replace("#ROOT", f"#{uid}")
    js = "\n".join(_asset("static", name) for name in SCRIPTS)
    # The script finds its own root through currentScript where it can: a notebook may run it
    # before the output is in the document.
    script = (f'(function () {{\n"use strict";\n{_dagre()}\n{js}\n'
              f'const me = document.currentScript;\n'
              f'const root = (me && me.parentNode && me.parentNode.querySelector("#{uid}")) || document.getElementById("{uid}");\n'
              f'boot(root, "{packed}");\n}})();')
    if "</script" in script.lower():
        raise AssertionError("the viewer's script would end its <script> element early")
    return f'<div class="pfv-wrap">{_markup(uid, vd, mode)}\n<style>{css}</style>\n<script>{script}</script></div>'


def page(vd: ViewData) -> str:
    """A standalone HTML file."""
    from html import escape

    body = fragment(vd, mode="page")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(vd.name)} · pseudoformer</title></head>\n<body>{body}</body></html>\n")
