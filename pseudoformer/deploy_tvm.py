"""Deploying with the TVM backend: `pseudoformer.compile(..., backend="tvm")` and `pseudoformer run model.so`.

Importable without TVM: every entry point imports it on use and turns a missing TVM, and every
BackendError, into the UsageError that the API raises and the CLI prints (exit 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.atomic_write import describe
from pseudoformer.base.errors import BackendError, UsageError
from pseudoformer.base.file_access import regular_file
from pseudoformer.inputs import check_size_against
from pseudoformer.model import Model, check_inputs, model_metadata

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions


def _build() -> Any:
    try:
        from pseudoformer.backends.tvm import build
    except BackendError as e:
        raise UsageError(str(e)) from None
    return build


@dataclass
class TVMCompiledModel:
    """A model compiled by TVM, with the interpreter's model it came from: `.save(path)`, `.run(...)`."""

    compiled: Any  # build.TVMModel
    model: Model
    dtype: str = "float32"
    opt_level: int = 2

    def _repr_html_(self) -> str:
        """In a notebook: the graph viewer, opened on the graph as compiled (-O`opt_level`)."""
        from pseudoformer.viewer import notebook_html

        return notebook_html(self.model.graph, self.opt_level)

    def save(self, path: str | Path) -> Path:
        """Write the .so (and its weights beside it, model.weights.safetensors)."""
        try:
            return self.compiled.save(path)
        except BackendError as e:
            raise UsageError(str(e)) from None
        except OSError as e:
            raise UsageError(f"cannot write {path}: {describe(e)}") from None

    def run(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> dict[str, np.ndarray]:
        feed = check_inputs(self.model.graph, {**(inputs or {}), **named})
        try:
            return self.compiled.run(feed)
        except BackendError as e:
            raise UsageError(str(e)) from None


def compile_model(model: Model, options: CompileOptions | None = None, **keywords: Any) -> TVMCompiledModel:
    """Optimise `model`'s graph at options.opt_level (and quantize its weights) and compile it with TVM for
    options.target ("llvm" or "cuda"); `options` or keywords naming its fields, as for `compile`."""
    from pseudoformer.compile_options import from_keywords
    from pseudoformer.optimize import debugging

    options = from_keywords(options, keywords, "compile", backend="tvm", opt_level=2)
    build = _build()
    metadata = model_metadata(model, options.opt_level)
    if options.quantize is not None:
        metadata["quantization"] = options.quantize.describe()
    try:  # one run of the compile's passes (backends/pipeline.py), then TVM
        compiled = build.compile_graph(model.graph, model.weights, replace(options, metadata=metadata),
                                       verify=debugging())
    except BackendError as e:
        raise UsageError(str(e)) from None
    return TVMCompiledModel(compiled, model, options.dtype, opt_level=options.opt_level)


def run_library(path: str | Path, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Load a library written by TVMCompiledModel.save and run it on `inputs` (by name)."""
    regular_file(path, "compiled model")
    build = _build()
    try:
        compiled = build.load_model(path)
    except BackendError as e:
        raise UsageError(str(e)) from None
    feed = {}
    for name, dtype, rank in compiled.meta["inputs"]:
        if name not in inputs:
            continue  # run() names every missing input at once
        a = np.asarray(inputs[name])
        if a.ndim != rank:
            raise UsageError(f"input {name} has shape {list(a.shape)}, but the model takes a rank-{rank} {dtype} array")
        for axis, size in enumerate(a.shape):  # run-time sizes bounded as a .alg model's are (inputs.py)
            check_size_against(size, f"input {name}", f"axis {axis}")
        if dtype == "int64" and not np.issubdtype(a.dtype, np.integer):
            raise UsageError(f"input {name} holds {a.dtype} values; token ids must be integers")
        feed[name] = a.astype(dtype)
    feed.update({k: v for k, v in inputs.items() if k not in feed and k not in compiled.input_names})
    try:
        return compiled.run(feed)
    except BackendError as e:
        raise UsageError(str(e)) from None
