"""Optimisation levels for the API and the CLI: -O0 literal, -O1 cleanup, -O2 (default) everything."""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import Note, Pos, UsageError
from pseudoformer.ir import Graph
from pseudoformer.ir.printer import format_graph
from pseudoformer.passes.manager import LEVELS, PIPELINES, Pass, passes, pipeline, run_passes
from pseudoformer.passes.pass_base import PassContext

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

DEFAULT_LEVEL = 2


def check_level(level: int) -> None:
    if level not in LEVELS:
        raise UsageError(f"no optimisation level -O{level} (choose {', '.join(f'-O{k}' for k in LEVELS)})")


def optimize(graph: Graph, level: int = DEFAULT_LEVEL, *, debug: bool | None = None) -> Graph:
    """Run the level's passes; with debug (or PSEUDOFORMER_DEBUG=1) verify the IR after each one."""
    check_level(level)
    return run_passes(graph, pipeline(level), check=debugging() if debug is None else debug)


def debugging() -> bool:
    """Whether to verify the IR after every pass (PSEUDOFORMER_DEBUG=1)."""
    return bool(os.environ.get("PSEUDOFORMER_DEBUG"))


def _run(graph: Graph, level: int, compile_options: CompileOptions | None,
         weights: Mapping[str, np.ndarray] | None = None, **kw: Any) -> PassContext:
    """Run the level's passes, or with `compile_options` the whole ONNX compile's pipeline at that level
    (backends/pipeline.py); what the rules did: the fusions' refusals, as (rule, reason, span, scope), and how
    often each rule fired."""
    check_level(level)
    ctx = PassContext()
    if compile_options is None:
        run_passes(graph, pipeline(level), ctx=ctx, **kw)
        return ctx
    from pseudoformer.backends.onnx.compile import prepare
    from pseudoformer.base.errors import BackendError
    from pseudoformer.passes.padding_mask import PaddingMaskError

    try:
        prepare(graph, weights or {}, replace(compile_options, opt_level=level), refusals=ctx.refusals,
                fired=ctx.fired, **kw)
    except (BackendError, PaddingMaskError) as e:
        raise UsageError(str(e)) from None
    return ctx


def refusals(graph: Graph, level: int = DEFAULT_LEVEL, *, compile_options: CompileOptions | None = None,
             weights: Mapping[str, np.ndarray] | None = None) -> list[Note]:
    """Why each fusion the level's passes (or the compile's, with `compile_options`) matched was refused,
    once per place and reason, in source order, with how many heads (or layers, or calls) it was refused
    for (`note.count`); a refusal inside a shared algorithm is placed at the user's call of it. A head or
    norm written one way that did not fuse stays as written: correct, but slower."""
    return _notes(graph, _run(graph, level, compile_options, weights).refusals)


def rule_counts(graph: Graph, level: int = DEFAULT_LEVEL, *, compile_options: CompileOptions | None = None,
                weights: Mapping[str, np.ndarray] | None = None) -> tuple[list[Note], Counter[str]]:
    """The refusals' notes (as `refusals` gives them) and how often each rule fired, from one run of the passes:
    as Inductor counts its pattern matches, a fusion that never fires is found without reading the graph."""
    ctx = _run(graph, level, compile_options, weights)
    return _notes(graph, ctx.refusals), ctx.fired


def _notes(graph: Graph, refused: list[tuple[Any, ...]]) -> list[Note]:
    scopes: dict[tuple[str, str, str], set[str]] = {}
    seen: dict[tuple[str, str, str], tuple[str, Pos | None, str]] = {}
    for rule, why, span, *scope in refused:
        pos, inside = _users_line(graph, span, scope[0] if scope else "")
        key = (rule, why, str(pos))
        seen.setdefault(key, (f"{rule} refused", pos, why if inside is None else f"{why} (in {inside})"))
        scopes.setdefault(key, set()).add(scope[0] if scope else "")
    notes = []
    for key, (head, pos, why) in seen.items():
        count = len(scopes[key])  # one per head, layer or call the rule refused, not one per line
        note = Note(f"{head}{f' {count} times' if count > 1 else ''}: {why}", pos)
        note.count = count  # type: ignore[attr-defined]
        notes.append(note)
    return sorted(notes, key=lambda n: (n.pos.file, n.pos.line, n.pos.col) if n.pos else ("", 0, 0))


def _users_line(graph: Graph, span: Any, scope: str) -> tuple[Pos | None, str | None]:
    """Where to point a note: the node's own line when it is in the entry's file; else, when it sits in a shared
    algorithm (variants.alg's layer_norm), the user's call of it, and where inside it the node is."""
    if span is None:
        return None, None
    own = Pos(span.file, span.line, span.col)
    root, sites = graph.meta.get("source"), graph.meta.get("call_sites", {})
    if root is None or span.file == root:
        return own, None
    while scope:
        site = sites.get(scope)
        if site is not None and site.file == root:
            return Pos(site.file, site.line, site.col), f"{Path(span.file).name}:{span.line}"
        scope = scope.rpartition("/")[0]
    return own, None


def describe_passes(compile_options: CompileOptions | None = None, backend: str = "onnx") -> str:
    """With `compile_options`: exactly the pipeline a compile with them runs. Without: the passes, the
    levels and pipelines each runs in, the pipelines themselves, and a default compile's pipeline."""
    from pseudoformer.backends.options import CompileOptions

    if compile_options is not None:
        return _describe_pipeline(compile_options, backend)
    lines = ["passes:"]
    for name, p in passes().items():
        used = [f"-O{k}" for k, names in LEVELS.items() if name in names]
        used += [k for k, names in PIPELINES.items() if name in names and not k.startswith("generation")]
        if any(name in names for k, names in PIPELINES.items() if k.startswith("generation")):
            used.append("generation")
        lines.append(f"  {name:28s} {' '.join(used) or '(not in a pipeline)':24s} {p.doc}")
    lines.append("pipelines (after the optimisation level):")
    for key, names in PIPELINES.items():
        lines.append(f"  {key:20s} {', '.join(names)}")
    return "\n".join(lines) + "\n" + _describe_pipeline(CompileOptions(opt_level=DEFAULT_LEVEL), backend)


def _describe_pipeline(options: CompileOptions, backend: str) -> str:
    from pseudoformer.backends.onnx.lower import checked_opset
    from pseudoformer.backends.pipeline import compile_pipeline
    from pseudoformer.base.errors import BackendError

    check_level(options.opt_level)
    try:
        opset = checked_opset(options) if backend == "onnx" else 0
    except BackendError as e:
        raise UsageError(str(e)) from None
    said = [f"-O{options.opt_level}", backend + (f" opset {opset}" if backend == "onnx" else ""), options.dtype]
    said += [f"weights {options.quantize.describe()}"] if options.quantize is not None else []
    said += [name for name, on in (("padding mask", options.padding_mask), ("contrib ops", options.contrib_ops),
                                   ("local functions (at lowering, no pass)", options.functions)) if on]
    registry = passes()
    lines = [f"compile pipeline ({', '.join(said)}):"]
    lines += [f"  {i:2d}. {name:28s} {registry[name].doc}"
              for i, name in enumerate(compile_pipeline(options, backend, opset), 1)]
    return "\n".join(lines)


def trace(graph: Graph, level: int, *, compile_options: CompileOptions | None = None,
          weights: Mapping[str, np.ndarray] | None = None) -> list[tuple[Pass, Graph]]:
    """The graph after each pass application of the level's pipeline (or the compile's), in order."""
    out: list[tuple[Pass, Graph]] = []
    _run(graph, level, compile_options, weights, check=True, after=lambda p, g, changed: out.append((p, g)))
    return out


def after_pass(graph: Graph, name: str, level: int, *, compile_options: CompileOptions | None = None,
               weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    steps = trace(graph, max(level, 1) if name not in _names(level) else level, compile_options=compile_options,
                  weights=weights)
    hits = [g for p, g in steps if p.name == name]
    if not hits:
        raise UsageError(f"no pass {name!r} at -O{level}; the passes are {', '.join(p.name for p, _ in steps)}")
    return hits[-1]


def diff_pass(graph: Graph, name: str, level: int, *, compile_options: CompileOptions | None = None,
              weights: Mapping[str, np.ndarray] | None = None) -> str:
    steps = trace(graph, level, compile_options=compile_options, weights=weights)
    before = graph
    for p, g in steps:
        if p.name == name:
            a = format_graph(before, with_locations=False).splitlines(keepends=True)
            b = format_graph(g, with_locations=False).splitlines(keepends=True)
            return "".join(difflib.unified_diff(a, b, f"before {name}", f"after {name}")) or f"{name}: no change\n"
        before = g
    names = ", ".join(dict.fromkeys(p.name for p, _ in steps))
    raise UsageError(f"no pass {name!r} at -O{level}; the passes are {names}")


def _names(level: int) -> list[str]:
    return LEVELS.get(level, [])
