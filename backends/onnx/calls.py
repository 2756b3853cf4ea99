"""Which algorithm call each node of a graph belongs to, as a tree of calls the ONNX functions follow.

A node belongs to the call recorded in its scope, after the passes too: a fused node carries the
scope the fusion gave it, and after head batching the heads' projections are one matmul of
MHAttention, so at -O2 a head's call keeps only what is still its own (the transposes of its
weights). Calls are told apart as the viewer tells them (ir/scopes.py): by the connected
components, within a scope, of the nodes that compute on the model's inputs, split where a path
would leave a call and come back. A node computed from weights, constants and sizes alone touches
no input, so it cannot say which call of its scope it belongs to; it joins the call of a node that
reads it, where that call is in the node's own scope, else a call of its scope under the reader's
nearest call.

The entry algorithm is the graph itself (its calls are the graph's function calls). A call that
only calls one other (`heads.0`, a loop iteration that calls Attention) is that call. A call is one
node in its caller's graph, so the calls under one caller must not feed each other both ways; the
split above sees only the data, so a size read across calls (a `dim` of one call's value that
another computes with) could still tie two calls in a knot. Then the call of the two with fewer
nodes is dissolved into its caller: its nodes are the caller's, its own calls the caller's calls.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import networkx as nx

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.scopes import assign_groups, scope_of, split_scope

# Lowered where they are used (constants) or named by the graph (inputs, weights): no call owns them.
_UNOWNED = (Op.INPUT, Op.PARAM, Op.CONST)


@dataclass(eq=False)
class Call:
    key: str  # "layers.3/layer_norm#2", below the entry algorithm; "" for the graph itself
    parent: Call | None
    children: list[Call] = field(default_factory=list)

    @property
    def scope(self) -> str:
        """The key without call numbers: "layers.3/layer_norm"."""
        return "/".join(scope_of(s) for s in split_scope(self.key))

    @property
    def algorithm(self) -> str:
        """What is called, without the loop index or call number: "layer_norm", "layers", "heads"."""
        return scope_of(self.key.rsplit("/", 1)[-1]).split(".", 1)[0]

    def walk(self) -> list[Call]:
        """This call and every call under it, callers first."""
        out, todo = [], [self]
        while todo:
            c = todo.pop()
            out.append(c)
            todo.extend(reversed(c.children))
        return out


@dataclass
class CallPlan:
    root: Call  # the entry algorithm: the model's graph
    of: dict[int, Call]  # id(node) → the call it belongs to, for every node but inputs, weights and constants
    entry: str  # the entry algorithm's scope segment, which the keys leave out

    def calls(self) -> list[Call]:
        return self.root.walk()[1:]


def plan_calls(graph: Graph) -> CallPlan:
    nodes = [n for n in graph.nodes() if n.op not in _UNOWNED]
    entry = str(graph.meta.get("entry", ""))
    keys = _keys(graph, nodes)
    root = Call("", None)
    by_key: dict[str, Call] = {"": root}
    of: dict[int, Call] = {}
    for n in nodes:
        segments = split_scope(keys[id(n)])
        if segments and scope_of(segments[0]) == entry:
            segments = segments[1:]
        of[id(n)] = _call(by_key, segments)
    _untangle(root, nodes, of)
    _skip_wrappers(root, of)
    return CallPlan(root, of, entry)


def _keys(graph: Graph, nodes: list[Node]) -> dict[int, str]:
    """id(node) → its call's key, the entry algorithm's segment included."""
    live = {id(n) for n in graph.inputs}
    for n in nodes:
        # A size reads a shape, not data: what is computed from sizes belongs to no call by data.
        if n.op is not Op.DIM and any(id(s) in live for s in n.src):
            live.add(id(n))
    items = [id(n) for n in nodes if id(n) in live]
    by_id = {id(n): n for n in nodes}
    src = {i: [id(s) for s in by_id[i].src] for i in items}
    keys = assign_groups(items, {i: by_id[i].scope for i in items}, src)
    readers: dict[int, list[int]] = {id(n): [] for n in nodes}
    for n in nodes:
        for s in n.src:
            if id(s) in readers:
                readers[id(s)].append(id(n))
    for n in reversed(nodes):  # readers come later, so each has its key by now
        if id(n) not in keys:
            keys[id(n)] = _attach(n.scope, [keys[r] for r in readers[id(n)]])
    return keys


def _attach(scope: str, reader_keys: list[str]) -> str:
    """The key of a node of `scope` that no input reaches: under the reader's calls that share its scope's path."""
    own = split_scope(scope)
    best: list[str] | None = None
    for key in reader_keys:
        theirs = split_scope(key)
        k = 0
        while k < min(len(own), len(theirs)) and scope_of(theirs[k]) == own[k]:
            k += 1
        if best is None or k > len(best):
            best = theirs[:k]
    best = best or []
    return "/".join(best + own[len(best):])


def _call(by_key: dict[str, Call], segments: list[str]) -> Call:
    key = "/".join(segments)
    if key not in by_key:
        parent = _call(by_key, segments[:-1])
        by_key[key] = Call(key, parent)
        parent.children.append(by_key[key])
    return by_key[key]


def _untangle(root: Call, nodes: list[Node], of: dict[int, Call]) -> None:
    """Dissolve calls that feed their siblings or caller and are fed back by them, one per cycle at a time."""
    while True:
        tangled = _tangled(nodes, of)
        if not tangled:
            return
        for c in tangled:
            _dissolve(c, nodes, of)


def _tangled(nodes: list[Node], of: dict[int, Call]) -> list[Call]:
    """One call on each cycle of a caller's graph, where each call under the caller is one node."""
    # In the graph of caller chain[d], a node is itself (an int) if its call is that caller, else chain[d + 1].
    items: dict[Call, dict[int, Call | int]] = {}
    members: dict[Call, list[Node]] = {}
    for n in nodes:
        chain = _chain(of[id(n)])
        for d, caller in enumerate(chain):
            items.setdefault(caller, {})[id(n)] = chain[d + 1] if d + 1 < len(chain) else id(n)
            members.setdefault(caller, []).append(n)
    size = Counter(id(of[id(n)]) for n in nodes)
    out = []
    for caller, item in items.items():
        g = nx.DiGraph()
        for n in members[caller]:
            for s in n.src:
                if id(s) in item and item[id(s)] != item[id(n)]:
                    g.add_edge(item[id(s)], item[id(n)])
        for scc in nx.strongly_connected_components(g):
            # The call with the fewest nodes goes, so that as much of the structure as can be stays.
            calls = sorted((c for c in scc if isinstance(c, Call)), key=lambda c: (size[id(c)], c.key))
            if len(scc) > 1 and calls:
                out.append(calls[0])
    return out


def _chain(call: Call) -> list[Call]:
    """The calls from the graph down to `call`."""
    chain = []
    c: Call | None = call
    while c is not None:
        chain.append(c)
        c = c.parent
    return chain[::-1]


def _skip_wrappers(root: Call, of: dict[int, Call]) -> None:
    """A call that only calls one other (`heads.0`, which calls Attention) is that call."""
    owning = {id(c) for c in of.values()}
    for c in root.walk()[1:]:
        if id(c) not in owning and len(c.children) == 1:
            child, parent = c.children[0], c.parent
            assert parent is not None
            parent.children[parent.children.index(c)] = child
            child.parent = parent


def _dissolve(call: Call, nodes: list[Node], of: dict[int, Call]) -> None:
    parent = call.parent
    assert parent is not None
    for n in nodes:
        if of[id(n)] is call:
            of[id(n)] = parent
    at = parent.children.index(call)
    parent.children[at:at + 1] = call.children
    for c in call.children:
        c.parent = parent
