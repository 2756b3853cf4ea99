"""Reading the IR's text form back: `parse(format_graph(g))` is g again, and prints the same text.

    graph GPT2(x: int64[batch, seq]) -> (P: float32[batch, seq, 11])
      %1 = param "W_e" : float32[8, 11]  # models/gpt2.alg:14  GPT2
      %2 = gather %1, %x {axis=1} : float32[8, batch, seq]
      return P = %2

Pass tests are written with it as TVM's are, Before and Expected programs (tests/passes/ir_text.py).
Value numbers need not be consecutive or start anywhere: they only name values, and a graph is printed
with its own numbering. Attributes are read by the kinds their op declares in the registry (a dtype,
a type, a list of dims, …), and each line's stored type must be the one its op's typing rule infers,
so a hand-written Expected program is checked as it is read.
"""

from __future__ import annotations

import re
from typing import Any

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import IRTypeError, Op, op_def
from pseudoformer.ir.types import DType, Span, TensorType, TupleType

_OPS = {op.value: op for op in Op}
_DTYPES = {d.value: d for d in DType}
_STOP = set(",]}):( ")


class IRParseError(Exception):
    """Text that is not the IR's printed form, with the line and column where reading stopped."""

    def __init__(self, line: int, col: int, message: str, text: str = "") -> None:
        self.line, self.col = line, col
        where = f"line {line}, col {col}: " if line else ""
        caret = f"\n    {text}\n    {' ' * max(col - 1, 0)}^" if text else ""
        super().__init__(f"{where}{message}{caret}")


class _Line:
    """A cursor over one line of text."""

    def __init__(self, text: str, number: int) -> None:
        self.s, self.i, self.number = text, 0, number

    def fail(self, message: str) -> IRParseError:
        return IRParseError(self.number, self.i + 1, message, self.s)

    def spaces(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def peek(self, token: str) -> bool:
        self.spaces()
        return self.s.startswith(token, self.i)

    def take(self, token: str) -> None:
        if not self.peek(token):
            raise self.fail(f"expected {token!r}")
        self.i += len(token)

    def word(self) -> str:
        self.spaces()
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _STOP and not self.s.startswith("[", self.i) \
                and not self.s.startswith("{", self.i) and not self.s.startswith("=", self.i):
            self.i += 1
        if start == self.i:
            raise self.fail("expected a word")
        return self.s[start:self.i]

    def string(self) -> str:
        self.take('"')
        out = []
        while self.i < len(self.s) and self.s[self.i] != '"':
            c = self.s[self.i]
            if c == "\\" and self.i + 1 < len(self.s):
                self.i += 1
                c = {"n": "\n"}.get(self.s[self.i], self.s[self.i])
            out.append(c)
            self.i += 1
        self.take('"')
        return "".join(out)

    def ref(self) -> str:
        self.take("%")
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in ", {}:)":
            self.i += 1
        return self.s[start:self.i]

    def type(self) -> TensorType | TupleType:
        if self.peek("("):
            self.take("(")
            parts = [self.type()]
            while self.peek(","):
                self.take(",")
                parts.append(self.type())
            self.take(")")
            return TupleType(tuple(parts))  # type: ignore[arg-type]
        name = self.word()
        if name not in _DTYPES:
            raise self.fail(f"{name!r} is not a dtype ({', '.join(_DTYPES)})")
        self.take("[")
        end = self.s.find("]", self.i)
        if end < 0:
            raise self.fail("the dims do not end with ']'")
        inside, self.i = self.s[self.i:end], end + 1
        dims = tuple(int(d) if re.fullmatch(r"\d+", d) else d for d in inside.split(", ")) if inside else ()
        return TensorType(_DTYPES[name], dims)

    def value(self) -> Any:
        self.spaces()
        if self.peek('"'):
            return self.string()
        if self.peek("["):
            self.take("[")
            items = []
            while not self.peek("]"):
                items.append(self.value())
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return items
        if self.peek("{"):
            return self.attrs()
        if self.peek("("):
            return self.type()
        start = self.i
        w = self.word()
        if self.s.startswith("[", self.i) and w in _DTYPES:
            self.i = start
            return self.type()
        return _scalar(w)

    def attrs(self) -> dict[str, Any]:
        self.take("{")
        out: dict[str, Any] = {}
        while not self.peek("}"):
            key = self.word()
            self.take("=")
            out[key] = self.value()
            if not self.peek("}"):
                self.take(",")
        self.take("}")
        return out


def _scalar(w: str) -> Any:
    if w in ("true", "false"):
        return w == "true"
    if w in _DTYPES:
        return _DTYPES[w]
    if re.fullmatch(r"-?\d+", w):
        return int(w)
    try:
        return float(w)  # 0.5, 1e-05, inf, -inf, nan
    except ValueError:
        return w


def _location(text: str) -> tuple[Span | None, str]:
    """`file:line  scope`, `file:line` or `scope`, as printer.location writes them."""
    first, _, rest = text.partition("  ")
    m = re.fullmatch(r"(.*):(\d+)", first)
    if m:
        return Span(m.group(1), int(m.group(2)), 1), rest
    return None, text


def _split_comment(s: str) -> tuple[str, str]:
    """The line without its trailing `  # location`, outside string literals."""
    quoted = False
    for i, c in enumerate(s):
        if c == '"' and (i == 0 or s[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and s.startswith("  # ", i):
            return s[:i], s[i + 4:]
    return s, ""


def parse(text: str) -> Graph:
    """The graph `text` prints; IRParseError saying where it is not the printed form, or is ill-typed."""
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    if not lines:
        raise IRParseError(0, 0, "no graph: the text is empty")
    number, head = lines[0]
    inputs, name = _header(_Line(head.strip(), number))
    values: dict[str, Node] = {n.attrs["name"]: n for n in inputs}
    for number, raw in lines[1:-1]:
        body, comment = _split_comment(raw.strip())
        line = _Line(body, number)
        key = line.ref()
        line.take("=")
        values[key] = _node(line, values, comment)
    number, last = lines[-1]
    line = _Line(last.strip(), number)
    line.take("return")
    outputs = []
    while line.i < len(line.s):
        out = line.word()
        line.take("=")
        ref = line.ref()
        if ref not in values:
            raise line.fail(f"%{ref} is not defined")
        outputs.append((out, values[ref]))
        if line.peek(","):
            line.take(",")
        line.spaces()
    return Graph(inputs, outputs, {"entry": name})


def _header(line: _Line) -> tuple[list[Node], str]:
    line.take("graph ")
    start = line.i
    depth = line.s.index("(", start)
    name, line.i = line.s[start:depth], depth
    line.take("(")
    inputs = []
    while not line.peek(")"):
        n = line.word()
        line.take(":")
        inputs.append(Node(Op.INPUT, (), {"name": n, "type": line.type()}))
        if not line.peek(")"):
            line.take(",")
    line.take(")")
    line.take("->")  # the outputs' types are the returned values' own
    return inputs, name


def _node(line: _Line, values: dict[str, Node], comment: str) -> Node:
    op_name = line.word()
    if op_name not in _OPS:
        raise line.fail(f"unknown op {op_name!r}")
    d = op_def(_OPS[op_name])
    attrs: dict[str, Any] = {}
    if d.inline is not None:
        attrs[d.inline] = line.value()
    src = []
    while line.peek("%"):
        ref = line.ref()
        if ref not in values:
            raise line.fail(f"%{ref} is not defined above")
        src.append(values[ref])
        if line.peek(","):
            line.take(",")
    if line.peek("{"):
        for key, v in line.attrs().items():
            attrs[key] = v
    line.take(":")
    t = line.type()
    for key in d.implied:  # what the printed type already says
        kind = d.attr(key).kind  # type: ignore[union-attr]
        attrs[key] = t if kind == "type" else t.dtype  # type: ignore[union-attr]
    span, scope = _location(comment) if comment else (None, "")
    try:
        n = Node(d.op, tuple(src), attrs, span=span, scope=scope)
    except (IRTypeError, KeyError, TypeError, ValueError) as e:
        raise line.fail(f"{op_name} is ill-typed: {e}") from None
    if n.type != t:
        raise line.fail(f"{op_name} has type {n.type}, not the {t} written")
    return n
