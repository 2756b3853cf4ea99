"""Lowering an IR graph to an ONNX ModelProto, one lowering per node.

The graph comes prepared by its pipeline of passes (backends/pipeline.py; compile.py runs it): cached
attention fused and heads packed where the opset has the Attention op, what no lowering here accepts
(lowerings/) decomposed, float16 for a float16 model, and onnxruntime's kernels with contrib ops. Each
node is lowered by the lowering registered for its op, through the Emitter (emitter.py); a lowering looks
beyond its node only at the kind of an operand, where docs/architecture.md lists it. The weights stay numpy arrays beside the model (LoweredModel), which save.py
streams into the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from pseudoformer.backends.onnx.calls import plan_calls
from pseudoformer.backends.onnx.emitter import ELEM, NUMPY, Emitter, value_info
from pseudoformer.backends.onnx.functions import DOMAIN, DOMAIN_VERSION, to_functions
from pseudoformer.backends.onnx.lowerings import LOWERINGS
from pseudoformer.backends.options import MAX_OPSET, MIN_OPSET, CompileOptions
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.lazy_tensor import LazyTensor, materialize
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, TensorType
from pseudoformer.version import __version__

# Opset 24: the newest at which onnxruntime (1.32) has a kernel for every op we write. Attention changed
# in opset 25, and for Attention-25 onnxruntime 1.32 has no kernel: it inlines the op's function body
# (~30 nodes: Softmax, Where, Mod, …) instead (tests/backends/test_onnx_runner.py checks the kernel runs).
# Pass an older opset (down to MIN_OPSET) for runtimes older than the 1.31 pyproject asks for: opset=21 for
# onnxruntime 1.20.
DEFAULT_OPSET = 24
# Weights up to this size are real initializers in the checker's copy of a model, bigger ones typed inputs.
_INLINE_CHECK_BYTES = 1024

def lower_prepared(graph: Graph, params: Mapping[str, np.ndarray], options: CompileOptions,
                   sizes: Mapping[str, str] | None = None) -> LoweredModel:
    """`graph`, prepared by its pipeline of passes (backends/onnx/compile.py), lowered node by node to
    a LoweredModel: the ModelProto without initializers, and the weights (`params`, by PARAM name).

    `ir_version` defaults to the lowest IR version that can carry `opset` (12 for opset 24): onnx
    1.23 would otherwise stamp IR 14, which onnxruntime 1.31 refuses to load. `sizes` names the
    run-time dims that are int64 [1] graph inputs rather than read off a tensor's Shape (the cache's
    past length when the cache lives in buffers longer than it: options.kv_buffers).
    """
    opset = checked_opset(options)
    ir_version = options.ir_version
    if ir_version is None:
        ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
    weights = _weights(graph, params)
    proto, local = _lower_graph(graph, opset, weights if options.functions else None, dict(sizes or {}),
                                options.cuda_graph and options.kv_buffers is not None)
    imports = _imports([*proto.node, *(n for f in local for n in f.node)], opset)
    if local:
        imports.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    model = helper.make_model(
        proto,
        opset_imports=imports,
        functions=local,
        ir_version=ir_version,
        producer_name="pseudoformer",
        producer_version=__version__,
    )
    props = {"pseudoformer_version": __version__, **(options.metadata or {})}
    helper.set_model_props(model, {str(k): str(v) for k, v in props.items()})
    lowered = LoweredModel(model, weights)
    if options.check:
        try:
            check_structure(lowered)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise BackendError(f"the lowered model fails the ONNX checker (a lowering bug): {e}") from e
    return lowered


def checked_opset(options: CompileOptions) -> int:
    """The opset the options ask for, once it is known to be one this backend writes (else a BackendError)."""
    opset = DEFAULT_OPSET if options.opset is None else options.opset
    top = min(MAX_OPSET, onnx.defs.onnx_opset_version())
    if not MIN_OPSET <= opset <= top:
        raise BackendError(
            f"opset {opset} is not supported: pick one from {MIN_OPSET} to {top}"
        )
    if options.dtype not in ("float32", "float16"):
        raise BackendError(f"dtype must be 'float32' or 'float16', got {options.dtype!r}")
    if options.kv_buffers is not None and not options.contrib_ops:
        raise BackendError("a cache in buffers needs contrib_ops (onnxruntime's GroupQueryAttention)")
    return opset


class LoweredModel:
    """An ONNX model kept in two parts: `skeleton`, the ModelProto without its initializers (a few
    hundred KB), and `weights`, the initializers' values as numpy arrays, by name, in order (or
    LazyTensors, loaded one at a time when the model is written).

    Each array is C-contiguous, little-endian and of the dtype the initializer stores, so its
    buffer is the initializer's raw_data byte for byte: save_model writes it to the file as it
    is (backends/onnx/save.py). A 500 MB model then never exists as a protobuf, which would cost
    a copy into the message, and one or two more when it is serialised.
    """

    def __init__(self, skeleton: onnx.ModelProto, weights: Mapping[str, np.ndarray | LazyTensor]) -> None:
        if len(skeleton.graph.initializer):
            raise ValueError("a LoweredModel's skeleton holds no initializers: they are its weights")
        self.skeleton = skeleton
        self.weights: dict[str, np.ndarray | LazyTensor] = {}
        for name, arr in weights.items():
            if isinstance(arr, LazyTensor):  # loaded as a C-contiguous array of its dtype
                arr = arr if arr.dtype.str[0] in "<|" else arr.astype(arr.dtype.newbyteorder("<"))
            elif not arr.flags.c_contiguous or arr.dtype.str[0] not in "<|":  # raw_data is little-endian
                raise ValueError(f"weight {name}: need a C-contiguous little-endian array, got {arr.dtype.str}")
            self.weights[name] = arr

    @property
    def nbytes(self) -> int:
        """The weights' bytes."""
        return sum(arr.nbytes for arr in self.weights.values())

    def to_proto(self) -> onnx.ModelProto:
        """The one ModelProto, weights inline."""
        model = onnx.ModelProto()
        model.CopyFrom(self.skeleton)
        # Weights go into the finished model in place: protobuf copies messages by serialising
        # them, which fails past 2 GiB, so make_graph(initializer=...) cannot build a big model.
        for name, arr in self.weights.items():
            _fill_tensor(model.graph.initializer.add(), name, arr)
        return model


def initializer_header(name: str, arr: np.ndarray) -> onnx.TensorProto:
    """The initializer of `arr` without its data: name, type and dims."""
    t = onnx.TensorProto()
    _fill_header(t, name, arr)
    return t


def check_structure(lowered: LoweredModel) -> None:
    """onnx.checker's full check (shape inference included) of everything but the weights' bytes.

    The checker takes a ModelProto by serialising it, so checking the whole model would copy
    every weight twice; it runs instead on a copy of the skeleton in which each large weight is
    a graph input of the initializer's type and shape (small ones stay real initializers, so
    the checker also sees their values). The weights themselves are arrays whose dtype, shape
    and byte length make the initializers by construction; what is left to check is that their
    names are new and their types are ones ONNX stores.
    """
    model = onnx.ModelProto()
    model.CopyFrom(lowered.skeleton)
    g = model.graph
    taken = {v.name for v in g.input} | {v.name for v in g.output}
    for name, arr in lowered.weights.items():
        if name in taken:
            raise onnx.checker.ValidationError(f"initializer {name} is also an input or output of the graph")
        taken.add(name)
        if arr.nbytes <= _INLINE_CHECK_BYTES:
            _fill_tensor(g.initializer.add(), name, arr)
        else:
            elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
            g.input.append(helper.make_tensor_value_info(name, elem, list(arr.shape)))
    onnx.checker.check_model(model, full_check=True)


def _fill_header(t: onnx.TensorProto, name: str, arr: np.ndarray) -> None:
    t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    t.dims.extend(arr.shape)


def _fill_tensor(t: onnx.TensorProto, name: str, arr: np.ndarray | LazyTensor) -> None:
    _fill_header(t, name, arr)
    t.raw_data = materialize(arr).tobytes()


def check_names(graph: Graph) -> None:
    inputs = [n.attrs["name"] for n in graph.inputs]
    params = {p.attrs["name"] for p in graph.params()}
    clash = [name for name, _ in graph.outputs if name in inputs or name in params]
    clash += [name for name in inputs if name in params]
    if clash:
        # ONNX names each value once, so an output cannot share a name with an input or weight.
        raise BackendError(f"names used twice among inputs, outputs and parameters: {', '.join(clash)}")


def _weights(graph: Graph, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The initializers by PARAM name, in the dtype each PARAM has (float16 after the float16 pass)."""
    missing = [p.attrs["name"] for p in graph.params() if p.attrs["name"] not in params]
    if missing:
        raise BackendError(f"no weights given for parameters: {', '.join(missing)}")
    out: dict[str, np.ndarray | LazyTensor] = {}
    for p in graph.params():  # one per distinct name, so tied weights are stored once
        name, t = p.attrs["name"], p.type
        given = params[name]
        arr = given if isinstance(given, LazyTensor) else np.asarray(given)
        if len(arr.shape) != t.rank or any(
            isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape, strict=True)
        ):
            raise BackendError(f"parameter {name} has shape {arr.shape}, the graph wants {t}")
        # ONNX raw data is little-endian whatever the host.
        want = np.dtype(NUMPY[ELEM[t.dtype]]).newbyteorder("<")
        out[name] = arr.astype(want) if isinstance(arr, LazyTensor) else np.ascontiguousarray(arr, dtype=want)
    return out


def _lower_graph(graph: Graph, opset: int, weights: Mapping[str, np.ndarray] | None,
                 sizes: dict[str, str], capture: bool = False) -> tuple[onnx.GraphProto, list[onnx.FunctionProto]]:
    """The graph, and with `weights` (the initializers' names) given, its calls as local functions. `capture`:
    a decode step whose cache is in buffers, written for CUDA graphs (Emitter.capture)."""
    e = Emitter(graph, opset)
    e.capture = capture
    plan = plan_calls(graph) if weights is not None else None
    inputs = [value_info(n.attrs["name"], ELEM[n.dtype], n.type) for n in graph.inputs]
    e.sizes.update(sizes)
    inputs += [value_info(name, TensorProto.INT64, TensorType(DType.int64, (1,))) for name in sizes.values()]
    for i, n in enumerate(graph.nodes()):
        if n.op in (Op.INPUT, Op.PARAM):
            e.vals[id(n)] = n.attrs["name"]  # tied weights: every PARAM of a name reads one initializer
            continue
        if n.op is Op.CONST:
            continue  # made where it is used (Emitter.value)
        lowering = LOWERINGS.get(n.op)
        if lowering is None or not lowering.accepts(n, opset):
            raise BackendError(f"the ONNX backend cannot lower {n.op.value} at opset {opset} "
                               f"(at {n.span or n.scope or '?'})")
        e.start(n, i)
        if plan is not None:
            e.region = plan.of[id(n)]
        e.vals[id(n)] = lowering.fn(e, n)
    outputs = []
    e.span = None
    if plan is not None:
        e.region = plan.root
    for name, n in graph.outputs:
        e.base, e.out = f"outputs/{name}", name
        if e.value(n) != name:  # already computed under its output name, or a copy is needed
            e.emit("Identity", [e.value(n)], out=name)
        outputs.append(value_info(name, ELEM[n.dtype], n.type))
    flat = helper.make_graph(e.nodes, str(graph.meta.get("entry", "pseudoformer")), inputs, outputs,
                             value_info=e.value_info)
    if plan is None or weights is None:
        return flat, []
    types = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape)
             for name, arr in weights.items()]
    # The IR's type of every node's value, for the functions' value_info: onnx's shape inference alone
    # loses symbolic sizes (an embedding's rows sliced to `seq`) that the IR knows.
    known: dict[str, onnx.ValueInfoProto] = {}
    for n in graph.nodes():
        name = e.vals.get(id(n))
        if n.op not in (Op.INPUT, Op.PARAM) and isinstance(name, str) and isinstance(n.type, TensorType):
            known.setdefault(name, value_info(name, ELEM[n.dtype], n.type))
    return to_functions(flat, e.owner, plan, types, list(known.values()), _imports(flat.node, opset))


def _imports(nodes: Sequence[onnx.NodeProto], opset: int) -> list[onnx.OperatorSetIdProto]:
    """The standard opset, and com.microsoft's where a node is one of its ops (quantized weights')."""
    imports = [helper.make_opsetid("", opset)]
    if any(node.domain == "com.microsoft" for node in nodes):
        imports.append(helper.make_opsetid("com.microsoft", 1))
    return imports
