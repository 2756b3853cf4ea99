"""The files `inspect --format html|svg` writes, read as files: well-formed, offline, grouped."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pseudoformer.cli import main
from pseudoformer.optimize import optimize
from pseudoformer.viewer import notebook_html, to_svg
from tests.viewer.models import GPT2, cli_args, defines, small

SVG = "{http://www.w3.org/2000/svg}"


def _clusters(svg: str) -> set[str]:
    root = ET.fromstring(svg)  # raises on anything that is not well-formed XML
    return {g.get("data-scope") for g in root.iter(f"{SVG}g") if "cluster" in (g.get("class") or "")}


def test_svg_is_xml_with_one_cluster_per_call(tmp_path: Path) -> None:
    out = tmp_path / "gpt2.svg"
    assert main(["inspect", *cli_args("gpt2"), "-O2", "--format", "svg", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    clusters = _clusters(text)
    assert {"GPT2", "GPT2/layers.0", "GPT2/layers.1", "GPT2/layers.0/MHAttention", "GPT2/layers.0/layer_norm",
            "GPT2/layers.0/layer_norm#2", "GPT2/layers.1/GELU_tanh", "GPT2/layer_norm"} <= clusters
    root = ET.fromstring(text)
    boxes = [g for g in root.iter(f"{SVG}g") if "node" in (g.get("class") or "").split()]
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "layer_norm" in texts and "attention" in texts and "gamma_1 [16]" in texts  # parameters folded in
    assert not [g for g in boxes if "param" in " ".join(t.text or "" for t in g.iter(f"{SVG}text")).split()]


def test_svg_of_gpt2_small_at_two_layers_fits_one_screen() -> None:
    from pseudoformer.model import load

    m = load(Path(__file__).resolve().parents[2] / "models" / "gpt2.alg", defines=["L=2"])
    root = ET.fromstring(to_svg(optimize(m.graph, 2), "-O2"))
    assert float(root.get("width")) <= 1920 and float(root.get("height")) <= 1080
    assert len([g for g in root.iter(f"{SVG}g") if "cluster" in (g.get("class") or "")]) >= 12


def test_svg_closes_deep_groups_of_a_large_graph() -> None:
    root = ET.fromstring(to_svg(small("bart").graph))  # -O0: hundreds of nodes
    boxes = [g for g in root.iter(f"{SVG}g") if "box" in (g.get("class") or "").split()]
    assert boxes, "a graph this size is drawn with some groups closed"
    assert len([g for g in root.iter(f"{SVG}g") if "node" in (g.get("class") or "").split()]) <= 160


def test_html_is_one_offline_file(tmp_path: Path) -> None:
    out = tmp_path / "gpt2.html"
    assert main(["inspect", *cli_args("gpt2"), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in html
    # No address to fetch: the only URL is the SVG namespace; no src=, href= or url(http…).
    assert set(re.findall(r"https?://[^\s\"')]+", html)) <= {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=", html)
    assert "sourceMappingURL" not in html
    assert "Copyright (c) 2012-2014 Chris Pettitt" in html  # dagre's licence travels with it
    assert html.count("<script") == 1


def test_html_after_a_pass_that_is_not_there_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "x.html"
    assert main(["inspect", *cli_args("gpt2"), "-O1", "--after", "gelu_fusion", "--format", "html",
                 "-o", str(out)]) == 1
    assert "no pass 'gelu_fusion' at -O1" in capsys.readouterr().err
    assert not out.exists()


def test_notebook_fragments_scope_their_css_and_ids() -> None:
    a, b = notebook_html(small("gpt2").graph), notebook_html(small("gpt2").graph)
    ida, idb = (re.search(r'<div id="(pfv-[0-9a-f]+)"', x).group(1) for x in (a, b))
    assert ida != idb  # one model shown twice is two viewers
    css = re.sub(r"/\*.*?\*/", "", re.search(r"<style>(.*?)</style>", a, re.S).group(1), flags=re.S)
    rules = [r.strip() for r in re.findall(r"(?:^|})\s*([^{}]+)\{", css)]
    assert rules and all(sel.strip().startswith(f"#{ida}") for r in rules for sel in r.split(","))
    assert "<!DOCTYPE" not in a and "pfv-inline" in a


def test_models_show_the_viewer_in_a_notebook() -> None:
    import pseudoformer
    from pseudoformer.deploy import CompiledModel
    from pseudoformer.deploy_tvm import TVMCompiledModel

    m = small("gpt2")
    assert 'class="pfv pfv-inline"' in m._repr_html_()
    compiled = pseudoformer.compile(m.source, config=os.devnull, defines=defines(GPT2), opt_level=1)
    assert isinstance(compiled, CompiledModel) and compiled.opt_level == 1
    assert 'class="pfv pfv-inline"' in compiled._repr_html_()
    # The viewer reads the model, not the library TVM built, so no TVM is needed to show one.
    assert 'class="pfv pfv-inline"' in TVMCompiledModel(compiled=None, model=m, opt_level=2)._repr_html_()
