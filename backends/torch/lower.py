"""Lowering an IR graph to a torch.fx GraphModule, one lowering per node (lowerings/).

The graph comes prepared by its pipeline of passes (compile.py): what no lowering here accepts is decomposed,
float16 for a float16 model. It is traced once: each input is a placeholder, each parameter a `get_attr` of
its nn.Parameter (names.py), each node's lowering is called with fx Proxies for its operands' values, and
the torch calls it makes become the fx graph, whose Python code torch.fx writes (`module.code`). So the
module runs as plain torch code: eager, under torch.compile with no graph break, and through torch.export.

Run-time sizes stay symbolic: a dim named "seq" is read off a tensor (`x.size(1)`) where a lowering needs
it, so one module serves every batch size and sequence length. Int64 scalars that are sizes (a DIM, a
constant, arithmetic on them) are kept as Python ints, or as the fx values of sizes, never as tensors, so
that slices, aranges and reshapes take them as torch.export's symbolic sizes; `tensor()` makes a tensor
of one where an op needs it. Tensor constants are non-persistent buffers of the module `constants`: they
follow `.to(device)` and stay out of `state_dict()`, which holds the parameters only.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.backends.torch.dtypes import TORCH_DTYPE
from pseudoformer.backends.torch.guard import require_torch
from pseudoformer.backends.torch.lowerings import LOWERINGS
from pseudoformer.backends.torch.names import check_names, torch_name
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.lazy_tensor import materialize
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op, op_def
from pseudoformer.ir.types import DType, TensorType

torch = require_torch()
from torch import fx, nn  # noqa: E402

_SIZE_OPS = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN, Op.MOD)
# Under fp32_anchors, besides the anchors: the norms, in float32 as CUDA's autocast computes them (a query's
# QK-norm reads a product autocast made bfloat16, with float32 gains)
_FP32_UNDER_AUTOCAST = (Op.LAYER_NORM, Op.RMS_NORM)


class _Tracer(fx.proxy.GraphAppendingTracer):
    """Appends to the lowering's graph; a concrete tensor met as an argument (computed from constants while
    tracing) becomes a constant buffer."""

    def __init__(self, lowering: TorchLowering) -> None:
        super().__init__(lowering.fx)
        self.lowering = lowering

    def create_arg(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor) and not isinstance(a, fx.Proxy):
            return self.lowering.constant(a).node
        return super().create_arg(a)


class TorchLowering:
    """Lowers one graph into `fx` and the module `root`: `vals` holds each IR node's value (a Proxy, a tuple
    of them, or a size), `scalars` the ids of the nodes whose value is a Python number or a size rather than a tensor.

    `fp32_anchors`: the ops the float16 pass keeps in float32 (precision "anchor": reductions, softmaxes,
    scatters), and the norms, read their float operands cast to float32, for a module run under torch.autocast
    (mixed-precision training, compile.to_torch_autocast). Autocast on the CPU casts products to bfloat16 but
    leaves a sum or a log-softmax in whatever type it is given, so without the casts a loss would be summed in
    bfloat16 (8 significant bits) and a scatter-add would meet operands of two types."""

    def __init__(self, graph: Graph, root: nn.Module, fp32_anchors: bool = False) -> None:
        self.graph = graph
        self.root = root
        self.fp32_anchors = fp32_anchors
        self.fx = fx.Graph()
        self.tracer = _Tracer(self)
        self.vals: dict[int, Any] = {}
        self.scalars: set[int] = set()
        self._consts: dict[tuple, fx.Proxy] = {}
        self.shared: dict[Any, Any] = {}  # values lowerings share across nodes (a length read once)
        self._device: fx.Proxy | None = None
        self._device_of: fx.Proxy | None = None

    # ---- values

    def value(self, n: Node) -> Any:
        """n's value as it was lowered: a tensor's Proxy, or a size (int, or the Proxy of one)."""
        return self.vals[id(n)]

    def is_scalar(self, n: Node) -> bool:
        return id(n) in self.scalars

    def tensor(self, n: Node) -> Any:
        """n's value as a tensor (a size or a scalar constant made a 0-d tensor of n's dtype)."""
        v = self.vals[id(n)]
        if id(n) not in self.scalars:
            return v
        if isinstance(v, fx.Proxy):
            return self.call(torch.full, (), v, dtype=TORCH_DTYPE[n.dtype], device=self.device)
        return self.constant(torch.tensor(v, dtype=TORCH_DTYPE[n.dtype]))

    def size(self, n: Node, axis: int) -> Any:
        """The size of n's axis: the IR's int where it is static, else read off the value at run time."""
        d = n.type.shape[axis]
        return d if isinstance(d, int) else self.tensor(n).size(axis % n.type.rank)

    def shape(self, n: Node) -> list[Any]:
        return [self.size(n, i) for i in range(n.type.rank)]

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> fx.Proxy:
        """`fn(*args, **kwargs)` recorded in the graph whatever its arguments are."""
        return self.tracer.create_proxy("call_function", fn, args, kwargs)

    @property
    def device(self) -> fx.Proxy:
        """The device the module's tensors are on, for tensors a lowering makes from sizes."""
        if self._device is None:
            assert self._device_of is not None, "a graph with neither inputs nor parameters makes no tensor"
            self._device = self._device_of.device
        return self._device

    def constant(self, value: Any) -> fx.Proxy:
        """A tensor constant as a buffer of the module `constants`, one per distinct value."""
        t = torch.as_tensor(value).detach()
        key = (str(t.dtype), tuple(t.shape), t.cpu().numpy().tobytes())
        if key not in self._consts:
            holder = self.root.get_submodule("constants")
            name = f"c{len(self._consts)}"
            holder.register_buffer(name, t.clone(), persistent=False)
            self._consts[key] = fx.Proxy(self.fx.get_attr(f"constants.{name}"), self.tracer)
        return self._consts[key]

    # ---- the graph

    def lower(self, params: Mapping[str, Any]) -> fx.GraphModule:
        self.root.add_module("constants", nn.Module())
        names = sorted({p.attrs["name"] for p in self.graph.params()})
        check_names(names)
        for n in self.graph.inputs:
            name = n.attrs["name"]
            if not name.isidentifier() or keyword.iskeyword(name) or name == "self":
                raise BackendError(f"input {name!r} is no Python identifier: forward(**inputs) cannot take it")
            self.vals[id(n)] = fx.Proxy(self.fx.placeholder(name), self.tracer)
            if self._device_of is None:
                self._device_of = self.vals[id(n)]
        nodes = {p.attrs["name"]: p for p in self.graph.params()}
        for name in names:
            self._parameter(nodes[name], params)
        for n in self.graph.nodes():
            if id(n) in self.vals:
                continue
            if n.op is Op.PARAM:
                self.vals[id(n)] = fx.Proxy(self.fx.get_attr(torch_name(n.attrs["name"])), self.tracer)
                if self._device_of is None:
                    self._device_of = self.vals[id(n)]
            elif n.op is Op.CONST:
                self._const(n)
            else:
                lowering = LOWERINGS.get(n.op)
                if lowering is None or not lowering.accepts(n):
                    raise BackendError(f"the torch backend cannot lower {n.op.value} (at {n.span or n.scope or '?'})")
                if n.type.rank == 0 and n.dtype is DType.int64 and n.op in _SIZE_OPS and all(map(self.is_scalar, n.src)):
                    self.scalars.add(id(n))
                self.vals[id(n)] = self._anchored(n, lowering.fn) if self.fp32_anchors else lowering.fn(self, n)
                if isinstance(self.vals[id(n)], int) and n.type.rank == 0:
                    self.scalars.add(id(n))  # a size a lowering computed (a static dim)
        self.fx.output({name: self.tensor(n).node for name, n in self.graph.outputs})
        module = fx.GraphModule(self.root, self.fx, class_name=_class_name(self.graph))
        if self._consts:  # GraphModule copies them as persistent buffers: made non-persistent again
            holder = module.get_submodule("constants")
            for name, buffer in list(holder.named_buffers()):
                holder.register_buffer(name, buffer, persistent=False)
        return module

    def _anchored(self, n: Node, fn: Any) -> Any:
        """fn(self, n), an anchor's float tensor operands read as float32 (a no-op on a float32 tensor)."""
        if op_def(n.op).precision != "anchor" and n.op not in _FP32_UNDER_AUTOCAST:
            return fn(self, n)
        saved: dict[int, Any] = {}
        for s in n.src:
            if id(s) not in saved and id(s) not in self.scalars and isinstance(s.type, TensorType) and \
                    s.dtype.is_float:
                saved[id(s)] = self.vals[id(s)]
                self.vals[id(s)] = saved[id(s)].float()
        try:
            return fn(self, n)
        finally:
            self.vals.update(saved)

    def _parameter(self, node: Node, params: Mapping[str, Any]) -> None:
        name = node.attrs["name"]
        if name not in params:
            raise BackendError(f"no weights given for parameter {name}")
        arr = np.asarray(materialize(params[name]))
        want = node.type
        if arr.ndim != want.rank or any(isinstance(d, int) and d != s for d, s in zip(want.shape, arr.shape, strict=True)):
            raise BackendError(f"parameter {name} has shape {arr.shape}, the graph wants {want}")
        tensor = torch.from_numpy(np.array(arr, dtype=np.dtype(want.dtype.value)))
        *path, leaf = torch_name(name).split(".")
        module = self.root
        for part in path:
            if not hasattr(module, part):
                module.add_module(part, nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, nn.Parameter(tensor, requires_grad=want.dtype.is_float))

    def _const(self, n: Node) -> None:
        value = n.attrs["value"]
        if np.ndim(value) == 0 and n.type.rank == 0:
            # a scalar stays a Python number: a size (int64), or a float an op takes as it is
            self.vals[id(n)] = np.asarray(value, dtype=np.dtype(n.dtype.value)).item()
            self.scalars.add(id(n))
        else:
            self.vals[id(n)] = self.constant(np.asarray(value, dtype=np.dtype(n.dtype.value)))


def _class_name(graph: Graph) -> str:
    entry = "".join(c for c in str(graph.meta.get("entry", "")) if c.isalnum() or c == "_")
    return entry if entry.isidentifier() else "Model"
