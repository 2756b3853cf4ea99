"""The AST: every node carries the source position it was parsed from.

Expressions are one small class with an `op` tag (as tinygrad's UOp), since the elaborator
dispatches on the tag; statements, declarations and algorithms are plain dataclasses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pseudoformer.base.errors import Pos


@dataclass(frozen=True)
class Expr:
    """op is one of: name number inf neg add sub div matmul hadamard juxt power transpose sqrt
    index call column_list row_stack iverson sum compare not and or all range ellipsis bind; and in
    training algorithms only: grad (∇loss(θ)), set ({t ∈ [ℓ] : cond}: var, bound, cond), sum_over_set
    (Σ_{t ∈ T̃} body: var, the set's name, body), choice (a or b randomly with probability p or q)."""

    op: str
    args: tuple[Any, ...]
    pos: Pos
    text: str = ""

    def __repr__(self) -> str:
        inner = ", ".join(repr(a) for a in self.args)
        return f"{self.op}({self.text or inner})" if self.text else f"{self.op}({inner})"


@dataclass(frozen=True)
class Type:
    """kind: real (ℝ^{dims}; also an interval (0, ∞) or (0, 1), a real number), bool ({0,1}^{dims}),
    prob ((0,1)^{dims}), index ([n], star for [n]*), vocab (V, V*, V ≅ [N]), nat (ℕ), dist (Δ(V))."""

    kind: str
    dims: tuple[Expr, ...] = ()
    star: bool = False
    pos: Pos | None = None
    # The open interval of a real written as one, τ ∈ (0, ∞): a config value outside it is refused.
    interval: tuple[float, float] | None = None


@dataclass
class Decl:
    """kind: typed (name ∈ type), bare (a hyperparameter without type: ℕ), derived (name = dims),
    group (name consisting of members), alg_group (name : Algorithm), family (for v ∈ [n]: members),
    dataset ({x_n}_{n=1}^{N_data} or {(z_n, x_n)}_{n=1}^{N_data}: members x_n…, var n, range [N_data])."""

    kind: str
    name: str
    pos: Pos
    type: Type | None = None
    value: Expr | None = None  # derived: the defining size expression
    alg: str | None = None  # alg_group: whose parameters
    var: str | None = None  # family / typed-with-family: the index variable
    range: Type | None = None  # family: the index set
    members: list[Decl] = field(default_factory=list)


@dataclass
class Stmt:
    """kind: assign, return, for_in, for_map, for_range, forall, if, end, while, sample, random.

    sample (`sample a token y from q ∝ p^{1/τ}`): target is the token's name y, name the
    distribution's q, value the expression after ∝. while: value is the condition. random (Algorithm 12's
    `x̃[t] ← a or b randomly with probability p or q`): value is choice(a, b, p, q). An assignment's
    target is a `target` tree, or `fn_target` for a function of the parameters (P(θ) ← …, loss(θ) = …)."""

    kind: str
    pos: Pos
    number: int | None = None
    target: Expr | None = None  # assign: name or indexed name
    value: Expr | None = None  # assign / return: the expression; if: the condition
    name: str | None = None  # return: the output's name; loops: the variable
    vars: tuple[str, ...] = ()  # forall
    bounds: tuple[Expr, ...] = ()  # for_in: (n,), for_range: (first, second, last)
    body: list[Stmt] = field(default_factory=list)
    remark: tuple[str, Type, Pos] | None = None  # [[Name ∈ type]] after the line


@dataclass
class Algorithm:
    name: str
    label: str | None
    pos: Pos
    outputs: list[str]
    data_args: list[str]
    param_args: list[str]
    inputs: list[Decl] = field(default_factory=list)
    output_decls: list[Decl] = field(default_factory=list)
    params: list[Decl] = field(default_factory=list)
    hyper: list[Decl] = field(default_factory=list)
    body: list[Stmt] = field(default_factory=list)
    module: Module | None = None
    # Sequence inputs (V*) of one length, which the graph gives one dimension: a training loss's masked
    # copy x̃_n and its example x_n (frontend/training_loss.py). Others each have a length of their own.
    same_length: tuple[str, ...] = ()
    # The file that defines it under this name by `use Mistral as Phi3` (its body stays in `module`, where it
    # resolves its calls); None: `module` defines it.
    alias_in: Module | None = None


@dataclass
class Use:
    names: list[str] | None  # None: everything the module defines
    path: str
    pos: Pos
    # `use Mistral as Phi3 from "mistral.alg"`: (imported name, the name the using file defines it by), which
    # binds Phi3 alone; `names` holds the names used as they are.
    renames: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Module:
    path: str
    source: str
    uses: list[Use] = field(default_factory=list)
    # In definition order. The paper has two algorithms named Attention (3 and 4); such overloads
    # are told apart by their number of arguments.
    algorithms: list[Algorithm] = field(default_factory=list)

    def add(self, alg: Algorithm) -> None:
        self.algorithms.append(alg)

    def overloads(self, name: str) -> list[Algorithm]:
        return [a for a in self.algorithms if a.name == name]

    def line(self, n: int) -> str:
        lines = self.source.splitlines()
        return lines[n - 1] if 0 < n <= len(lines) else ""


def _statements(stmts: list[Stmt]) -> Iterator[Stmt]:
    for s in stmts:
        yield s
        yield from _statements(s.body)


def is_inference(alg: Algorithm) -> bool:
    """An algorithm that samples is an inference algorithm: generation runs it, not a backend."""
    return any(s.kind == "sample" for s in _statements(alg.body))


def _exprs(x: Any) -> Iterator[Expr]:
    if isinstance(x, Expr):
        yield x
        yield from _exprs(x.args)
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _exprs(y)


def is_training(alg: Algorithm) -> bool:
    """An algorithm that takes a gradient (θ ← θ − η · ∇loss(θ), Algorithms 11–13) is a training
    algorithm: frontend/training.py reduces it to its loss graph and a TrainingPlan."""
    return any(e.op == "grad" for s in _statements(alg.body) for e in _exprs((s.target, s.value)))


def callees(alg: Algorithm) -> set[str]:
    """The names of the algorithms `alg` calls in its body or whose parameters it declares (W_l : MHAttention)."""
    out: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, Expr):
            if x.op == "call":
                out.add(x.text)
            walk(x.args)
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)

    for s in _statements(alg.body):
        walk((s.target, s.value, s.bounds))
    decls = list(alg.params)
    while decls:
        d = decls.pop()
        if d.kind == "alg_group" and d.alg:
            out.add(d.alg)
        decls.extend(d.members)
    return out
