"""Parse a .alg source into a Module: layout → Lark, one line at a time → AST with positions."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from importlib import resources

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import LarkError, UnexpectedInput

from pseudoformer.base.errors import Pos
from pseudoformer.base.limits import MAX_INT_DIGITS, MAX_NESTING
from pseudoformer.frontend.ast import Expr, Type
from pseudoformer.frontend.errors import AlgSyntaxError, LimitError
from pseudoformer.frontend.layout import Kind, Line
from pseudoformer.frontend.syntax_errors import at_offset, syntax_error

_START = {Kind.HEADER: "header", Kind.SECTION: "section", Kind.CONTINUATION: "decl_line",
          Kind.BODY: "statement", Kind.USE: "use_line"}


class _SplitClosers:
    """`W_e[:, x[t]]` ends in `]]`, which the lexer takes for an Iverson close; split it back into
    two `]` when the innermost open bracket is an index or list bracket. `[[G[j, t] > G[k, t]]]` ends in
    `]]]`, lexed `]]` `]`: the first `]` closes the index and the other two close the bracket."""

    always_accept = ()

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        stack: list[str] = []
        half: Token | None = None  # a `]` that closes an Iverson bracket only with the `]` right after it
        for tok in stream:
            if half is not None:
                if tok.type in ("RSQB", "IVERSON_CLOSE") and tok.value.startswith("]") and \
                        tok.start_pos == half.end_pos:
                    stack.pop()
                    yield Token("IVERSON_CLOSE", "]]", half.start_pos, half.line, half.column,
                                tok.line, tok.column + 1, tok.start_pos + 1)
                    if tok.value == "]]":  # `]]]]`: what is left of it is closed as a bracket of its own
                        tok = Token("RSQB", "]", tok.start_pos + 1, tok.line, tok.column + 1,
                                    tok.end_line, tok.end_column, tok.end_pos)
                    else:
                        half = None
                        continue
                else:
                    yield half
                half = None
            if tok.type == "IVERSON_OPEN":
                stack.append("iv")
            elif tok.type == "LSQB":
                stack.append("[")
            elif tok.type == "RSQB":
                if stack:
                    stack.pop()
            elif tok.type == "IVERSON_CLOSE" and stack and stack[-1] == "[" and tok.value == "]]":
                stack.pop()
                yield Token.new_borrow_pos("RSQB", "]", tok)
                second = Token("RSQB", "]", tok.start_pos + 1, tok.line, tok.column + 1,
                               tok.end_line, tok.end_column, tok.end_pos)
                if stack and stack[-1] == "iv":
                    half = second
                    continue
                if stack:
                    stack.pop()
                yield second
                continue
            elif tok.type == "IVERSON_CLOSE" and stack:
                stack.pop()
            yield tok
        if half is not None:
            yield half


@cache
def grammar() -> Lark:
    text = resources.files("pseudoformer.grammars").joinpath("alg.lark").read_text(encoding="utf-8")
    return Lark(text, parser="lalr", lexer="contextual", start=list({*_START.values(), "remark", "expr"}),
                propagate_positions=True, maybe_placeholders=True, postlex=_SplitClosers())


class Tok(str):
    """A token's text with its terminal type and absolute position in the file."""

    type: str
    pos: Pos

    def __new__(cls, value: str, type_: str, pos: Pos) -> Tok:
        t = super().__new__(cls, value)
        t.type = type_
        t.pos = pos
        return t


def _pos(base: Pos, meta_or_tok: object) -> Pos:
    if isinstance(meta_or_tok, Tok):
        return meta_or_tok.pos
    line = getattr(meta_or_tok, "line", 1) or 1
    col = getattr(meta_or_tok, "column", 1) or 1
    return Pos(base.file, base.line + line - 1, base.col + col - 1 if line == 1 else col)


_LATEX_CALLEE = re.compile(r"\\(?:(?:mathrm|operatorname|textrm|text)\{(\w+)\}|(\w+))")


def _greek(word: str) -> str:
    """`\\varphi(x)` and `\\phi(x)` call the algorithm φ, as `\\varphi` names φ everywhere else; other words stay."""
    size = "CAPITAL" if word[0].isupper() else "SMALL"
    try:
        return unicodedata.lookup(f"GREEK {size} LETTER {word.removeprefix('var').upper().replace('LAMBDA', 'LAMDA')}")
    except KeyError:
        return word


class _ToAst(Transformer):
    """Turn one line's parse tree into AST nodes; positions are offset to the file."""

    def __init__(self, base: Pos) -> None:
        super().__init__()
        self.base = base

    def p(self, x: object) -> Pos:
        return _pos(self.base, x)

    def __default_token__(self, tok: Token) -> Tok:
        text = str(tok)
        if tok.type == "CALLEE" and (m := _LATEX_CALLEE.fullmatch(text)):
            text = m.group(1) or _greek(m.group(2))
        return Tok(text, tok.type, _pos(self.base, tok))

    def __default__(self, data: str, children: list, meta: object) -> object:
        return Tree(data, children, meta)

    # --- expressions
    @v_args(inline=True, meta=True)
    def name(self, meta: object, tok: Token) -> Expr:
        return Expr("name", (), self.p(tok), str(tok))

    @v_args(inline=True, meta=True)
    def number(self, meta: object, tok: Token) -> Expr:
        text = str(tok)
        return Expr("number", (float(text) if any(c in text for c in ".eE") else int(text),), self.p(tok), text)

    @v_args(meta=True)
    def inf(self, meta: object, children: list) -> Expr:
        return Expr("inf", (), self.p(meta))

    def _bin(op: str):  # noqa: N805 - a factory used in the class body
        @v_args(meta=True)
        def f(self: _ToAst, meta: object, ch: list) -> Expr:
            operands = [c for c in ch if isinstance(c, Expr)]
            return Expr(op, tuple(operands), self.p(meta))
        return f

    add = _bin("add")
    sub = _bin("sub")
    div = _bin("div")
    matmul = _bin("matmul")
    hadamard = _bin("hadamard")

    @v_args(meta=True)
    def juxt(self, meta: object, ch: list) -> Expr:
        left, right = (c for c in ch if isinstance(c, Expr))
        if _ends_in_log(left):
            # `log P[x[t+1], t]`, as the paper writes the loss of Algorithms 11–13: the log of the operand
            # that follows, also after a sign or a factor (−log P[…], 2 log P[…], a · log P[…]).
            return _apply_log(left, right)
        return Expr("juxt", (left, right), self.p(meta))

    neg = _bin("neg")
    sqrt = _bin("sqrt")
    transpose = _bin("transpose")
    iverson = _bin("iverson")
    not_ = _bin("not")
    and_ = _bin("and")
    or_ = _bin("or")
    mod = _bin("mod")
    floor = _bin("floor")
    ceil = _bin("ceil")
    grad = _bin("grad")

    @v_args(meta=True)
    def real_power(self, meta: object, ch: list) -> Expr:
        base, exponent = (c for c in ch if isinstance(c, Expr))
        return Expr("real_power", (base, exponent), self.p(meta))

    @v_args(meta=True)
    def power(self, meta: object, ch: list) -> Expr:
        tok = str(ch[1])
        digits = {"²": 2, "³": 3}.get(tok) or int(tok.strip("^{}"))
        return Expr("power", (ch[0], digits), self.p(meta))

    @v_args(meta=True)
    def comparison(self, meta: object, ch: list) -> Expr:
        operands = tuple(c for c in ch if isinstance(c, Expr))
        rels = tuple(_REL[str(c)] for c in ch if isinstance(c, Tok))
        return Expr("compare", (operands, rels), self.p(meta))

    @v_args(meta=True)
    def index(self, meta: object, ch: list) -> Expr:
        return Expr("index", (ch[0], tuple(ch[1])), self.p(meta))

    def indices(self, ch: list) -> list:
        return ch

    @v_args(meta=True)
    def all(self, meta: object, ch: list) -> Expr:
        return Expr("all", (), self.p(meta))

    @v_args(meta=True)
    def range_index(self, meta: object, ch: list) -> Expr:
        return Expr("range", (ch[0], ch[1]), self.p(meta))

    @v_args(meta=True)
    def call(self, meta: object, ch: list) -> Expr:
        callee, args, binds = ch[0], ch[1] or [], ch[2] or []
        return Expr("call", (tuple(args), tuple(binds)), self.p(callee), str(callee))

    def args(self, ch: list) -> list:
        return ch

    def binds(self, ch: list) -> list:
        return ch

    @v_args(meta=True)
    def bind(self, meta: object, ch: list) -> Expr:
        lhs, op, rhs = ch[0], ch[1], ch[2]
        return Expr("bind", (lhs, str(op) if op is not None else None, rhs), self.p(meta))

    def _items(self, ch: list) -> tuple:
        return tuple(Expr("ellipsis", (), self.p(c)) if isinstance(c, Tok) else c for c in ch)

    @v_args(meta=True)
    def column_list(self, meta: object, ch: list) -> Expr:
        return Expr("column_list", self._items(ch[0]), self.p(meta))

    def list_items(self, ch: list) -> list:
        return ch

    @v_args(meta=True)
    def row_stack(self, meta: object, ch: list) -> Expr:
        return Expr("row_stack", self._items(ch), self.p(meta))

    @v_args(meta=True)
    def sum(self, meta: object, ch: list) -> Expr:
        bounds, body = ch[-2], ch[-1]
        if isinstance(bounds, Tree):  # Σ_{t ∈ T̃}: over the members of a set (Algorithm 12's loss)
            var, members = (c for c in bounds.children if isinstance(c, Tok) and c.type == "NAME")
            return Expr("sum_over_set", (str(var), Expr("name", (), members.pos, str(members)), body),
                        self.p(meta))
        return Expr("sum", (*bounds, body), self.p(meta))

    @v_args(meta=True)
    def set_builder(self, meta: object, ch: list) -> Expr:
        """{t ∈ [ℓ] : x̃[t] = mask_token}: (the variable, the range's bound, the condition)."""
        var = next(c for c in ch if isinstance(c, Tok) and c.type == "NAME")
        bound, cond = (c for c in ch if isinstance(c, Expr))
        return Expr("set", (str(var), bound, cond), self.p(meta))

    @v_args(meta=True)
    def extremum(self, meta: object, ch: list) -> Expr:
        word = re.sub(r"\\operatorname\{|\\|\}", "", str(ch[0]))
        return Expr("extremum", (*ch[1], ch[2]), self.p(meta), word)

    @v_args(meta=True)
    def topk(self, meta: object, ch: list) -> Expr:
        """top-k_{j ∈ [E]} v, argtop-k_j v: (variable, bound, body, k's spelling); text "top-k" or "argtop-k"."""
        m = re.fullmatch(r"(?:\\operatorname\{)?(arg)?top-?(\w+|\{\w+\})\}?", str(ch[0]))
        assert m is not None  # the terminal's own pattern
        k = m.group(2).strip("{}")
        return Expr("topk", (*ch[1], ch[2], k), self.p(meta), f"{m.group(1) or ''}top-{k}")

    def over_bounds(self, ch: list) -> tuple:
        if len(ch) == 1 and isinstance(ch[0], Tok) and ch[0].type == "SUB_SIMPLE":
            return (str(ch[0])[1:], None)
        name = next(str(c) for c in ch if isinstance(c, Tok) and c.type == "NAME")
        return (name, next((c for c in ch if isinstance(c, Expr)), None))

    def sum_bounds(self, ch: list) -> tuple:
        toks = [c for c in ch if isinstance(c, Tok) and c.type == "NAME"]
        if len(ch) == 1 and isinstance(ch[0], Tok) and ch[0].type == "SUB_SIMPLE":
            return (str(ch[0])[1:], None, None)
        exprs = [c for c in ch if isinstance(c, Expr)]
        if exprs:
            return (str(toks[0]), exprs[0], exprs[1])
        return (str(toks[0]), None, None)

    # --- sizes and types
    @v_args(inline=True, meta=True)
    def dim_name(self, meta: object, tok: Token) -> Expr:
        return Expr("name", (), self.p(tok), str(tok))

    @v_args(inline=True, meta=True)
    def dim_int(self, meta: object, tok: Token) -> Expr:
        return Expr("number", (int(tok),), self.p(tok), str(tok))

    @v_args(inline=True, meta=True)
    def dim_length(self, meta: object, tok: Token) -> Expr:
        return Expr("call", ((Expr("name", (), self.p(tok), str(tok)),), ()), self.p(tok), "length")

    dim_add = _bin("add")
    dim_sub = _bin("sub")
    dim_mul = _bin("juxt")
    dim_div = _bin("div")

    def dims(self, ch: list) -> tuple:
        return tuple(c for c in ch if isinstance(c, Expr))

    def _type(kind: str):  # noqa: N805
        @v_args(meta=True)
        def f(self: _ToAst, meta: object, ch: list) -> Type:
            dims: tuple = ()
            star = False
            for c in ch:
                if isinstance(c, tuple):
                    dims = c
                elif isinstance(c, Expr):
                    dims = (c,)
                elif isinstance(c, Tok) and c.type == "STAR":
                    star = True
            return Type(kind, dims, star, self.p(meta))
        return f

    real_type = _type("real")
    bool_type = _type("bool")
    index_type = _type("index")
    vocab_type = _type("vocab")
    nat_type = _type("nat")
    dist_type = _type("dist")

    @v_args(meta=True)
    def interval_type(self, meta: object, ch: list) -> Type:
        """(0, 1)^{N_V × ℓ} is a matrix of probabilities; (0, ∞) or (0, 1) alone is one real number."""
        dims = next((c for c in ch if isinstance(c, tuple)), None)
        if dims is not None:
            return Type("prob", dims, False, self.p(meta))
        ends = [float(c) for c in ch if isinstance(c, Tok) and c.type == "INT"]
        # `∞` stays as an INF token, ASCII `inf` is dropped as a keyword: either way one INT is left.
        interval = (ends[0], ends[1] if len(ends) > 1 else float("inf"))
        return Type("real", (), False, self.p(meta), interval=interval)

    def reals(self, ch: list) -> None:
        return None

    @v_args(meta=True)
    def in_(self, meta: object, ch: list) -> Tok:
        return Tok("∈", "IN", self.p(meta))

    @v_args(meta=True)
    def for_(self, meta: object, ch: list) -> Tok:
        return Tok("for", "FOR", self.p(meta))


# Operators whose last operand ends the term, so that `log` written there takes what follows it.
_RIGHT_OPERAND = ("neg", "juxt", "matmul", "hadamard", "div", "mod")


def _is_log(e: Expr) -> bool:
    return e.op == "name" and e.text in ("log", "\\log")


def _ends_in_log(e: Expr) -> bool:
    while e.op in _RIGHT_OPERAND:
        e = e.args[-1]
    return _is_log(e)


def _apply_log(e: Expr, operand: Expr) -> Expr:
    if _is_log(e):
        return Expr("call", ((operand,), ()), e.pos, "log")
    return Expr(e.op, (*e.args[:-1], _apply_log(e.args[-1], operand)), e.pos, e.text)


_REL = {"≤": "<=", "\\leq": "<=", "\\le": "<=", "<=": "<=", "≥": ">=", "\\geq": ">=", "\\ge": ">=",
        ">=": ">=", "<": "<", ">": ">", "≠": "!=", "\\neq": "!=", "\\ne": "!=", "!=": "!=", "==": "==",
        "=": "=="}


def parse_line(line: Line, module_path: str, start: str | None = None) -> Tree | Expr | Type:
    """Parse one logical line; raise AlgSyntaxError (LimitError past the limits) positioned in the file."""
    rule = start or _START[line.kind]
    if m := _LONG_NUMBER.search(line.text):
        raise LimitError(f"a number of {len(m.group()):,} digits; at most {MAX_INT_DIGITS} are read",
                         at_offset(line, m.start()))
    try:
        tree = grammar().parse(line.text, start=rule)
    except UnexpectedInput as e:
        raise syntax_error(e, line) from None
    except LarkError as e:  # pragma: no cover - grammar bugs, reported rather than crashing
        raise AlgSyntaxError(f"cannot parse this line ({type(e).__name__})", line.pos) from None
    _check_nesting(tree, line)
    if (deep := _too_deep_bracket(line.text)) is not None:  # what the tree does not show
        raise LimitError(_TOO_DEEP, at_offset(line, deep))
    return _ToAst(line.pos).transform(tree)


def parse_script(text: str, pos: Pos) -> Expr | None:
    """A name's sub- or superscript read as an expression (the ⌈h/G⌉ of W_k^{⌈h/G⌉}, the −2(i−1)/d of
    b^{−2(i−1)/d}), positioned at its name; None when the script is not one."""
    if len(text) > 200 or _LONG_NUMBER.search(text):
        return None
    try:
        tree = grammar().parse(text, start="expr")
    except LarkError:
        return None
    try:
        _check_nesting(tree, Line(Kind.BODY, text, pos, 0))
    except LimitError:
        return None
    return _ToAst(pos).transform(tree)


_LONG_NUMBER = re.compile(rf"\d{{{MAX_INT_DIGITS + 1},}}")


_TOO_DEEP = (f"this expression is nested more than {MAX_NESTING} levels deep (each parenthesis, function and "
             "operator of a chain is a level); split it over several lines")


def _too_deep_bracket(text: str) -> int | None:
    """The offset of the bracket that opens level MAX_NESTING + 1, if any. The grammar drops parentheses from
    the tree it builds, so ((((x)))) is one level there: they are counted in the text."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
            if depth > MAX_NESTING:
                return i
        elif ch in ")]}":
            depth -= 1
    return None


def _check_nesting(tree: Tree, line: Line) -> None:
    """Refuse a line nested deeper than MAX_NESTING (parentheses, calls, chains of operators), found
    without recursion: turning it into an AST, then a graph, recurses once per level."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise LimitError(_TOO_DEEP, _pos(line.pos, node.meta) if not node.meta.empty else line.pos)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, Tree))
