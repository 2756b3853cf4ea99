"""Lowering an IR graph to an ONNX ModelProto: one ONNX node (or a few) per IR node.

Run-time sizes stay symbolic: an IR dim named "seq" becomes the ONNX dim_param "seq", and any
size an op needs at run time (a reshape target, a mask extent) is read from a tensor's Shape, so
one file serves every batch size and sequence length.

Names follow the IR so that a model can be read next to the printer's dump: the value of node %n
is v<n>, its ONNX node is "<scope>/<op>_<n>" (helpers get a further "/<OnnxOp>"), and each node's
doc_string holds its source location.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pseudoformer.backends.onnx.attention3d import Heads3D, find_3d_attention
from pseudoformer.backends.onnx.precision import fp32_nodes
from pseudoformer.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import ARITH, COMPARE, LOGICAL, UNARY, Op
from pseudoformer.ir.types import DType, Span, TensorType
from pseudoformer.version import __version__

# The newest opset onnxruntime 1.31 loads (it refuses 27). Nothing here needs more than 20 (Gelu);
# pass opset=21 for files that onnxruntime 1.20, the oldest the package allows, can load.
DEFAULT_OPSET = 26
# Shape(start, end) needs 15, single-axis Softmax 13, Min/Max on every dtype 17.
MIN_OPSET = 17
# onnxruntime 1.31, the version pyproject requires, loads opsets up to 26.
MAX_OPSET = 26
# Weights up to this size are real initializers in the checker's copy of a model, bigger ones typed inputs.
_INLINE_CHECK_BYTES = 1024

_ELEM = {
    DType.float32: TensorProto.FLOAT,
    DType.float16: TensorProto.FLOAT16,
    DType.int64: TensorProto.INT64,
    DType.bool: TensorProto.BOOL,
}
_NUMPY = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.BOOL: np.bool_,
}
_UNARY = {
    Op.NEG: "Neg", Op.EXP: "Exp", Op.LOG: "Log", Op.SQRT: "Sqrt", Op.TANH: "Tanh", Op.ERF: "Erf",
    Op.SIN: "Sin", Op.COS: "Cos", Op.ABS: "Abs", Op.RELU: "Relu",
}
_BINARY = {
    Op.ADD: "Add", Op.SUB: "Sub", Op.MUL: "Mul", Op.DIV: "Div", Op.POW: "Pow", Op.MAX: "Max",
    Op.MIN: "Min", Op.AND: "And", Op.OR: "Or",
    Op.LT: "Less", Op.LE: "LessOrEqual", Op.GT: "Greater", Op.GE: "GreaterOrEqual", Op.EQ: "Equal",
}
_REDUCE = {Op.REDUCE_SUM: "ReduceSum", Op.REDUCE_MAX: "ReduceMax", Op.REDUCE_MEAN: "ReduceMean"}
_RELATION = {"<": "Less", "<=": "LessOrEqual", ">": "Greater", ">=": "GreaterOrEqual", "==": "Equal"}
_LAYOUT = {Op.TRANSPOSE, Op.UNSQUEEZE, Op.SQUEEZE, Op.RESHAPE, Op.SLICE, Op.CONCAT, Op.GATHER}


def to_onnx(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    *,
    opset: int | None = None,
    ir_version: int | None = None,
    dtype: str = "float32",
    metadata: Mapping[str, str] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Lower `graph` with weights `params` (keyed by PARAM name) to an ONNX model.

    `ir_version` defaults to the lowest IR version that can carry `opset` (13 for opset 26): onnx
    1.23 would otherwise stamp IR 14, which onnxruntime 1.31 refuses to load.

    With dtype="float16" the weights are stored in fp16 and the model computes in fp16, except
    reductions, softmaxes and the values only they use, which compute in fp32 (see precision.py).
    Inputs keep their declared types (float inputs stay float32 and are cast inside); float
    outputs are float16.

    The whole model in one ModelProto; lower_model gives it as graph and arrays, which save_model
    writes without ever holding the weights in a protobuf.
    """
    return lower_model(graph, params, opset=opset, ir_version=ir_version, dtype=dtype, metadata=metadata,
                       check=check).to_proto()


def lower_model(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    *,
    opset: int | None = None,
    ir_version: int | None = None,
    dtype: str = "float32",
    metadata: Mapping[str, str] | None = None,
    check: bool = True,
) -> LoweredModel:
    """to_onnx's model as a LoweredModel: the ModelProto without initializers, and the weights."""
    opset = DEFAULT_OPSET if opset is None else opset
    top = min(MAX_OPSET, onnx.defs.onnx_opset_version())
    if not MIN_OPSET <= opset <= top:
        raise BackendError(
            f"opset {opset} is not supported: pick one from {MIN_OPSET} to {top}"
        )
    if dtype not in ("float32", "float16"):
        raise BackendError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
    if ir_version is None:
        ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
    _check_names(graph)
    lowering = _Lowering(graph, opset, half=dtype == "float16")
    weights = lowering.weights(params)
    model = helper.make_model(
        lowering.lower(),
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=ir_version,
        producer_name="pseudoformer",
        producer_version=__version__,
    )
    props = {"pseudoformer_version": __version__, **(metadata or {})}
    helper.set_model_props(model, {str(k): str(v) for k, v in props.items()})
    lowered = LoweredModel(model, weights)
    if check:
        try:
            check_structure(lowered)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            raise BackendError(f"the lowered model fails the ONNX checker (a lowering bug): {e}") from e
    return lowered


class LoweredModel:
    """An ONNX model kept in two parts: `skeleton`, the ModelProto without its initializers (a few
    hundred KB), and `weights`, the initializers' values as numpy arrays, by name, in order.

    Each array is C-contiguous, little-endian and of the dtype the initializer stores, so its
    buffer is the initializer's raw_data byte for byte: save_model writes it to the file as it
    is (backends/onnx/save.py). A 500 MB model then never exists as a protobuf, which would cost
    a copy into the message, and one or two more when it is serialised.
    """

    def __init__(self, skeleton: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> None:
        if len(skeleton.graph.initializer):
            raise ValueError("a LoweredModel's skeleton holds no initializers: they are its weights")
        self.skeleton = skeleton
        self.weights: dict[str, np.ndarray] = {}
        for name, arr in weights.items():
            if not arr.flags.c_contiguous or arr.dtype.str[0] not in "<|":  # raw_data is little-endian
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


def _fill_tensor(t: onnx.TensorProto, name: str, arr: np.ndarray) -> None:
    _fill_header(t, name, arr)
    t.raw_data = arr.tobytes()


def _value_info(name: str, elem: int, t: TensorType) -> onnx.ValueInfoProto:
    # Symbolic dims become dim_params named like the IR dims, which is what makes one file serve
    # every batch size and sequence length.
    return helper.make_tensor_value_info(name, elem, [d if isinstance(d, str) else int(d) for d in t.shape])


def _free_prefix(prefix: str, taken: set[str]) -> str:
    while any(re.fullmatch(re.escape(prefix) + r"\d+(\.\d+)?", name) for name in taken):
        prefix += "_"
    return prefix


def _present_concats(graph: Graph, opset: int) -> set[int]:
    """ids of concat(past, new) nodes on the sequence axis of a 4-D attention's k or v that nothing
    but attention k/v operands and graph outputs reads: the Attention op makes them itself."""
    if opset < 23:
        return set()
    users: dict[int, list[tuple[Node, int]]] = {}
    for n in graph.nodes():
        for i, s in enumerate(n.src):
            users.setdefault(id(s), []).append((n, i))
    found = set()
    for n in graph.nodes():
        if n.op is not Op.ATTENTION or n.src[1].type.rank != 4:
            continue
        pair = n.src[1:3]
        if all(c.op is Op.CONCAT and len(c.src) == 2 and c.attrs["axis"] % 4 == 2
               and [(u, i) for u, i in users.get(id(c), [])] == [(n, j)]
               for j, c in enumerate(pair, start=1)):
            found.update(id(c) for c in pair)
    return found


def _check_names(graph: Graph) -> None:
    inputs = [n.attrs["name"] for n in graph.inputs]
    params = {p.attrs["name"] for p in graph.params()}
    clash = [name for name, _ in graph.outputs if name in inputs or name in params]
    clash += [name for name in inputs if name in params]
    if clash:
        # ONNX names each value once, so an output cannot share a name with an input or weight.
        raise BackendError(f"names used twice among inputs, outputs and parameters: {', '.join(clash)}")


class _Lowering:
    def __init__(self, graph: Graph, opset: int, *, half: bool) -> None:
        self.graph = graph
        self.opset = opset
        self.half = half
        self.wide = fp32_nodes(graph) if half else set()
        self.nodes: list[onnx.NodeProto] = []
        self.vals: dict[int, tuple[str, int]] = {}  # IR node id -> (ONNX value, its elem type)
        self.casts: dict[tuple[str, int], str] = {}
        self.consts: dict[tuple, str] = {}
        self.shape_of: dict[tuple[str, int], str] = {}
        # Types onnx's shape inference cannot work out alone (3-D Attention after a Slice): from the IR.
        self.value_info: list[onnx.ValueInfoProto] = []
        self.params: dict[str, tuple[str, int]] = {}
        self.names: set[str] = set()
        self.span: Span | None = None
        self.base = ""
        self.out = ""
        self.k = 0
        # Internal values are v<n> (n as in the printer's %n) and c<n> for constants; a graph
        # name that looks like one pushes the prefixes aside rather than clash with it.
        taken = {n.attrs["name"] for n in graph.nodes() if n.op in (Op.INPUT, Op.PARAM)}
        taken |= {name for name, _ in graph.outputs}
        self.v, self.c = _free_prefix("v", taken), _free_prefix("c", taken)
        # K/V caches: concat(past, new) feeding only attention (and outputs) becomes the Attention
        # op's past_key/past_value inputs and present outputs, which ORT fills in one pass.
        self.present = _present_concats(graph, opset)
        self.output_of: dict[int, str] = {}
        for name, n in graph.outputs:
            self.output_of.setdefault(id(n), name)
        # Head-batched attention in the op's 3-D form, without the transposes around it.
        self.heads3d, self.skip3d = find_3d_attention(graph, self.present, self.output_of) if opset >= 23 else ({}, set())

    # ---- the graph

    def lower(self) -> onnx.GraphProto:
        inputs = [_value_info(n.attrs["name"], _ELEM[n.dtype], n.type) for n in self.graph.inputs]
        for i, n in enumerate(self.graph.nodes()):
            self.base = f"{n.scope}/{n.op.value}_{i}" if n.scope else f"{n.op.value}_{i}"
            self.out, self.k, self.span = f"{self.v}{i}", 0, n.span
            if id(n) in self.present:  # made by the attention that reads it, as its present output
                # named as the graph output it is, if it is one: no Identity copy of the cache
                self.vals[id(n)] = (self.output_of.get(id(n), self.out), self._compute_elem(n))
                continue
            if id(n) in self.skip3d:  # a head split or merge a 3-D attention makes unnecessary, or its output
                continue
            self.vals[id(n)] = self._lower_node(n)
        outputs = []
        self.span = None
        for name, n in self.graph.outputs:
            self.base, self.out = f"outputs/{name}", name
            elem = self._model_elem(n.dtype)
            if self.vals[id(n)] == (name, elem):
                pass  # already computed under its output name (a present key/value)
            elif n.op is Op.CONST or self.vals[id(n)][1] == elem:
                self._emit("Identity", [self._get(n, elem)], out=name)
            else:
                self._emit("Cast", [self._get(n)], out=name, to=elem)
            outputs.append(_value_info(name, elem, n.type))
        return helper.make_graph(
            self.nodes, str(self.graph.meta.get("entry", "pseudoformer")), inputs, outputs,
            value_info=self.value_info,
        )

    def weights(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The initializers by PARAM name, in the type they are stored in; call before lower()."""
        out = {}
        missing = [p.attrs["name"] for p in self.graph.params() if p.attrs["name"] not in params]
        if missing:
            raise BackendError(f"no weights given for parameters: {', '.join(missing)}")
        for p in self.graph.params():  # one per distinct name, so tied weights are stored once
            name, t = p.attrs["name"], p.type
            arr = np.asarray(params[name])
            if len(arr.shape) != t.rank or any(
                isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape, strict=True)
            ):
                raise BackendError(f"parameter {name} has shape {arr.shape}, the graph wants {t}")
            elem = self._model_elem(p.dtype)
            # ONNX raw data is little-endian whatever the host.
            out[name] = np.ascontiguousarray(arr, dtype=np.dtype(_NUMPY[elem]).newbyteorder("<"))
            self.params[name] = (name, elem)
        return out

    # ---- emitting

    def _model_elem(self, dtype: DType) -> int:
        """The ONNX type an IR dtype computes in: the model's float for float32 under fp16."""
        return TensorProto.FLOAT16 if self.half and dtype is DType.float32 else _ELEM[dtype]

    def _emit(
        self, op_type: str, inputs: Sequence[str], *, out: str | None = None, node_name: str | None = None, **attrs
    ) -> str:
        final = out == self.out
        if out is None:
            self.k += 1
            out = f"{self.out}.{self.k}"
        name = node_name or (self.base if final else f"{self.base}/{op_type}")
        if name in self.names:
            suffix = 2
            while f"{name}_{suffix}" in self.names:
                suffix += 1
            name = f"{name}_{suffix}"
        self.names.add(name)
        node = helper.make_node(op_type, list(inputs), [out], name=name, **attrs)
        if self.span is not None:
            node.doc_string = str(self.span)
        self.nodes.append(node)
        return out

    def _emit_multi(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs) -> None:
        """A node with several outputs, named by the caller (as the values of several IR nodes)."""
        name = f"{self.base}/{op_type}"
        self.names.add(name)
        node = helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs)
        if self.span is not None:
            node.doc_string = str(self.span)
        self.nodes.append(node)

    def _const(self, value, elem: int, out: str | None = None) -> str:
        arr = np.asarray(value, dtype=_NUMPY[elem])
        key = (elem, arr.shape, arr.tobytes())
        if out is None and key in self.consts:
            return self.consts[key]
        name = out or f"{self.c}{len(self.consts)}"
        node_name = None if out else f"constants/{name}"
        self._emit("Constant", [], out=name, node_name=node_name, value=numpy_helper.from_array(arr, name))
        if out is None:
            self.consts[key] = name
        return name

    def _ints(self, values: Sequence[int]) -> str:
        return self._const(np.asarray(values, dtype=np.int64), TensorProto.INT64)

    def _get(self, n: Node, elem: int | None = None) -> str:
        """The value of IR node `n`, cast to `elem` if given; casts are made once per value and type."""
        value, have = self.vals[id(n)]
        if n.op is Op.CONST:
            return self._const(n.attrs["value"], have if elem is None else elem)
        if elem is None or have == elem:
            return value
        if (value, elem) not in self.casts:
            self.casts[value, elem] = self._emit("Cast", [value], to=elem)
        return self.casts[value, elem]

    def _compute_elem(self, n: Node) -> int:
        return TensorProto.FLOAT if id(n) in self.wide else self._model_elem(n.dtype)

    def _shape_dim(self, value: str, axis: int) -> str:
        """A run-time size as an int64 [1] tensor."""
        if (value, axis) not in self.shape_of:
            self.shape_of[value, axis] = self._emit("Shape", [value], start=axis, end=axis + 1)
        return self.shape_of[value, axis]

    # ---- one IR node

    def _lower_node(self, n: Node) -> tuple[str, int]:
        op, a = n.op, n.attrs
        if op is Op.INPUT:
            return a["name"], _ELEM[n.dtype]
        if op is Op.PARAM:
            return self.params[a["name"]]  # tied weights: every PARAM of a name reads one initializer
        if op is Op.CONST:
            # Emitted where used, in the type the user wants: under fp16 one constant may be
            # needed as fp16 in one place and fp32 in another, and a Cast of it would be waste.
            return "", self._model_elem(n.dtype)
        if op in _LAYOUT:
            return self._lower_layout(n)
        if op in UNARY | ARITH | LOGICAL | COMPARE or op in (Op.NOT, Op.WHERE):
            return self._lower_elementwise(n)
        if op is Op.CAST:
            elem = self._compute_elem(n) if n.dtype.is_float else _ELEM[n.dtype]
            return self._emit("Cast", [self._get(n.src[0])], out=self.out, to=elem), elem
        if op is Op.MATMUL:
            elem = self._model_elem(n.dtype)
            return self._emit("MatMul", [self._get(s, elem) for s in n.src], out=self.out), elem
        if op in _REDUCE:
            return self._lower_reduce(n)
        if op is Op.SOFTMAX:
            elem = self._compute_elem(n)
            return self._emit("Softmax", [self._get(n.src[0], elem)], out=self.out, axis=a["axis"]), elem
        if op is Op.DIM:
            src = n.src[0]
            axis = a["axis"] % src.type.rank
            if isinstance(src.shape[axis], int):  # a static size needs no run-time Shape
                return self._const(src.shape[axis], TensorProto.INT64, out=self.out), TensorProto.INT64
            dim = self._shape_dim(self._get(src), axis)
            return self._emit("Squeeze", [dim, self._ints([0])], out=self.out), TensorProto.INT64
        if op is Op.ARANGE:
            return self._range(self._get(n.src[0]), out=self.out), TensorProto.INT64
        if op is Op.INDEX_MASK:
            rows = self._emit("Unsqueeze", [self._range(self._get(n.src[0])), self._ints([1])])
            cols = self._range(self._get(n.src[1]))
            rel = a["rel"]
            if rel == "!=":
                eq = self._emit("Equal", [rows, cols])
                return self._emit("Not", [eq], out=self.out), TensorProto.BOOL
            return self._emit(_RELATION[rel], [rows, cols], out=self.out), TensorProto.BOOL
        if op is Op.LAYER_NORM:
            return self._lower_layer_norm(n)
        if op is Op.RMS_NORM:
            return self._lower_rms_norm(n)
        if op is Op.ATTENTION:
            return self._lower_attention(n)
        raise BackendError(f"the ONNX backend cannot lower {op.value} (at {n.span or n.scope or '?'})")

    def _lower_layer_norm(self, n: Node) -> tuple[str, int]:
        x, g, b = n.src
        rank = x.type.rank
        axis = n.attrs["axis"] % rank
        elem = self._compute_elem(n)
        xv = self._get(x, elem)
        # LayerNormalization normalises the trailing axes: move ours last and back if it is not.
        perm = [i for i in range(rank) if i != axis] + [axis]
        if axis != rank - 1:
            xv = self._emit("Transpose", [xv], perm=perm)
        y = self._emit("LayerNormalization", [xv, self._get(g, elem), self._get(b, elem)],
                       out=None if axis != rank - 1 else self.out, axis=-1, epsilon=float(n.attrs["eps"]))
        if axis != rank - 1:
            inverse = [perm.index(i) for i in range(rank)]
            y = self._emit("Transpose", [y], out=self.out, perm=inverse)
        return y, elem

    def _lower_rms_norm(self, n: Node) -> tuple[str, int]:
        x, g = n.src
        rank, axis = x.type.rank, n.attrs["axis"] % x.type.rank
        elem = self._compute_elem(n)
        xv, gv = self._get(x, elem), self._get(g, elem)
        eps = float(n.attrs["eps"])
        if self.opset >= 23 and axis == rank - 1:  # RMSNormalization normalises the trailing axes
            return self._emit("RMSNormalization", [xv, gv], out=self.out, axis=-1, epsilon=eps), elem
        # x / √(mean(x²) + ε) ⊙ γ by parts, γ shaped to broadcast along `axis`
        r = self._emit("ReduceMean", [self._emit("Mul", [xv, xv]), self._ints([axis])], keepdims=1)
        den = self._emit("Sqrt", [self._emit("Add", [r, self._const(eps, elem)])])
        shape = [1] * rank
        shape[axis] = -1
        gv = self._emit("Reshape", [gv, self._ints(shape)])
        return self._emit("Mul", [self._emit("Div", [xv, den]), gv], out=self.out), elem

    def _lower_attention(self, n: Node) -> tuple[str, int]:
        elem = self._compute_elem(n)
        if id(n) in self.heads3d:  # its 4-D operands were never made
            return self._attention_3d(n, self.heads3d[id(n)], elem)
        q, k, v = (self._get(s, elem) for s in n.src[:3])
        rank = n.src[0].type.rank
        if self.opset < 23 or rank not in (3, 4):
            return self._attention_by_parts(n, q, k, v, elem)
        sq, sk = n.src[0].type.shape[-2], n.src[1].type.shape[-2]
        cached = id(n.src[1]) in self.present and id(n.src[2]) in self.present
        causal = bool(n.attrs["causal"]) and sq != 1  # one query, bottom-right aligned, sees every key
        if causal and sq != sk and not cached:
            # ONNX's is_causal is top-left aligned without a past input; ours is bottom-right.
            return self._attention_by_parts(n, q, k, v, elem)
        if rank == 3:  # one head: the op's 4-D form is [batch, heads, seq, dim]
            q, k, v = (self._emit("Unsqueeze", [t, self._ints([1])]) for t in (q, k, v))
        mask = self._attention_mask(n, q) if len(n.src) > 3 else ""
        attrs = {"scale": float(n.attrs["scale"]), "is_causal": int(causal)}
        if elem == TensorProto.FLOAT16:
            attrs["softmax_precision"] = TensorProto.FLOAT  # the softmax is the sensitive part: fp32
        if cached:
            # With past_key given, ONNX aligns is_causal bottom-right, as the IR does.
            (pk, k), (pv, v) = ([self._get(c, elem) for c in s.src] for s in n.src[1:3])
            present = [self.vals[id(s)][0] for s in n.src[1:3]]
            self._emit_multi("Attention", [q, k, v, mask, pk, pv], [self.out, *present], **attrs)
            return self.out, elem
        inputs = [q, k, v] + ([mask] if mask else [])
        out = self._emit("Attention", inputs, out=None if rank == 3 else self.out, **attrs)
        if rank == 3:
            out = self._emit("Squeeze", [out, self._ints([1])], out=self.out)
        return out, elem

    def _attention_3d(self, n: Node, form: Heads3D, elem: int) -> tuple[str, int]:
        """Attention on [batch, seq, H·d] (attention3d.py); its output is the merged heads' value."""
        cached = id(n.src[1]) in self.present and id(n.src[2]) in self.present
        causal = bool(n.attrs["causal"]) and n.src[0].type.shape[-2] != 1
        q, k, v = (self._get(s, elem) for s in (form.q, form.k, form.v))
        known = {i.name for i in self.value_info}
        self.value_info += [_value_info(name, elem, s.type) for name, s in ((q, form.q), (k, form.k), (v, form.v))
                            if name not in known and name not in self.params and name not in self.output_of.values()
                            and s.op is not Op.INPUT]
        mask = self._attention_mask(n, q, seq_axis=1) if len(n.src) > 3 else ""
        attrs = {"scale": float(n.attrs["scale"]), "is_causal": int(causal), "q_num_heads": form.heads,
                 "kv_num_heads": form.heads}
        if elem == TensorProto.FLOAT16:
            attrs["softmax_precision"] = TensorProto.FLOAT
        out = self.output_of.get(id(form.out), self.out)
        if cached:
            pk, pv = (self._get(c.src[0], elem) for c in n.src[1:3])
            present = [self.vals[id(c)][0] for c in n.src[1:3]]
            self._emit_multi("Attention", [q, k, v, mask, pk, pv], [out, *present], **attrs)
        else:
            self._emit_multi("Attention", [q, k, v] + ([mask] if mask else []), [out], **attrs)
        self.vals[id(form.out)] = (out, elem)
        return out, elem

    def _attention_mask(self, n: Node, q: str, seq_axis: int = 2) -> str:
        """The mask as the Attention op takes it: 4-D like the op's inputs, its query axis spelled out
        (ORT does not broadcast it; a padding mask is [batch, 1, 1, s_k])."""
        mask, m = self._get(n.src[3]), n.src[3].type
        if n.src[0].type.rank == 3 and m.rank == 3:  # [batch, s_q, s_k] of one head → [batch, 1, s_q, s_k]
            mask = self._emit("Unsqueeze", [mask, self._ints([1])])
        if m.shape[-2] != n.src[0].type.shape[-2]:  # q's positions are axis 2 of [b, H, s_q, d], 1 of [b, s_q, H·d]
            shape = self._emit("Concat", [self._ints([1, 1]), self._shape_dim(q, seq_axis), self._ints([1])], axis=0)
            mask = self._emit("Expand", [mask, shape])
        return mask

    def _attention_by_parts(self, n: Node, q: str, k: str, v: str, elem: int) -> tuple[str, int]:
        """softmax(q kᵀ·scale + mask) v with plain ops, for opsets before Attention (23)."""
        rank = n.src[0].type.rank
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        s = self._emit("MatMul", [q, self._emit("Transpose", [k], perm=perm)])
        s = self._emit("Mul", [s, self._const(n.attrs["scale"], elem)])
        keep = self._get(n.src[3]) if len(n.src) > 3 else None
        if n.attrs["causal"]:  # bottom-right aligned: query i is key position i + s_k − s_q
            sq = self._emit("Squeeze", [self._shape_dim(q, rank - 2), self._ints([0])])
            sk = self._emit("Squeeze", [self._shape_dim(k, rank - 2), self._ints([0])])
            first = self._emit("Sub", [sk, sq])
            rows = self._emit("Unsqueeze", [self._range(sk, start=first), self._ints([1])])
            causal = self._emit("GreaterOrEqual", [rows, self._range(sk)])
            keep = causal if keep is None else self._emit("And", [keep, causal])
        if keep is not None:
            s = self._emit("Where", [keep, s, self._const(-np.inf, elem)])
        p = self._emit("Softmax", [s], axis=-1)
        return self._emit("MatMul", [p, v], out=self.out), elem

    def _range(self, n: str, out: str | None = None, start: str | None = None) -> str:
        zero, one = self._const(0, TensorProto.INT64), self._const(1, TensorProto.INT64)
        return self._emit("Range", [start or zero, n, one], out=out)

    def _lower_elementwise(self, n: Node) -> tuple[str, int]:
        op = n.op
        if op in COMPARE:
            # Operands may have come out of different precisions under fp16: compare in the wider.
            elems = {self.vals[id(s)][1] for s in n.src}
            elem = elems.pop() if len(elems) == 1 else TensorProto.FLOAT
            args = [self._get(s, elem) for s in n.src]
            if op is Op.NE:
                return self._emit("Not", [self._emit("Equal", args)], out=self.out), TensorProto.BOOL
            return self._emit(_BINARY[op], args, out=self.out), TensorProto.BOOL
        elem = self._compute_elem(n)
        if op is Op.WHERE:
            cond, x, y = n.src
            args = [self._get(cond), self._get(x, elem), self._get(y, elem)]
            return self._emit("Where", args, out=self.out), elem
        args = [self._get(s, elem) for s in n.src]
        if op is Op.NOT:
            return self._emit("Not", args, out=self.out), elem
        if op in _UNARY:
            return self._emit(_UNARY[op], args, out=self.out), elem
        if op is Op.GELU:
            return self._gelu(args[0], n.attrs.get("approximate", "none"), elem), elem
        return self._emit(_BINARY[op], args, out=self.out), elem

    def _gelu(self, x: str, approximate: str, elem: int) -> str:
        if approximate not in ("none", "tanh"):
            raise BackendError(f"gelu approximate={approximate!r}: the backend knows 'none' and 'tanh'")
        if self.opset >= 20:
            return self._emit("Gelu", [x], out=self.out, approximate=approximate)
        # Older opsets have no Gelu: the defining formulas.
        def c(v: float) -> str:
            return self._const(v, elem)

        if approximate == "none":
            inner = self._emit("Erf", [self._emit("Mul", [x, c(1 / np.sqrt(2))])])
        else:
            cube = self._emit("Mul", [self._emit("Mul", [x, x]), x])
            poly = self._emit("Add", [x, self._emit("Mul", [cube, c(0.044715)])])
            inner = self._emit("Tanh", [self._emit("Mul", [poly, c(np.sqrt(2 / np.pi))])])
        half_x = self._emit("Mul", [x, c(0.5)])
        return self._emit("Mul", [half_x, self._emit("Add", [inner, c(1.0)])], out=self.out)

    def _lower_reduce(self, n: Node) -> tuple[str, int]:
        elem = self._compute_elem(n)
        x = self._get(n.src[0], elem)
        axes = sorted(ax % n.src[0].type.rank for ax in n.attrs["axes"])
        keep = int(bool(n.attrs.get("keepdims", False)))
        op_type = _REDUCE[n.op]
        if not axes:  # "reduce nothing" to the IR, but "reduce everything" to ONNX
            return self._emit("Identity", [x], out=self.out), elem
        if op_type != "ReduceSum" and self.opset < 18:  # axes became an input in opset 18
            return self._emit(op_type, [x], out=self.out, axes=axes, keepdims=keep), elem
        return self._emit(op_type, [x, self._ints(axes)], out=self.out, keepdims=keep), elem

    def _lower_layout(self, n: Node) -> tuple[str, int]:
        op, a = n.op, n.attrs
        if id(n) in self.wide:
            elem = TensorProto.FLOAT
        elif op is Op.CONCAT:
            elems = {self.vals[id(s)][1] for s in n.src}
            elem = elems.pop() if len(elems) == 1 else self._model_elem(n.dtype)
        else:  # moving data around changes no values, so keep whatever precision it has
            elem = self.vals[id(n.src[0])][1]
        if op is Op.CONCAT:
            return self._emit("Concat", [self._get(s, elem) for s in n.src], out=self.out, axis=a["axis"]), elem
        x = self._get(n.src[0], elem)
        if op is Op.TRANSPOSE:
            return self._emit("Transpose", [x], out=self.out, perm=list(a["perm"])), elem
        if op in (Op.UNSQUEEZE, Op.SQUEEZE):
            op_type = "Unsqueeze" if op is Op.UNSQUEEZE else "Squeeze"
            return self._emit(op_type, [x, self._ints(sorted(a["axes"]))], out=self.out), elem
        if op is Op.GATHER:
            return self._emit("Gather", [x, self._get(n.src[1])], out=self.out, axis=a["axis"]), elem
        if op is Op.SLICE:
            start = self._emit("Unsqueeze", [self._get(n.src[1]), self._ints([0])])
            stop = self._emit("Unsqueeze", [self._get(n.src[2]), self._ints([0])])
            axis = a["axis"] % n.src[0].type.rank
            return self._emit("Slice", [x, start, stop, self._ints([axis])], out=self.out), elem
        # Every target dim is known, so allowzero: a 0 means an empty axis, not "copy the input's".
        return self._emit("Reshape", [x, self._target_shape(n, x)], out=self.out, allowzero=1), elem

    def _target_shape(self, n: Node, x: str) -> str:
        """Reshape's shape operand: int dims inline, symbolic dims read off the operand at run time."""
        src = n.src[0].shape
        pieces: list[str | list[int]] = []
        for d in n.attrs["shape"]:
            if isinstance(d, str):
                if d not in src:  # the verifier rejects such graphs; say so rather than guess
                    raise BackendError(f"reshape to {n.type} at {n.span or n.scope or '?'}: "
                                       f"dim {d!r} is not a dim of the operand {n.src[0].type}")
                pieces.append(self._shape_dim(x, src.index(d)))
            elif pieces and isinstance(pieces[-1], list):
                pieces[-1].append(d)
            else:
                pieces.append([d])
        parts = [self._ints(p) if isinstance(p, list) else p for p in pieces]
        return parts[0] if len(parts) == 1 else self._emit("Concat", parts, axis=0)
