"""The IR verifier: structural and typing invariants every pass and backend may rely on.

What an op requires (its attributes, their kinds and choices, its arity, its typing rule and any
further checks) is read from its definition in the op registry (ir/ops/). It collects every
problem before raising, because a frontend bug usually breaks several nodes at
once and the first message alone rarely points at the cause. Node numbers in messages are the
printer's, so a message can be read next to `format_graph`.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import IRTypeError, Op, attr_problem, infer_type, op_def
from pseudoformer.ir.printer import location, value_numbers
from pseudoformer.ir.types import DType, TensorType, TupleType


class IRVerifyError(Exception):
    """All the problems found in one graph, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"the graph is malformed ({len(self.problems)} problem(s)):\n{lines}")


def _describe(n: Node, numbers: dict[int, int]) -> str:
    what = n.op.value + (f" {n.attrs['name']!r}" if isinstance(n.attrs.get("name"), str) else "")
    loc = location(n.span, n.scope)
    return f"%{numbers.get(id(n), '?')} ({what}{', ' + loc if loc else ''})"


def _type_problem(t: Any) -> str | None:
    if isinstance(t, TupleType):
        return next((p for p in map(_type_problem, t.types) if p), None)
    if not isinstance(t, TensorType):
        return f"type is {t!r}, not a TensorType"
    if not isinstance(t.dtype, DType):
        return f"dtype {t.dtype!r} is not a DType"
    if not isinstance(t.shape, tuple):
        return f"shape {t.shape!r} is not a tuple"
    for d in t.shape:
        ok = (isinstance(d, int) and not isinstance(d, bool) and d >= 0) or (isinstance(d, str) and d != "")
        if not ok:
            return f"dim {d!r} in {t} is neither a size nor a symbol"
    return None


def _operand_problems(graph: Graph) -> list[str]:
    """Operands that are not Nodes would make every later walk crash, so find them first."""
    problems: list[str] = []
    seen: set[int] = set()
    stack: list[Any] = [*graph.inputs, *(n for _, n in graph.outputs)]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if not isinstance(n, Node):
            problems.append(f"{n!r} is used as a node but is not a Node")
            continue
        stack.extend(n.src)
    return problems


def _cycle_problems(nodes: list[Node], numbers: dict[int, int]) -> list[str]:
    g = nx.DiGraph()
    g.add_nodes_from(numbers[id(n)] for n in nodes)
    g.add_edges_from((numbers[id(s)], numbers[id(n)]) for n in nodes for s in n.src)
    if nx.is_directed_acyclic_graph(g):
        return []
    cycle = nx.find_cycle(g)
    return ["cycle through " + " -> ".join(f"%{u}" for u, _ in cycle) + f" -> %{cycle[0][0]}"]


def _node_problems(n: Node) -> list[str]:
    """Everything wrong with one node in isolation: attrs, arity, type, and the op's own checks."""
    bad_type = _type_problem(n.type)
    if bad_type:
        return [bad_type]
    d = op_def(n.op)
    missing = [a.name for a in d.attrs if a.required and a.name not in n.attrs]
    if missing:
        return [f"missing attribute(s) {', '.join(missing)}"]
    if not d.accepts_arity(len(n.src)):
        return [f"takes {d.describe_arity()} operand(s), has {len(n.src)}"]
    problems = [p for a in d.attrs if a.name in n.attrs and (p := attr_problem(n.op, a, n.attrs[a.name]))]
    if problems:
        return problems
    try:
        inferred = infer_type(n.op, [s.type for s in n.src], n.attrs)
    except IRTypeError as e:
        return [f"ill-typed: {e}"]
    except Exception as e:  # malformed attrs (a perm that is not a list, ...) surface as anything
        return [f"ill-typed: {type(e).__name__}: {e}"]
    if inferred != n.type:
        problems.append(f"stored type {n.type} differs from the inferred type {inferred}")
    if d.check is not None:
        problems += d.check(n)
    return problems


def _duplicates(names: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    dups: list[Any] = []
    for x in names:
        if x in seen and x not in dups:
            dups.append(x)
        seen.add(x)
    return dups


def _overwrite_problems(graph: Graph, nodes: list[Node], numbers: dict[int, int]) -> list[str]:
    """An operand an op may write over (OpDef.overwrites: a cache buffer appended to in place) must be a graph
    input that nothing else reads and no output returns, or a backend that writes in place would change a value
    something still reads."""
    writers = [n for n in nodes if op_def(n.op).overwrites]
    if not writers:
        return []
    consumers = graph.consumers()
    returned = {id(n) for _, n in graph.outputs}
    problems = []
    for n in writers:
        for i in op_def(n.op).overwrites:
            if i >= len(n.src):
                continue  # the arity problem is reported already
            s = n.src[i]
            readers = consumers.slots(s)
            if s.op is not Op.INPUT or id(s) in returned or len(readers) != 1:
                problems.append(f"{_describe(n, numbers)}: operand {i} ({_describe(s, numbers)}) is written over, so "
                                "it must be a graph input that nothing else reads or returns")
    return problems


def verify(graph: Graph) -> None:
    """Raise IRVerifyError listing every broken invariant of `graph`; return None if it is well formed."""
    problems = _operand_problems(graph)
    if problems:
        raise IRVerifyError(problems)
    nodes = graph.nodes()
    numbers = value_numbers(nodes)

    declared = {id(n) for n in graph.inputs}
    for i, n in enumerate(graph.inputs):
        if n.op is not Op.INPUT:
            problems.append(f"graph input #{i} is {_describe(n, numbers)}, not an input node")
    in_names = [n.attrs.get("name") for n in graph.inputs]
    problems += [f"input name {x!r} is declared twice" for x in _duplicates(in_names)]
    problems += [f"output name {x!r} is declared twice" for x in _duplicates([m for m, _ in graph.outputs])]
    problems += _cycle_problems(nodes, numbers)

    param_types: dict[str, TensorType] = {}
    for n in nodes:
        problems += [f"{_describe(n, numbers)}: {p}" for p in _node_problems(n)]
        if n.op is Op.INPUT and id(n) not in declared:
            problems.append(f"{_describe(n, numbers)}: input node is not among the graph's inputs")
        if n.op is Op.PARAM and isinstance(n.attrs.get("name"), str):
            first = param_types.setdefault(n.attrs["name"], n.type)
            if first != n.type:
                problems.append(f"{_describe(n, numbers)}: param {n.attrs['name']!r} has type {n.type} "
                                f"here and {first} elsewhere")
    problems += _overwrite_problems(graph, nodes, numbers)
    # A weight named like an input would shadow or be shadowed by it in every backend's name space.
    problems += [f"name {x!r} is both an input and a param" for x in in_names if x in param_types]
    if problems:
        raise IRVerifyError(problems)
