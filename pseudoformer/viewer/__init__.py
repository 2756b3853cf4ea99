"""Pictures of the IR graph: an interactive HTML viewer, a static SVG, and notebook display.

    pseudoformer inspect models/gpt2.alg --format html -o gpt2.html
    pseudoformer inspect models/gpt2.alg -D L=2 -O2 --format svg -o gpt2.svg

The nodes are grouped by the algorithm call that made them (node.scope), parameters and
constants are folded into the nodes that read them, and the HTML steps through the passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pseudoformer.ir import Graph

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions


def to_html(graph: Graph, level: int = 0, *, after: str | None = None, compile_options: CompileOptions | None = None,
            weights: Mapping[str, Any] | None = None) -> str:
    """A standalone page: the graph at -O0 and after each pass of -O`level` (of -O2 at -O0), or of the
    whole ONNX compile's pipeline with `compile_options`, opening on -O`level` or after pass `after`."""
    from pseudoformer.viewer.data import view_data
    from pseudoformer.viewer.html import page

    return page(view_data(graph, level, after=after, compile_options=compile_options, weights=weights))


def to_svg(graph: Graph, label: str = "") -> str:
    """A static picture of `graph` as it is (optimise it first), one cluster per call scope."""
    from pseudoformer.viewer.data import single_view
    from pseudoformer.viewer.svg import render_svg

    return render_svg(single_view(graph, label))


def notebook_html(graph: Graph, level: int = 0) -> str:
    """The viewer as a fragment for a notebook output cell (what `_repr_html_` returns)."""
    from pseudoformer.viewer.data import view_data
    from pseudoformer.viewer.html import fragment

    return fragment(view_data(graph, level), mode="inline")
