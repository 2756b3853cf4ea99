"""Assemble parsed lines into a Module: algorithms with their sections, nested declarations and body blocks."""

from __future__ import annotations

from lark import Tree

from pseudoformer.base.errors import AlgError, Diagnostics, Pos
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Module, Stmt, Type, Use, is_training
from pseudoformer.frontend.errors import AlgSyntaxError, BadTypeError, LayoutError
from pseudoformer.frontend.layout import Kind, Line, split_lines
from pseudoformer.frontend.parser import parse_line

_SECTIONS = {"Input": "inputs", "Inputs": "inputs", "Output": "output_decls", "Outputs": "output_decls",
             "Parameters": "params", "Hyperparameters": "hyper"}


def parse_module(source: str, path: str) -> tuple[Module, Diagnostics]:
    """Parse a whole file, collecting every syntax and layout error instead of stopping at the first."""
    diags = Diagnostics()
    module = Module(path=path, source=source)
    lines = split_lines(source, path, diags)
    src_lines = source.splitlines()

    def fail(err: AlgError) -> None:
        if err.source_line is None and err.pos is not None and 0 < err.pos.line <= len(src_lines):
            err.source_line = src_lines[err.pos.line - 1]
        diags.add(err)

    current: Algorithm | None = None
    broken_header = False  # the last header did not parse
    section: str | None = None
    # Open declaration containers of the current section, by indentation: (indent, members list).
    decl_stack: list[tuple[int, list[Decl]]] = []
    member_indent: dict[int, int] = {}  # id of a container's members list → indentation of its first member
    body_lines: list[tuple[Line, Tree | None]] = []

    def close_algorithm() -> None:
        if current is not None:
            current.body = _blocks(body_lines, fail)
            body_lines.clear()
            if is_training(current):
                return  # its data and θ need no types: frontend/training.py checks its lines
            for d in current.inputs:
                if d.kind != "typed":  # the elaborator builds an input from its type, so it must have one
                    fail(BadTypeError(f"the input {d.name} needs a type, as in {d.name} ∈ ℝ^{{d_e × ℓ}} or "
                                      f"{d.name} ∈ V*", d.pos))
            for d in _bare(current.params):  # likewise a parameter: its type is its shape
                fail(BadTypeError(f"the parameter {d.name} needs a type, as in {d.name} ∈ ℝ^{{d_e × d_e}}", d.pos))

    for line in lines:
        try:
            tree = parse_line(line, path)
        except AlgError as e:
            fail(e)
            if line.kind is Kind.BODY and current is not None:
                body_lines.append((line, None))  # keeps the line numbering, so no follow-on error
            elif line.kind is Kind.HEADER:
                # The algorithm's own lines follow; each being "outside any algorithm" says nothing new.
                close_algorithm()
                current, broken_header = None, True
            continue
        if line.kind is Kind.USE:
            # The tokens keep their positions, so a missing name or file is reported where it is written.
            items = [item.children for item in tree.children[0].children] if tree.children[0] is not None else None
            file_tok = tree.children[1]
            names = [name for name, local in items if local is None] if items is not None else None
            renames = [(name, local) for name, local in items or () if local is not None]
            module.uses.append(Use(names, str(file_tok)[1:-1], file_tok.pos, renames))
        elif line.kind is Kind.HEADER:
            close_algorithm()
            broken_header = False
            current = _header(tree, line.pos)
            current.module = module
            sig = current.data_args + current.param_args
            twice = sorted({a for a in sig if sig.count(a) > 1})
            if twice:  # the second binding would silently replace the first
                fail(AlgSyntaxError(f"{', '.join(twice)} appear{'s' if len(twice) == 1 else ''} twice in the "
                                    f"signature of {current.name}", line.pos))
            same_label = [a for a in module.algorithms if current.label is not None and a.label == current.label]
            if same_label:  # the number is how `--entry` and `check` tell overloads apart
                fail(LayoutError(f"Algorithm {current.label} is numbered twice in this file (first at line "
                                 f"{same_label[0].pos.line})", line.pos))
            clash = [a for a in module.overloads(current.name)
                     if len(a.data_args) + len(a.param_args) == len(current.data_args) + len(current.param_args)]
            if clash:
                fail(LayoutError(f"algorithm {current.name} is defined twice in this file with the same "
                                 f"number of arguments (first at line {clash[0].pos.line})", line.pos))
            module.add(current)
            section = None
        elif current is None:
            if not broken_header:
                fail(LayoutError("this line is outside any algorithm", line.pos))
        elif line.kind is Kind.SECTION:
            kw = str(tree.children[0].children[0])
            section = _SECTIONS[kw]
            target: list[Decl] = getattr(current, section)
            decls = _decls(tree.children[1])
            target.extend(decls)
            decl_stack = [(line.indent, target)]
            _open_container(decls, line.indent, decl_stack)
        elif line.kind is Kind.CONTINUATION:
            while len(decl_stack) > 1 and line.indent <= decl_stack[-1][0]:
                decl_stack.pop()
            # As in Python, a dedent must come back to a level in use: a line between two levels
            # would otherwise land in the block above and change what its names mean.
            level = member_indent.setdefault(id(decl_stack[-1][1]), line.indent)
            indent = line.indent
            if indent < level:
                fail(LayoutError(f"this line's indentation matches no enclosing block (the declarations "
                                 f"before it are indented {level} spaces)", line.pos))
                indent = level  # read on as if it were aligned, so the lines after it are no errors
            decls = _decls(tree.children[0])
            decl_stack[-1][1].extend(decls)
            _open_container(decls, indent, decl_stack)
        else:
            stmt_remark = None
            if line.remark is not None:
                text, rpos = line.remark
                try:
                    r = parse_line(Line(Kind.BODY, text, rpos, 0), path, start="remark")
                    rtype = next(c for c in r.children if isinstance(c, Type))
                    stmt_remark = (str(r.children[0]), rtype, rpos)
                except AlgError as e:
                    fail(e)
            body_lines.append((line, tree))
            if stmt_remark is not None:
                body_lines[-1] = (line, Tree("remarked", [tree, stmt_remark]))
    close_algorithm()
    return module, diags


def _bare(decls: list[Decl]) -> list[Decl]:
    """Declarations without a type, in groups and families too."""
    return [d for d in decls if d.kind == "bare"] + [b for d in decls for b in _bare(d.members)]


def _open_container(decls: list[Decl], indent: int, stack: list[tuple[int, list[Decl]]]) -> None:
    """A trailing `… consisting of:` or `For l ∈ [L]:` takes the more-indented lines that follow."""
    if not decls:
        return
    last = decls[-1]
    while last.kind == "family" and last.members and last.members[-1].kind == "group" \
            and not last.members[-1].members:
        last = last.members[-1]
    if last.kind in ("group", "family") and not last.members:
        stack.append((indent, last.members))


def _names(ch: list) -> list:
    return [c for c in ch if isinstance(c, str) and getattr(c, "type", "") == "NAME"]


def _sub(ch: list, data: str) -> Tree | None:
    return next((c for c in ch if isinstance(c, Tree) and c.data == data), None)


def _header(tree: Tree, pos: Pos) -> Algorithm:
    ch = tree.children
    label = next((c for c in ch if getattr(c, "type", "") == "LABEL"), None)
    outs, callee, sig = _sub(ch, "name_list"), _sub(ch, "callee_name"), _sub(ch, "sig_args")
    name = str(callee.children[0])
    data = [str(t) for t in sig.children[0].children] if sig.children[0] is not None else []
    params = [str(t) for t in sig.children[1].children] if sig.children[1] is not None else []
    return Algorithm(name=name, label=str(label) if label is not None else None, pos=pos,
                     outputs=[str(t) for t in outs.children], data_args=data, param_args=params)


def _decls(tree: Tree | None) -> list[Decl]:
    if tree is None:
        return []
    out: list[Decl] = [_decl(d) for d in tree.children]
    # `For g ∈ [H_kv]: W^g_k, W^g_v ∈ ℝ^{…}`: the names after the family's first one are its members too.
    i = 0
    while i < len(out) - 1:
        fam = out[i]
        if fam.kind == "family" and fam.members and fam.members[-1].kind == "bare" and out[i + 1].kind in ("bare",
                                                                                                          "typed"):
            fam.members.append(out.pop(i + 1))
            continue
        i += 1
    for fam in out:
        if fam.kind == "family":
            fam.members[:] = _shared_types(fam.members)
    return _shared_types(out)


def _shared_types(out: list[Decl]) -> list[Decl]:
    """`W_q, W_k ∈ ℝ^{…}`: names listed before a typed one share its type (and family variable); likewise
    `W^loc_l, W^str_l : MHAttention`, two groups of one algorithm's parameters."""
    for i in range(len(out) - 2, -1, -1):
        nxt = out[i + 1]
        if out[i].kind == "bare" and nxt.kind == "typed":
            out[i] = Decl("typed", out[i].name, out[i].pos, type=nxt.type, var=nxt.var, range=nxt.range)
        elif out[i].kind == "bare" and nxt.kind == "alg_group":
            out[i] = Decl("alg_group", out[i].name, out[i].pos, alg=nxt.alg)
    return out


def _decl(d: Tree) -> Decl:
    ch = d.children
    names = _names(ch)
    types = [c for c in ch if isinstance(c, Type)]
    pos = _token_pos(names[0])
    if d.data == "bare_decl":
        return Decl("bare", str(names[0]), pos)
    if d.data == "typed_decl":
        var = str(names[1]) if len(names) > 1 else None
        return Decl("typed", str(names[0]), pos, type=types[0], var=var, range=types[1] if len(types) > 1 else None)
    if d.data == "alg_group_decl":
        return Decl("alg_group", str(names[0]), pos, alg=str(names[1]))
    if d.data == "group_decl":
        return Decl("group", str(names[0]), pos)
    if d.data == "derived_decl":
        return Decl("derived", str(names[0]), pos, value=next(c for c in ch if isinstance(c, Expr)))
    if d.data == "dataset_decl":
        # {x_n}_{n=1}^{N_data}: the members (x_n, or z_n and x_n), the index n and the count N_data.
        var, count = names[-2], names[-1]
        members = [Decl("bare", str(t), _token_pos(t)) for t in names[:-2]]
        return Decl("dataset", str(names[0]), pos, var=str(var), members=members,
                    range=Type("index", (Expr("name", (), _token_pos(count), str(count)),), pos=_token_pos(count)))
    if d.data == "family_decl":
        var = names[0]
        fam = Decl("family", str(var), _token_pos(var), var=str(var), range=types[0])
        inner = next((c for c in ch[1:] if isinstance(c, Tree)), None)
        if inner is not None:
            fam.members.append(_decl(inner))
        return fam
    raise AssertionError(d.data)


def _token_pos(tok: object) -> Pos:
    return tok.pos  # type: ignore[attr-defined]  # a parser.Tok


_PUNCT = {"IN", "FOR", "FORALL", "ARROW", "EQUALS", "ELLIPSIS"}


def _stmt(tree: Tree | Expr, line: Line) -> Stmt:
    remark = None
    if isinstance(tree, Tree) and tree.data == "remarked":
        tree, remark = tree.children
    pos = line.pos
    if not isinstance(tree, Tree):
        raise AlgSyntaxError("expected a statement", pos)
    ch = [c for c in tree.children if c is not None and not (isinstance(c, str) and c.type in _PUNCT)]
    k = tree.data
    exprs = [c for c in ch if isinstance(c, Expr)]
    names = _names(ch)
    subs = [c for c in ch if isinstance(c, Tree)]
    if k == "assign":
        return Stmt("assign", pos, line.number, target=ch[0], value=ch[-1], remark=remark)
    if k == "return_":
        return Stmt("return", pos, line.number, name=str(names[0]) if names else None, value=exprs[-1],
                    remark=remark)
    if k in ("for_in", "map_stmt"):
        # `for t ∈ [ℓ] : stmt` on one line is a column map; `For h ∈ [H]:` heads an unrolled block.
        ranges = _ranges(_sub(ch, "for_ranges"))
        inner_tree = next((c for c in subs if c.data != "for_ranges"), None)
        if inner_tree is None:
            if len(ranges) > 1:
                raise AlgSyntaxError("a block loop `For h ∈ [H]:` runs over one index; maps over several indices "
                                     "are one line: for i ∈ [d], t ∈ [ℓ] : …", _token_pos(ranges[1][0]))
            return Stmt("for_in", pos, line.number, name=str(ranges[0][0]), bounds=(ranges[0][1],))
        # `for i ∈ [m], t ∈ [n] : s` is `for i ∈ [m] : for t ∈ [n] : s`: one map per index, outermost first.
        body = _stmt(inner_tree, line)
        for var, bound in reversed(ranges):
            body = Stmt("for_map", pos, line.number, name=str(var), bounds=(bound,), body=[body])
        return body
    if k == "for_range":
        if len(exprs) == 2:  # `for t = 1, …, ℓ do` counts by one, as `for t = 1, 2, …, ℓ do` does
            first = exprs[0]
            exprs = [first, Expr("add", (first, Expr("number", (1,), first.pos, "1")), first.pos), exprs[1]]
        return Stmt("for_range", pos, line.number, name=str(names[0]), bounds=(exprs[0], exprs[1], exprs[2]))
    if k == "forall":
        nl = _sub(ch, "name_list")
        return Stmt("forall", pos, line.number, vars=tuple(str(t) for t in nl.children),
                    body=[_stmt(next(c for c in subs if c is not nl), line)])
    if k == "if_stmt":
        return Stmt("if", pos, line.number, value=exprs[0], body=[_stmt(subs[0], line)])
    if k == "end":
        return Stmt("end", pos, line.number)
    if k == "while_":
        return Stmt("while", pos, line.number, value=exprs[0])
    if k == "random_choice":
        # x̃[t] ← a or b randomly with probability p or q: value is choice(a, b, p, q).
        target = next(c for c in ch if isinstance(c, Tree))
        return Stmt("random", pos, line.number, target=target, value=Expr("choice", tuple(exprs), pos),
                    remark=remark)
    if k == "sample":
        token, dist = names[0], names[1]
        return Stmt("sample", pos, line.number, target=Expr("name", (), _token_pos(token), str(token)),
                    name=str(dist), value=exprs[-1])
    raise AlgSyntaxError(f"unsupported statement ({k})", pos)


def _ranges(tree: Tree) -> list[tuple[object, Expr]]:
    """`i ∈ [d/2], t ∈ [ℓ]` → [(i, d/2), (t, ℓ)]."""
    names = [c for c in tree.children if isinstance(c, str) and c.type == "NAME"]
    bounds = [c for c in tree.children if isinstance(c, Expr)]
    seen: set[str] = set()
    for n in names:
        if str(n) in seen:
            raise AlgSyntaxError(f"the map runs over {n} twice; each index is named once", _token_pos(n))
        seen.add(str(n))
    return list(zip(names, bounds, strict=True))


def _blocks(lines: list[tuple[Line, Tree | None]], fail) -> list[Stmt]:  # noqa: ANN001
    """Nest body lines: `for … do` and `while … do` run to `end`; a `For h ∈ [H]:` header takes the
    deeper-indented lines."""
    root: list[Stmt] = []
    # (statement whose body is open, indent of its line or None for do/end blocks)
    stack: list[tuple[Stmt | None, int | None, list[Stmt]]] = [(None, None, root)]
    expected = 1
    for line, tree in lines:
        if line.number != expected:
            fail(LayoutError(f"line numbers count up from 1 as in the paper: expected {expected}, found {line.number}",
                             Pos(line.pos.file, line.pos.line, max(1, line.pos.col - len(str(line.number)) - line.indent))))
        expected = (line.number or expected) + 1
        # Close indentation blocks this line is not inside.
        while stack[-1][1] is not None and line.indent <= stack[-1][1]:
            stack.pop()
        if tree is None:  # a line that did not parse, already reported
            if line.text.rstrip().endswith(" do"):  # still opens a block, so its `end` is no second error
                stack.append((Stmt("for_range", line.pos, line.number), None, []))
            continue
        try:
            stmt = _stmt(tree, line)
        except AlgError as e:
            fail(e)
            continue
        if stmt.kind == "end":
            while stack[-1][1] is not None:
                stack.pop()
            if stack[-1][0] is None:
                fail(LayoutError("`end` without an open `for … do` or `while … do`", line.pos))
            else:
                stack.pop()
            continue
        stack[-1][2].append(stmt)
        if stmt.kind in ("for_range", "while"):
            stack.append((stmt, None, stmt.body))
        elif stmt.kind == "for_in" and not stmt.body:
            stack.append((stmt, line.indent, stmt.body))
    for stmt, indent, _ in stack[1:]:
        if indent is None and stmt is not None:
            fail(LayoutError(f"this `{'while' if stmt.kind == 'while' else 'for'} … do` has no `end`", stmt.pos))
    return root
