"""Compile a model for deployment: `pseudoformer.compile(...)` → an object that can `.save()` and `.run()`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import ContribFallbackWarning, UsageError
from pseudoformer.base.file_access import loads_json, regular_file
from pseudoformer.base.limits import FILE_CAPS, MAX_NODES, RUN_MEMORY, available_memory, show_bytes
from pseudoformer.inputs import check_size_against, check_token_ids
from pseudoformer.model import Model, check_inputs, load, model_metadata
from pseudoformer.run_settings import check_threads

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.deploy_tvm import TVMCompiledModel

class CompiledModel:
    """An ONNX model compiled from a .alg source, with the interpreter's model it came from.

    It keeps the model as lowered: the graph, and the weights as the arrays of `model.weights`
    (shared, not copied), so `save` writes the weights from those arrays without building a
    protobuf of them. `.onnx`, the whole ModelProto, is built the first time it is asked for;
    from then on `save` writes that ModelProto, so what `.onnx` shows (changes included) is what
    is saved. `.options`: what it was compiled with (its dtype, padding_mask, opt_level, quantize).
    """

    def __init__(self, onnx: Any, model: Model, options: CompileOptions) -> None:
        from pseudoformer.backends.onnx.lower import LoweredModel

        self._lowered = onnx if isinstance(onnx, LoweredModel) else None  # or a ModelProto:
        self._proto = None if self._lowered is not None else onnx
        self.model = model
        self.options = options
        self.dtype = options.dtype
        self.padding_mask = options.padding_mask  # an attention_mask per token input (passes/padding_mask.py)
        self.opt_level = options.opt_level
        self.quantize = options.quantize  # how the weights were quantized (None: they were not)

    @property
    def onnx(self) -> Any:
        """The compiled model as one onnx.ModelProto, weights inline."""
        if self._proto is None:
            self._proto = self._lowered.to_proto()
        return self._proto

    def _repr_html_(self) -> str:
        """In a notebook: the graph viewer, opened on the graph as compiled (-O`opt_level`)."""
        from pseudoformer.viewer import notebook_html

        return notebook_html(self.model.graph, self.opt_level)

    def __repr__(self) -> str:
        return f"CompiledModel({self.model.source.name}, entry={self.model.entry}, dtype={self.dtype})"

    def save(self, path: str | Path) -> Path:
        """Write the .onnx file atomically (external data beside it past 2 GiB)."""
        from pseudoformer.backends.onnx import BackendError, save_model

        try:
            return save_model(self._lowered if self._proto is None else self._proto, path)
        except BackendError as e:
            raise UsageError(str(e)) from None

    def run(self, inputs: Mapping[str, Any] | None = None, *, provider: str | None = None,
            threads: int | None = None, **named: Any) -> dict[str, np.ndarray]:
        """Run on ONNX Runtime: provider "cpu" or "cuda", threads; by default the options' (compile's)."""
        provider = provider or self.options.provider
        threads = threads if threads is not None else self.options.threads
        given = {**(inputs or {}), **named}
        masks = {k: np.asarray(v, dtype=np.int64) for k, v in given.items() if k in self.mask_inputs}
        feed = check_inputs(self.model.graph, {k: v for k, v in given.items() if k not in masks})
        missing = [m for m in self.mask_inputs if m not in masks]
        if missing:
            raise UsageError(f"the model takes {', '.join(missing)} (1 for a token, 0 for padding)")
        return run_onnx(self.onnx, {**feed, **masks}, provider=provider, threads=threads)

    @property
    def mask_inputs(self) -> list[str]:
        if not self.padding_mask:
            return []
        from pseudoformer.passes.padding_mask import padding_mask_inputs

        return padding_mask_inputs(self.model.graph)


def compile(path: str | Path, *, entry: str | None = None, config: str | Path | None = None,  # noqa: A001
            defines: list[str] | None = None, weights: str | Path | None = None, seed: int = 0,
            include: Sequence[str | Path] = (), max_nodes: int = MAX_NODES, allow_nonfinite: bool = False,
            options: CompileOptions | None = None, **keywords: Any) -> CompiledModel | TVMCompiledModel:
    """Compile a .alg model (with its config and weights) as `options` say (a CompileOptions), or as
    keywords naming its fields say, each the command line's flag of the same name:

    backend="onnx" (the default) gives a CompiledModel (.onnx); backend="tvm" a TVMCompiledModel (a .so
    for `target` "llvm", this CPU, or "cuda"; needs pip install pseudoformer[tvm]). Both .save and .run.
    backend="torch" gives a torch.nn.Module (deploy_torch.py; needs pip install pseudoformer[torch]):
    `module(**inputs)` → {output name: tensor}, its parameters ours by name.
    opt_level: 0, 1 or 2 (the default). dtype: "float32" or "float16". opset: ONNX's.
    tvm_params: "args" (the default) passes a TVM model's weights at run time, saved beside the .so;
    "bind" compiles them into the .so as constants.
    quantize="int4" or "int8" stores the weight matrices in 4 or 8 bits, in blocks of `block_size`
    (32) along K with a scale each and a zero point unless `symmetric`; `accuracy_level` is
    MatMulNBits' (4, the default: int8 activations, fast on a CPU; 0: computes as the reference
    does); the output projection (unembedding) and an embedding tied to it are quantized too unless
    not `quantize_output`; `quantize_embeddings` also quantizes every embedding table. A QuantizeOptions
    sets all of these (and the method). On the tvm backend every accuracy level computes in float32, as
    level 0 does (backends/tvm/nbits.py), unless `int8_activations`: then the 4-bit products round their
    activations to int8 per block as level 4 does (backends/tvm/nbits_int8.py); see docs/quantization.md.
    padding_mask=True adds an `attention_mask` input per token input (ONNX only; see
    passes/padding_mask.py) so that right-padded batches of different lengths run together.
    functions=True writes each algorithm call as an ONNX local function (ONNX only; see
    backends/onnx/functions.py): the same model, folded as the paper writes it, for a viewer such as Netron.
    contrib_ops=True lets onnxruntime's own kernels (com.microsoft GroupQueryAttention) take the ops
    they compute exactly and faster; the file then runs on onnxruntime only (ONNX only).
    include, max_nodes, allow_nonfinite: as for `load`.
    """
    from pseudoformer.compile_options import from_keywords

    options = from_keywords(options, keywords, "compile", opt_level=2)
    # ONNX: a checkpoint's tensors are read one at a time as the file is written (LazyTensors), never the
    # whole model at once; TVM quantizing likewise, a tensor at a time as it makes its weights
    # (backends/tvm/weight_values.py); TVM in float binds its weights as arrays when it builds.
    model = load(path, entry=entry, config=config, defines=defines, weights=weights, seed=seed, include=include,
                 max_nodes=max_nodes, allow_nonfinite=allow_nonfinite, lazy_weights=streams_weights(options))
    return compile_loaded(model, options)


def streams_weights(options: CompileOptions) -> bool:
    """Whether a compile with these options reads a checkpoint a tensor at a time (load's lazy_weights)."""
    return options.backend == "onnx" or (options.backend == "tvm" and options.quantize is not None)


def compile_loaded(model: Model, options: CompileOptions) -> CompiledModel | TVMCompiledModel | Any:
    """`model` compiled for the backend `options` name (checked options: from_keywords, from_arguments)."""
    if options.backend == "torch":
        from pseudoformer.deploy_torch import to_module

        return to_module(model, options)
    if options.backend == "tvm":
        from pseudoformer.deploy_tvm import compile_model

        return compile_model(model, options)
    return CompiledModel(lower(model, options, whole=False), model, options)


def lower(model: Model, options: CompileOptions | None = None, *, whole: bool = True, **keywords: Any) -> Any:
    """The optimised model as an onnx.ModelProto; with whole=False as a LoweredModel (graph + arrays).
    One pipeline of passes (backends/pipeline.py) takes the model's graph to the one lowered. `options`,
    or keywords naming its fields (opt_level, 2 by default; dtype, quantize, ...), as for `compile`."""
    from pseudoformer.backends.onnx import BackendError
    from pseudoformer.backends.onnx.compile import lower_model
    from pseudoformer.compile_options import from_keywords
    from pseudoformer.optimize import debugging
    from pseudoformer.passes.padding_mask import PaddingMaskError

    options = from_keywords(options, keywords, "compile", opt_level=2)
    metadata = model_metadata(model, options.opt_level)
    if options.quantize is not None:
        metadata["quantization"] = options.quantize.describe()
    # lazy_weights: each matrix quantized as the writer reaches it (save_model), not all of them up front
    refused: list = []
    try:
        lowered = lower_model(model.graph, model.weights, replace(options, metadata=metadata, lazy_weights=True),
                              verify=debugging(), refusals=refused)
    except PaddingMaskError as e:
        raise UsageError(f"--padding-mask: {e}") from None
    except BackendError as e:
        raise UsageError(str(e)) from None
    if options.contrib_ops:
        say_contrib_fallback(refused)
    return lowered.to_proto() if whole else lowered


def say_contrib_fallback(refused: Sequence[tuple]) -> None:
    """Once per compile: how many attention ops GroupQueryAttention could not take, and why (the fusion's
    refusals: a soft-cap, heads kept apart by q/k norms, a mask); they stay ONNX Attention, which computes the
    same. `pseudoformer inspect --contrib-ops --refusals` places each at its line."""
    whys = [r[1] for r in refused if r[0] == "group_query_attention"]
    if whys:
        reasons = "; ".join(dict.fromkeys(whys))
        warnings.warn(ContribFallbackWarning(
            f"--contrib-ops: {len(whys)} attention op(s) stay standard ONNX Attention, which GroupQueryAttention "
            f"cannot replace: {reasons}"), stacklevel=3)


def run_onnx(onnx_model: Any, inputs: Mapping[str, np.ndarray], *, provider: str = "cpu",
             threads: int | None = None, max_memory: int | None = None) -> dict[str, np.ndarray]:
    """Run an ONNX model (a ModelProto, or the path of a .onnx file) on onnxruntime.

    A file may come from anyone, and a 200-byte model can ask for gigabytes (a ConstantOfShape of 2³¹
    floats). So a file runs under a memory limit (onnxruntime's CPU arena, runner.py): `max_memory`,
    by default run_memory() of the file's size, and never more than the memory available; and every
    run-time size of its inputs is bounded as a .alg model's are (inputs.check_size)."""
    from pseudoformer.backends.onnx import BackendError, OnnxRunner

    check_threads(threads)
    limit = None
    if isinstance(onnx_model, (str, os.PathLike)):
        st = regular_file(onnx_model, "model", FILE_CAPS["onnx"])
        data = Path(os.path.realpath(onnx_model))
        data = data.with_name(data.name + ".data")
        limit = run_memory(st.st_size + (data.stat().st_size if data.is_file() else 0), max_memory)
        onnx_model = os.path.realpath(onnx_model)  # its .data lies beside the file a link leads to
    try:
        runner = OnnxRunner(onnx_model, provider=provider, threads=threads, memory_limit=limit)
    except BackendError as e:
        raise UsageError(str(e)) from None
    # Token inputs index tables, and ONNX's Gather takes a negative index from the end: check them as
    # `run model.alg` does, from the bounds the compiled model records (model_metadata).
    for name, vocabulary in _token_bounds(runner.metadata).items():
        if name in inputs:
            check_token_ids(name, np.asarray(inputs[name]), vocabulary)
    if limit is not None:
        for i in runner.session.get_inputs():
            value = inputs.get(i.name)
            if value is not None:
                for d, size in zip(i.shape, np.shape(value), strict=False):
                    if not isinstance(d, int):
                        check_size_against(size, f"input {i.name}", str(d))
    try:
        return runner.run(inputs)
    except BackendError as e:
        raise UsageError(str(e)) from None
    except Exception as e:  # onnxruntime's own errors: a token id out of range, a too-long sequence
        message = str(e).strip()
        if limit is not None and "bfc_arena" in message:
            raise UsageError(f"{runner_name(onnx_model)} needs more memory than the {show_bytes(limit)} it may use "
                             "(--max-memory BYTES raises it, up to the memory available)") from None
        raise UsageError(f"onnxruntime failed: {message}") from None


def _token_bounds(metadata: Mapping[str, str]) -> dict[str, int]:
    """The table sizes a compiled model records for its token inputs (model_metadata). A file from anyone
    may record anything there: what is not an object of names to whole numbers ≥ 1 is refused."""
    recorded = metadata.get("token_bounds")
    if not recorded:
        return {}
    try:
        bounds = loads_json(recorded)
    except (ValueError, RecursionError):
        bounds = None
    if not isinstance(bounds, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in bounds.values()):
        raise UsageError("the model's token_bounds metadata is not an object of input names to table sizes "
                         "(whole numbers ≥ 1); it was not written by pseudoformer, or was changed since")
    return bounds


def runner_name(model: Any) -> str:
    return str(model) if isinstance(model, (str, os.PathLike)) else "the model"


def run_memory(model_bytes: int, asked: int | None = None) -> int:
    """The memory a model file may use when it runs: `asked` (--max-memory), else its weights twice over
    (a copy onnxruntime may make) and RUN_MEMORY for what it computes; never past the memory available."""
    limit = asked if asked is not None else 2 * model_bytes + RUN_MEMORY
    avail = available_memory()
    if avail is not None and limit > avail:
        if asked is not None:
            raise UsageError(f"--max-memory {asked:,} is more than the {show_bytes(avail)} of memory available")
        limit = avail
    return limit
