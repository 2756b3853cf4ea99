"""The pass pipeline of a compile, assembled in this one place from its options (backends/options.py).

    the optimisation level        passes/manager.LEVELS[opt_level]             (-O0: nothing)
    padding                       padding_mask                                   (--padding-mask)
    quantize                      quantize                                       (--quantize int4|int8)
    the backend's preparation     onnx: cache_fusion, packed_heads (opset ≥ 23), decompose,
                                        float16 (--dtype float16)
                                  tvm:  decompose, float16 (--dtype float16), fold_constants
    onnxruntime's kernels         onnx-contrib: group_query_attention_fusion, kv_lengths, skip_norm_fusion
                                                                                 (--contrib-ops)

The first three make the model (`model_passes`): generation derives its decoder from their graph and
then compiles each derived graph with the rest (`backend_passes`). `pseudoformer inspect --passes`
prints the pipeline for given options; `run` runs it once, with one PassContext.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np

from pseudoformer.backends.options import CompileOptions
from pseudoformer.ir import Graph, Node
from pseudoformer.passes.manager import LEVELS, PIPELINES, Pass, PassContext, passes, run_passes

# Both make Attention ops, which ONNX has from opset 23.
ATTENTION_OPSET = 23


def model_passes(options: CompileOptions) -> list[str]:
    """The passes that make the model every backend graph is compiled from."""
    if options.opt_level not in LEVELS:
        raise ValueError(f"no optimisation level -O{options.opt_level} "
                         f"(choose {', '.join(f'-O{k}' for k in LEVELS)})")
    names = list(LEVELS[options.opt_level])
    if options.padding_mask:
        names += PIPELINES["padding"]
    if options.quantize is not None:
        names += PIPELINES["quantize"]
    return names


def backend_passes(options: CompileOptions, backend: str, opset: int) -> list[str]:
    """The passes that prepare a model for `backend` ("onnx" at `opset`, or "tvm")."""
    skip = set() if options.dtype == "float16" else {"float16"}
    if backend == "onnx" and opset < ATTENTION_OPSET:
        skip |= {"cache_fusion", "packed_heads"}
    names = [p for p in PIPELINES[backend] if p not in skip]
    if backend == "onnx" and options.contrib_ops:
        names += PIPELINES["onnx-contrib"]
    return names


def compile_pipeline(options: CompileOptions, backend: str | None, opset: int = 0) -> list[str]:
    """Every pass a compile with these options runs, in order (without a backend: the model's only)."""
    return model_passes(options) + (backend_passes(options, backend, opset) if backend else [])


def run(graph: Graph, names: list[str], *, weights: Mapping[str, np.ndarray] | None = None,
        options: CompileOptions | None = None, accepts: Callable[[Node], bool] | None = None,
        check: bool = False, after: Callable[[Pass, Graph, bool], None] | None = None,
        refusals: list | None = None, fired: Counter[str] | None = None) -> tuple[Graph, dict[str, np.ndarray]]:
    """`graph` after the passes `names`, and the weights as they then are (quantized, in float16, folded);
    `refusals` collects the fusions' refusals, `fired` counts how often each rule rewrote."""
    registry = passes()
    quantize = options.quantize if options is not None else None
    if quantize is None and "quantize" not in names and _block_coded(graph, weights):
        # A checkpoint's own Q4_0/Q8_0 matrices stay block-quantized without --quantize (GGUF files).
        from pseudoformer.passes.quantize import QuantizeOptions

        names, quantize = _with_quantize(names), QuantizeOptions(only_prequantized=True)
    ctx = PassContext(accepts=accepts, weights=dict(weights or {}), quantize=quantize,
                      lazy=options is not None and options.lazy_weights,
                      buffered_cache=options is not None and options.kv_buffers is not None)
    graph = run_passes(graph, [registry[n] for n in names], check=check, after=after, ctx=ctx)
    if refusals is not None:
        refusals.extend(ctx.refusals)
    if fired is not None:
        fired.update(ctx.fired)
    assert ctx.weights is not None
    return graph, ctx.weights


def _block_coded(graph: Graph, weights: Mapping[str, np.ndarray] | None) -> bool:
    """Whether a parameter of the graph arrived block-quantized (ir/block_coded.py)."""
    from pseudoformer.ir.block_coded import codes_of

    return bool(weights) and any(codes_of(weights.get(p.attrs["name"])) is not None for p in graph.params())


def _with_quantize(names: list[str]) -> list[str]:
    """`names` with quantize where model_passes puts it: after the optimisation level's and padding's passes."""
    model = {n for level in LEVELS.values() for n in level} | set(PIPELINES["padding"])
    backend = {n for key, pipeline in PIPELINES.items() if key not in ("padding", "quantize") for n in pipeline}
    at = next((i for i, n in enumerate(names) if n in backend and n not in model), len(names))
    return [*names[:at], "quantize", *names[at:]]
