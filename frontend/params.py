"""Parameter declarations → scopes that resolve a name in the body to a weight.

The Parameters section declares leaves (`W_q ∈ ℝ^{…}`), groups (`W_qkv consisting of: …`),
groups of another algorithm's parameters (`W_l : MHAttention`) and families (`For l ∈ [L]: …`).
A leaf's stable name is its path: one `collection.index` per enclosing family (0-based index),
one component per algorithm-typed group, then the leaf's ASCII name without its index scripts;
"consisting of" group labels are not part of it. So in GPT-2, `W^h_q` of head 2 of `W_l` of layer 4
is `layers.3.W.heads.1.W_q`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pseudoformer.frontend.ast import Decl
from pseudoformer.frontend.names import Name, parse_name

COLLECTIONS = {"l": "layers", "h": "heads"}


def collection(var: str) -> str:
    return COLLECTIONS.get(parse_name(var).ascii(), parse_name(var).ascii())


class DuplicateParameter(Exception):
    """Two declarations with one name: they would silently share a weight."""

    def __init__(self, first: Entry, second: Entry) -> None:
        super().__init__(second.decl.name)
        self.first, self.second = first, second


@dataclass
class Entry:
    decl: Decl
    name: Name
    fam_vars: tuple[str, ...]  # declaration's family variables, outermost first
    key: str  # name with family-variable scripts as •
    top: str  # the Parameters-level declaration it belongs to (what a caller binds)
    parent: Entry | None  # the enclosing group entry
    # Path parts from the top declaration down: ("fam", var) | ("group", ascii) | ("leaf", ascii)
    parts: tuple[tuple[str, str], ...] = ()
    members: list[Entry] = field(default_factory=list)

    @property
    def plain_key(self) -> str:
        """The key with index placeholders dropped: how a callee names this member (W^h_q → W_q)."""
        return self.name.key(frozenset(self.fam_vars)).replace("•,", "").replace(",•", "").replace("•", "")


def entries(decls: list[Decl]) -> dict[str, Entry]:
    """Flatten a Parameters section into entries keyed by family-normalised name."""
    out: dict[str, Entry] = {}

    def walk(ds: list[Decl], fam: tuple[str, ...], parts: tuple, top: str | None, parent: Entry | None) -> None:
        for d in ds:
            if d.kind == "family":
                walk(d.members, (*fam, d.var or d.name), (*parts, ("fam", d.var or d.name)), top, parent)
                continue
            name = parse_name(d.name)
            fv = frozenset(fam)
            t = top or d.name
            e = Entry(d, name, fam, name.key(fv), t, parent)
            if d.kind == "group":
                e.parts = parts
                walk(d.members, fam, parts, t, e)
            elif d.kind == "alg_group":
                e.parts = (*parts, ("group", name.ascii(fv)))
            else:
                e.parts = (*parts, ("leaf", name.ascii(fv)))
            if parent is not None:
                parent.members.append(e)
            if e.key in out:
                raise DuplicateParameter(out[e.key], e)
            out[e.key] = e

    walk(decls, (), (), None, None)
    return out


def path(entry: Entry, indices: dict[str, int], prefix: str = "", start_after: Entry | None = None) -> str:
    """The dotted path of `entry` with its family variables at `indices` (1-based, as the paper counts)."""
    parts = entry.parts
    if start_after is not None:
        parts = parts[len(start_after.parts):]
    out = [prefix.rstrip(".")] if prefix else []
    for kind, v in parts:
        if kind == "fam":
            out.append(f"{collection(v)}.{indices[v] - 1}")
        else:
            out.append(v)
    return ".".join(out)


@dataclass
class GroupVal:
    """A group of parameters as a value: what `W_l` or `W^h_qkv` evaluates to, ready to pass to a callee.

    Abstract groups (from `W_l : MHAttention`) have no member declarations of their own: the callee's
    declarations give the members, under `prefix`. Concrete ones (`W^h_qkv consisting of: …`) resolve
    a callee's member name through the caller's declarations (`W_q` → `W^h_q` at the caller's h).
    """

    entry: Entry
    prefix: str
    frame: Any  # the frame that declared it (evaluates member types)
    indices: dict[str, int]
    alg: str | None = None  # abstract: whose parameters
    abstract: bool = False

    def member(self, plain_key: str) -> Entry | None:
        for m in _leaves(self.entry):
            if m.plain_key == plain_key:
                return m
        return None


def _leaves(e: Entry) -> list[Entry]:
    out: list[Entry] = []
    for m in e.members:
        out.append(m)
        if m.decl.kind == "group":
            out.extend(_leaves(m))
    return out


def top_entries(decls: list[Decl]) -> dict[str, Decl]:
    """Parameters-level declarations by name (what a call's `| …` binds positionally)."""
    out: dict[str, Decl] = {}
    for d in decls:
        if d.kind == "family":
            continue
        out[d.name] = d
    return out
