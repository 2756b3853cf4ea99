"""The one engine that applies a HF mapping table (hf_table.Table): hyperparameters, and a lazy plan.

``hyperparameters(table, config)`` reads config.json. ``plan(table, tensors, config, expected)``
decides, from the tensors' names and shapes only, which of ours each HF tensor gives and how; it
reads no data. Each ``Planned`` tensor knows its shape and dtype and reads itself when asked
(``load``), so a caller can stream a 7B checkpoint one tensor at a time; ``Plan.verify`` runs the
checks that need data (tied copies equal), and ``Plan.problems`` holds the ones that did not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from .config_values import config_float, config_int, where
from .errors import Problem, WeightsError, fmt_shape
from .hf_stack import stack_rules, stacked
from .hf_table import (
    Config,
    Const,
    Context,
    Cut,
    Derived,
    Fill,
    Float,
    Hyper,
    Ignore,
    Int,
    Shape,
    Table,
    Tensor,
    Tie,
    TokenId,
    Transform,
    Transpose,
)
from .tensor_ref import TensorRef


def _token(config: Config, key: str) -> int | None:
    token = config.get(key)
    if isinstance(token, list) and token:  # Llama 3 lists several end tokens; generation stops at one
        token = token[0]
    if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
        return token
    return None


def hyperparameters(table: Table, config: Config) -> dict[str, int | float]:
    """Our hyperparameters from config.json (absent keys take the HF config class's defaults).

    Raises WeightsError naming every setting that describes a variant the model sources do not
    implement, since loading such weights would compute something else without complaint.
    """
    hyper: Hyper = {}
    keys: dict[str, str] = {}
    later = []
    for f in table.config:
        if isinstance(f, Int):
            hyper[f.ours] = config_int(config, f.key, f.default(hyper) if callable(f.default) else f.default)
            keys[f.ours] = f.key
        elif isinstance(f, Float):
            hyper[f.ours] = config_float(config, f.key, f.default)
            keys[f.ours] = f.key
        elif isinstance(f, Const):
            hyper[f.ours] = f.value
        else:
            later.append(f)
    refusals = [r for r in (x.refusal(config, hyper, keys) for x in table.refusals) if r is not None]
    for f in later:
        if not isinstance(f, Derived | TokenId):  # a Reader, which may refuse too
            hyper.update(f(config, hyper, refusals))
    if refusals:
        raise WeightsError(f"{where(config)} describes a {table.label} variant this model does not implement", refusals)
    for f in later:
        if isinstance(f, Derived):
            hyper[f.ours] = f.value(hyper)
        elif isinstance(f, TokenId) and (token := _token(config, f.key)) is not None:
            hyper[f.ours] = token
    return {k: v for k, v in hyper.items() if not k.startswith("_")}


# ---- the plan ------------------------------------------------------------------------------------------


@dataclass
class _LastRead:
    """The HF tensor read last: a projection cut into heads is read once for all its heads as long as
    its pieces are loaded one after another (the plan lists them so), and nothing else is kept."""

    name: str | None = None
    array: np.ndarray | None = None

    def read(self, name: str, ref: TensorRef) -> np.ndarray:
        if name != self.name:
            self.name, self.array = None, None  # release the previous one before reading the next
            self.array, self.name = ref.load(), name
        assert self.array is not None
        return self.array

    def clear(self) -> None:
        self.name, self.array = None, None


@dataclass
class Planned:
    """One of our parameters: which HF tensor it comes from, what it will be, and how to make it."""

    name: str
    origin: str  # the HF tensor's name as stored
    shape: Shape
    dtype: np.dtype
    _read: Callable[[], np.ndarray] = field(repr=False)
    # The transforms from the HF tensor to ours: two of ours from one HF tensor, one of them through a
    # Transpose alone, are transposes of each other (a tied embedding), known without reading either.
    steps: tuple[Transform, ...] = ()

    def load(self) -> np.ndarray:
        """The tensor (possibly a view of the HF tensor it comes from), read now."""
        return self._read()


@dataclass
class Plan:
    tensors: dict[str, Planned] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    checks: list[Callable[[], Problem | None]] = field(default_factory=list)
    _last: _LastRead = field(default_factory=_LastRead, repr=False)

    def verify(self) -> list[Problem]:
        """Every problem: those found from names and shapes, and those of the checks that read data."""
        found = [p for p in (check() for check in self.checks) if p is not None]
        return [*self.problems, *found]

    def stream(self) -> Iterator[tuple[Planned, np.ndarray]]:
        """Each planned tensor with its data, one at a time, in the order that reads each HF tensor once."""
        try:
            for planned in self.tensors.values():
                yield planned, planned.load()
        finally:
            self._last.clear()

    def release(self) -> None:
        """Forget the HF tensor read last (views handed out keep it alive on their own)."""
        self._last.clear()

    @property
    def origin(self) -> dict[str, str]:
        return {name: p.origin for name, p in self.tensors.items()}

    def transposed_twins(self) -> dict[str, str]:
        """{name: the earlier name whose transpose it is}, from the mapping alone: both from one HF
        tensor, one as it is stored and the other through a Transpose (tied_weights.py ties them)."""
        whole: dict[str, list[tuple[str, tuple[Transform, ...]]]] = {}
        for name, p in self.tensors.items():
            if p.steps in ((), (Transpose(),)) and len(p.shape) == 2 and p.shape[0] != p.shape[1]:
                whole.setdefault(p.origin, []).append((name, p.steps))
        twins: dict[str, str] = {}
        for found in whole.values():
            if len(found) == 2 and found[0][1] != found[1][1]:
                twins[found[1][0]] = found[0][0]
        return twins


@cache
def _pattern(hf: str) -> re.Pattern[str]:
    """``h.{l}.ln_{i:1|2}.weight`` -> a regex: ``{l}`` an index, ``{i:1|2}`` one of the spellings,
    ``{x:*}`` anything (the rest of a name)."""
    out, pos = [], 0
    for m in re.finditer(r"\{(\w+)(?::([^}]*))?\}", hf):
        out.append(re.escape(hf[pos:m.start()]))
        spellings = m.group(2)
        alternatives = r"\d+" if not spellings else ".*" if spellings == "*" else \
            "|".join(re.escape(a) for a in spellings.split("|"))
        out.append(f"(?P<{m.group(1)}>{alternatives})")
        pos = m.end()
    out.append(re.escape(hf[pos:]))
    return re.compile("".join(out))


def strip_prefix(tensors: Mapping[str, TensorRef], prefix: str) -> dict[str, tuple[str, TensorRef]]:
    """Names without the task-model prefix (``transformer.``, ``bert.``) -> (stored name, tensor).

    Base-model saves have no prefix and task-model saves do; both are accepted. A file holding a
    tensor under both spellings is ambiguous and refused rather than silently picking one.
    """
    out: dict[str, tuple[str, TensorRef]] = {}
    clashes: list[str] = []
    for stored, ref in tensors.items():
        short = stored.removeprefix(prefix)
        if short in out:
            clashes.append(f"{short}: stored both as {out[short][0]!r} and {stored!r}")
            continue
        out[short] = (stored, ref)
    if clashes:
        raise WeightsError("checkpoint holds the same tensor under two names", sorted(clashes))
    return out


class _Planner:
    def __init__(self, table: Table, ctx: Context, group: str | None) -> None:
        self.table, self.ctx = table, ctx
        self.prefix = f"{group}." if group else ""
        self.plan = Plan()

    def problem(self, name: str, kind: str, detail: str) -> None:
        self.plan.problems.append(Problem(name, kind, detail))

    def put(self, ours: str, stored: str, ref: TensorRef, shape: Shape, steps: tuple[Transform, ...]) -> None:
        name = self.prefix + ours
        if name in self.plan.tensors:
            self.problem(stored, "invalid", f"maps to {name}, which {self.plan.tensors[name].origin} already gave")
            return
        last = self.plan._last

        def read() -> np.ndarray:
            array = last.read(stored, ref)
            for step in steps:
                array = step(array)
            return array

        self.plan.tensors[name] = Planned(name, stored, shape, ref.dtype, read, steps)

    def shaped(self, stored: str, shape: Shape, ndim: int, steps: tuple[Transform, ...]) -> Shape | None:
        """The shape after ``steps``, or None (with the problem recorded) when a step cannot take it."""
        if len(shape) != ndim:
            self.problem(stored, "invalid", f"expected a {ndim}-d tensor, got shape {fmt_shape(shape)}")
            return None
        for step in steps:
            why = step.problem(shape)
            if why is not None:
                self.problem(stored, "invalid", why.format(shape=fmt_shape(shape)))
                return None
            shape = step.shape(shape)
        return shape

    def apply(self, rule: Tensor, m: re.Match[str], stored: str, ref: TensorRef) -> None:
        names = m.groupdict()
        if rule.heads is None:
            shape = self.shaped(stored, ref.shape, rule.ndim, rule.transforms)
            if shape is not None:
                self.put(rule.ours.format(**names), stored, ref, shape, rule.transforms)
            return
        if self.shaped(stored, ref.shape, rule.ndim, ()) is None:
            return
        parts, count = rule.heads.parts, rule.heads.count
        counts = [int(self.ctx.hyper[c]) if isinstance(c, str) else c
                  for c in (count if isinstance(count, tuple) else (count,) * len(parts))]
        axis = rule.heads.axis % len(ref.shape)
        size = ref.shape[axis]
        if size % sum(counts):
            split = f"{len(parts)} x {counts[0]}" if len(set(counts)) == 1 else " + ".join(map(str, counts))
            self.problem(stored, "invalid", f"axis {axis} of shape {fmt_shape(ref.shape)} does not split into "
                         f"{split} heads")
            return
        width = size // sum(counts)
        pieces = [(part, h) for part, heads in zip(parts, counts, strict=True) for h in range(heads)]
        if rule.heads.interleaved:  # head-major: head 0's parts, then head 1's, ...
            pieces.sort(key=lambda piece: piece[1])
        for i, (part, h) in enumerate(pieces):
            steps = (Cut(axis, i * width, (i + 1) * width), *rule.transforms)
            shape = self.shaped(stored, ref.shape, rule.ndim, steps)
            if shape is not None:
                self.put(rule.ours.replace("{part}", part).format(**names, h=h), stored, ref, shape, steps)

    def tie(self, tie: Tie, short: Mapping[str, tuple[str, TensorRef]]) -> None:
        present = [n for n in tie.sources if n in short]
        copies = [n for n in (*present[1:], *tie.copies) if n in short]
        if not present:
            for name in copies:  # a copy of a tensor the file does not hold cannot be the model's
                stored, ref = short[name]
                self.problem(stored, "untied", tie.message.format(shape=fmt_shape(ref.shape), source=tie.sources[0]))
            return
        source, ref = short[present[0]]
        if tie.ours is not None:
            shape = self.shaped(source, ref.shape, tie.ndim, tie.transforms)
            if shape is not None:
                self.put(tie.ours, source, ref, shape, tie.transforms)
        for name in copies:
            self.plan.checks.append(_equal_check(short[name], (source, ref), tie.message))


def _equal_check(copy: tuple[str, TensorRef], source: tuple[str, TensorRef],
                 message: str) -> Callable[[], Problem | None]:
    def check() -> Problem | None:
        (stored, ref), (src_name, src) = copy, source
        if ref.shape == src.shape and np.array_equal(ref.load(), src.load()):
            return None
        return Problem(stored, "untied", message.format(shape=fmt_shape(ref.shape), source=src_name))

    return check


Expected = Mapping[str, tuple[tuple[int, ...], str]]


def plan(table: Table, tensors: Mapping[str, TensorRef], config: Config,
         expected: Expected | Collection[str] = (), *, group: str | None = None) -> Plan:
    """How the checkpoint's ``tensors`` become our parameters; nothing is read.

    ``expected``: the names (with shapes, for ``Fill``) the model declares; rules for parts only some
    entries have ask it. ``group``: the parameter group (``theta`` for ``θ : GPT2``) the checkpoint
    fills; our names then carry it as a prefix. Problems are collected in the plan, not raised.
    """
    prefix = f"{group}." if group else ""
    own = [n.removeprefix(prefix) for n in expected if n.startswith(prefix)]
    ctx = Context(config, hyperparameters(table, config), frozenset(own))
    planner = _Planner(table, ctx, group)
    short = strip_prefix(tensors, table.prefix)
    if stacks := stack_rules(table.tensors, ctx):  # experts' tensors stacked into one first (hf_stack.py)
        short = stacked(stacks, short, ctx, _pattern, planner.problem)
    rules = [r for r in table.tensors if isinstance(r, Tensor) and r.when(ctx)]
    ties = [t for t in table.tensors if isinstance(t, Tie) and t.when(ctx)]
    ignored = [i for i in table.tensors if isinstance(i, Ignore) and i.when(ctx)]
    tied = {n for t in ties for n in (*t.sources, *t.copies)}
    for name, (stored, ref) in short.items():
        matched = name in tied
        for rule in rules:
            m = _pattern(rule.hf).fullmatch(name)
            if m:
                matched = True
                planner.apply(rule, m, stored, ref)
        if not matched and not any(_pattern(i.hf).fullmatch(name) for i in ignored):
            planner.problem(stored, "unknown",
                            f"HF tensor of shape {fmt_shape(ref.shape)} that no {table.kind} model here uses")
    for t in ties:
        planner.tie(t, short)
    shapes = expected if isinstance(expected, Mapping) else {}
    for fill in (f for f in table.tensors if isinstance(f, Fill)):
        name = prefix + fill.ours
        if fill.absent not in short and name in shapes and name not in planner.plan.tensors:
            shape, dtype = tuple(int(d) for d in shapes[name][0]), np.dtype(shapes[name][1])
            planner.plan.tensors[name] = Planned(name, f"{fill.absent} (absent: {fill.value})", shape, dtype,
                                                 lambda s=shape, d=dtype, v=fill.value: np.full(s, v, d))
    return planner.plan
