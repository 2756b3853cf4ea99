"""Algorithm calls as ONNX local functions, so that a viewer such as Netron shows the paper's structure.

The model is lowered flat, each ONNX node tagged with the call it belongs to (calls.py); here each
call becomes a node of its caller's graph whose op is a FunctionProto of the "pseudoformer" domain,
nested as the calls nest. A call's inputs are the values its nodes read from outside it: the
caller's values, the graph's inputs and the weights (a FunctionProto holds no initializers, so a
weight is an input of every call that reads it, down to the one whose node reads it). Its outputs
are the values read outside it, and the graph's outputs it computes.

Calls whose bodies are the same up to the names of their values (GPT-2's twelve layers, its
twenty-five layer norms) share one definition, so that a viewer shows one `layers` function
called twelve times, each call with its own weights. A definition is named after what it calls
(`layers`, `MHAttention`, `layer_norm`); where one algorithm's calls differ (at -O2 the layer norm
of GPT-2's last layer is fused, ...), the others are `layer_norm_v2`, ... in order of their first
call. Inside a definition the inputs are named after the weight they take where every call gives
the same weight name there (`W_q` for `layers.3.W.heads.0.W_q`), else x0, x1, ...; outputs are y0,
y1, ... and the other values t0, t1, ...

onnxruntime inlines local functions when it loads a model, so the graph it optimises and runs is
the flat one (benchmarks/README.md measures both).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx
from onnx import helper

from pseudoformer.backends.onnx.calls import Call, CallPlan
from pseudoformer.base.errors import BackendError

DOMAIN = "pseudoformer"
DOMAIN_VERSION = 1


@dataclass
class _Definition:
    key: tuple
    algorithm: str
    nodes: list[onnx.NodeProto]  # renamed: inputs in<k>, outputs y<k>, the rest t<k>
    arity: tuple[int, int]
    first: int  # the walk position of its first call, which orders the names
    callers: list[list[str]] = field(default_factory=list)  # each call's input names
    types: dict[str, list[onnx.TypeProto | None]] = field(default_factory=dict)  # each value's type in each call


def to_functions(flat: onnx.GraphProto, owner: Sequence[Call], plan: CallPlan, weights: Sequence[onnx.ValueInfoProto],
                 known: Sequence[onnx.ValueInfoProto], opset_imports: Sequence[onnx.OperatorSetIdProto],
                 ) -> tuple[onnx.GraphProto, list[onnx.FunctionProto]]:
    """The graph and its functions, from the flat lowering `flat` (no initializers) whose node i is in call `owner[i]`.

    `weights` are the initializers' types, `known` the types of values the IR knows (each IR node's).
    """
    nodes = list(flat.node)
    types = _value_types(flat, weights, known, opset_imports)
    weight_names = {w.name for w in weights}
    named = weight_names | {i.name for i in flat.input}
    calls = plan.root.walk()
    pos = {id(c): k for k, c in enumerate(calls)}
    end = {}  # id(call) → the last walk position of the calls under it: a subtree is pos..end
    for c in reversed(calls):
        end[id(c)] = max([pos[id(c)]] + [end[id(ch)] for ch in c.children])
    own: dict[int, list[int]] = {id(c): [] for c in calls}
    readers: dict[str, list[int]] = {}  # value → walk positions of the calls whose nodes read it
    for i, (node, c) in enumerate(zip(nodes, owner, strict=True)):
        own[id(c)].append(i)
        for name in node.input:
            readers.setdefault(name, []).append(pos[id(c)])
    leaving = {o.name for o in flat.output}
    book: dict[tuple, _Definition] = {}
    call_node: dict[int, tuple[int, onnx.NodeProto]] = {}  # id(call) → (first flat index under it, its node)
    for c in reversed(calls):  # callees first
        body = [(i, nodes[i]) for i in own[id(c)]] + [call_node[id(ch)] for ch in c.children]
        if not body:
            raise BackendError(f"call {c.key} has no nodes (a lowering bug)")
        body = _topological(body, c.key)
        if c is plan.root:
            main = [n for _, n in body]
            functions = _finish(book, opset_imports, named, main)
            visible = {o for n in main for o in n.output}
            return helper.make_graph(main, flat.name, flat.input, flat.output,
                                     value_info=[v for v in flat.value_info if v.name in visible]), functions
        produced = [o for _, n in body for o in n.output if o]
        made = set(produced)
        ins = list(dict.fromkeys(x for _, n in body for x in n.input if x and x not in made))
        ins.sort(key=lambda x: x in weight_names)  # the data first, then the weights, each as first read
        lo, hi = pos[id(c)], end[id(c)]
        outs = [o for o in produced if o in leaving or any(not lo <= r <= hi for r in readers.get(o, ()))]
        op_type = _define(book, c, pos[id(c)], [n for _, n in body], ins, outs, types)
        node = helper.make_node(op_type, ins, outs, name=f"{plan.entry}/{c.key}" if plan.entry else c.key,
                                domain=DOMAIN)
        call_node[id(c)] = (body[0][0], node)
    raise AssertionError("the walk ends at the graph")


def _value_types(flat: onnx.GraphProto, weights: Sequence[onnx.ValueInfoProto], known: Sequence[onnx.ValueInfoProto],
                 opset_imports: Sequence[onnx.OperatorSetIdProto]) -> dict[str, onnx.TypeProto]:
    """Every value's type: onnx's shape inference of the flat graph, from the types `known`."""
    g = onnx.GraphProto()
    g.CopyFrom(flat)
    g.input.extend(weights)
    typed = {v.name for v in (*g.input, *g.output, *g.value_info)}
    g.value_info.extend(v for v in known if v.name not in typed)
    model = helper.make_model(g, opset_imports=opset_imports,
                              ir_version=helper.find_min_ir_version_for([o for o in opset_imports if o.domain == ""]))
    inferred = onnx.shape_inference.infer_shapes(model).graph
    return {v.name: v.type for v in (*inferred.input, *inferred.value_info, *inferred.output)}


def _topological(body: list[tuple[int, onnx.NodeProto]], where: str) -> list[tuple[int, onnx.NodeProto]]:
    """`body` in an order where each node comes after what it reads, otherwise in flat order."""
    producer = {o: k for k, (_, n) in enumerate(body) for o in n.output}
    waiting = [0] * len(body)
    then: list[list[int]] = [[] for _ in body]
    for k, (_, n) in enumerate(body):
        for src in {producer[x] for x in n.input if x in producer and producer[x] != k}:
            waiting[k] += 1
            then[src].append(k)
    ready = [(body[k][0], k) for k in range(len(body)) if not waiting[k]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(body[k])
        for u in then[k]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (body[u][0], u))
    if len(out) != len(body):
        raise BackendError(f"the calls under {where or 'the graph'} feed each other both ways (a lowering bug)")
    return out


def _define(book: dict[tuple, _Definition], c: Call, at: int, body: list[onnx.NodeProto], ins: list[str],
            outs: list[str], types: dict[str, onnx.TypeProto]) -> str:
    """The op type of `c`'s definition, made or found in `book`."""
    rename = {x: f"in{k}" for k, x in enumerate(ins)}
    rename.update({o: f"y{k}" for k, o in enumerate(outs)})
    for n in body:
        for o in n.output:
            if o and o not in rename:
                rename[o] = f"t{len(rename) - len(ins) - len(outs)}"
    # The call's own path is in the call node's name (GPT2/layers.3): the body's names say the rest.
    # A call node is named by its key (layer_norm#2), any other node by its scope.
    prefixes = {True: f"{c.key}/", False: f"{c.scope}/"}
    renamed, key = [], []
    for n in body:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.input[:] = [rename.get(x, x) for x in n.input]
        m.output[:] = [rename.get(x, x) for x in n.output]
        for a in m.attribute:
            if a.name == "value" and a.HasField("t"):
                a.t.name = ""  # a Constant's tensor is named after its output, which differs by call
        anonymous = onnx.NodeProto()
        anonymous.CopyFrom(m)
        anonymous.name = ""
        key.append(anonymous.SerializeToString(deterministic=True))
        prefix = prefixes[m.domain == DOMAIN]
        at = m.name.find(prefix)
        if at >= 0:
            m.name = m.name[at + len(prefix):]
        renamed.append(m)
    k = (len(ins), len(outs), tuple(key))
    if k not in book:
        book[k] = _Definition(k, c.algorithm, renamed, (len(ins), len(outs)), at)
    d = book[k]
    d.first = min(d.first, at)
    d.callers.append(ins)
    for name, new in rename.items():
        d.types.setdefault(new, []).append(types.get(name))
    return _placeholder(d)


def _placeholder(d: _Definition) -> str:
    return f"#{id(d)}"


def _finish(book: dict[tuple, _Definition], opset_imports: Sequence[onnx.OperatorSetIdProto],
            named: set[str], main: list[onnx.NodeProto]) -> list[onnx.FunctionProto]:
    """The FunctionProtos, named; the call nodes' placeholder op types (in them and `main`) replaced by the names."""
    defs = sorted(book.values(), key=lambda d: d.first)
    names: dict[str, str] = {}
    count: dict[str, int] = {}
    for d in defs:
        count[d.algorithm] = count.get(d.algorithm, 0) + 1
        names[_placeholder(d)] = d.algorithm if count[d.algorithm] == 1 else f"{d.algorithm}_v{count[d.algorithm]}"
    for n in main:
        if n.domain == DOMAIN:
            n.op_type = names[n.op_type]
    functions = []
    imports = [*opset_imports, helper.make_opsetid(DOMAIN, DOMAIN_VERSION)]
    for d in book.values():  # made callees first, so each function comes after the ones it calls
        inputs = _input_names(d, named)
        rename = {f"in{k}": name for k, name in enumerate(inputs)}
        for n in d.nodes:
            n.input[:] = [rename.get(x, x) for x in n.input]
            if n.domain == DOMAIN:
                n.op_type = names[n.op_type]
        outputs = [f"y{k}" for k in range(d.arity[1])]
        typed = []
        for name, seen in d.types.items():
            t = _common_type(seen)
            if t is not None:
                typed.append(helper.make_value_info(rename.get(name, name), t))
        functions.append(helper.make_function(DOMAIN, names[_placeholder(d)], inputs, outputs, d.nodes, imports,
                                              value_info=typed))
    return functions


def _common_type(types: list[onnx.TypeProto | None]) -> onnx.TypeProto | None:
    """The tensor type that every call's value has: its dims where all agree, unknown where they differ."""
    if not types or any(t is None or not t.HasField("tensor_type") for t in types):
        return None
    tensors = [t.tensor_type for t in types if t is not None]
    out = onnx.TypeProto()
    out.tensor_type.elem_type = tensors[0].elem_type
    if any(t.elem_type != out.tensor_type.elem_type for t in tensors):
        return None
    if all(t.HasField("shape") for t in tensors) and len({len(t.shape.dim) for t in tensors}) == 1:
        shape = out.tensor_type.shape
        shape.SetInParent()  # rank known, even 0
        for dims in zip(*(t.shape.dim for t in tensors), strict=True):
            d = shape.dim.add()
            values = {x.dim_value if x.HasField("dim_value") else None for x in dims}
            params = {x.dim_param if x.HasField("dim_param") else None for x in dims}
            if len(values) == 1 and None not in values:
                d.dim_value = values.pop()
            elif len(params) == 1 and None not in params and not next(iter(params)).startswith("unk__"):
                d.dim_param = params.pop()  # a named size (batch, seq); onnx's own unk__N name nothing
    return out


def _input_names(d: _Definition, named: set[str]) -> list[str]:
    """Each input's name: where every call passes a weight (or graph input), the shortest dotted suffix
    of its name that all calls share and no other input of the function has (`W_q`, or
    `heads.1.W_q` beside head 0's); else x<k>."""
    taken = {o for n in d.nodes for o in n.output}
    parts: dict[int, list[list[str]]] = {}
    for k in range(d.arity[0]):
        given = [call[k] for call in d.callers]
        if all(x in named for x in given):
            parts[k] = [x.split(".") for x in given]
    length = dict.fromkeys(parts, 1)
    names: dict[int, str] = {}
    while True:
        names = {}
        for k, p in parts.items():
            tail = {tuple(x[-length[k]:]) for x in p}
            if len(tail) == 1 and length[k] <= min(len(x) for x in p):
                name = list(tail.pop())
                if name[0].isdigit() and length[k] < len(p[0]):  # `heads.1.W_q`, not `1.W_q`
                    length[k] += 1
                    break
                names[k] = ".".join(name)
        else:
            clash = {k for k in names if list(names.values()).count(names[k]) > 1}
            if not clash:
                break
            for k in clash:
                length[k] += 1
            continue
    out = []
    for k in range(d.arity[0]):
        name = names.get(k, f"x{k}")
        while name in taken:
            name += "_"
        taken.add(name)
        out.append(name)
    return out
