"""What a compile is asked for, in one dataclass: which passes run (backends/pipeline.py assembles them
from it) and how the ONNX backend writes the result (backends/onnx/lower.py reads it).

`pseudoformer.compile` and the CLI fill it from their arguments; `to_onnx(graph, weights, **fields)`
takes its fields as keywords.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pseudoformer.passes.quantize import QuantizeOptions


@dataclass(frozen=True)
class CompileOptions:
    """opt_level: the optimisation level run first (0 runs nothing: the graph is taken as given, already
    optimised, as to_onnx takes a derived decoder's). padding_mask: an attention_mask input per token
    input. quantize: how the weight matrices are quantized (None: they are not). dtype: "float32" or
    "float16". contrib_ops: onnxruntime's com.microsoft kernels where they compute the same (the
    onnx-contrib pipeline); the file then runs on onnxruntime only. opset, ir_version: the ONNX opset
    (default backends/onnx/lower.DEFAULT_OPSET) and IR version (default: the lowest that carries it).
    functions: each algorithm call an ONNX local function. metadata: the model's metadata_props.
    check: run onnx's checker on the result. kv_buffers (with contrib_ops, for a derived decode step):
    the name of an int64 [1] input giving the cache's past length, so that the past keys and values
    can be buffers of any greater length that GroupQueryAttention appends to in place.
    lazy_weights: the weights a pass makes (quantized matrices) are LazyTensors, each computed when the
    writer loads it (passes/quantized_params.py), for a compile whose weights are written once.
    fold_weights: what is computed from weights alone (per-head projections stacked and transposed) is
    computed lazily and read as new weights named folded.<i> (passes/fold_constants.py): onnxruntime then
    folds nothing when a session starts, which cost the folded weights' bytes a second time; for files
    nobody reads by the paper's names (generation's)."""

    opt_level: int = 0
    padding_mask: bool = False
    quantize: QuantizeOptions | None = None
    dtype: str = "float32"
    contrib_ops: bool = False
    opset: int | None = None
    ir_version: int | None = None
    functions: bool = False
    metadata: Mapping[str, str] | None = field(default=None, compare=False)
    check: bool = True
    kv_buffers: str | None = None
    lazy_weights: bool = False
    fold_weights: bool = False

    def with_fields(self, given: Mapping[str, Any]) -> CompileOptions:
        """These options with `given` (keyword arguments of to_onnx) set; a name that is no field is a TypeError."""
        unknown = sorted(set(given) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"no compile option {', '.join(unknown)}")
        return replace(self, **given) if given else self
