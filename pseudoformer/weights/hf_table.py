"""What a HF mapping table is made of: config fields, refusals, and per-tensor rules.

A family (GPT-2, BERT, Llama, ...) is one ``Table``: data, not code. ``hf_engine`` reads any table:
it turns config.json into our hyperparameters (refusing the settings the model does not compute,
each with its reason) and plans, tensor by tensor, how the checkpoint's tensors become our
parameters. A tensor rule says which HF name (a pattern, ``h.{l}.attn.c_proj.weight``) gives which of
ours (``layers.{l}.W.W_o``), and the transforms on the way (``Transpose``, rows taken or dropped,
a cut into heads). Each transform knows the shape it gives from the shape it gets, so the whole
plan, and every mismatch, is known from the file's header before any tensor is read.

Settings a table cannot say as fields (RoPE's scaling, Mistral's window) are ``Reader``s: small
functions in hf_config_readers.py, shared by every family that has the setting.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .config_values import config_bool

Config = Mapping[str, object]
Hyper = dict[str, int | float]
Shape = tuple[int, ...]


# ---- config.json -> hyperparameters --------------------------------------------------------------------


@dataclass(frozen=True)
class Int:
    """Our hyperparameter ``ours`` is the positive integer at ``key`` (``default`` when absent or null).

    A default may be computed from the fields read before it (GPT-2's d_mlp = 4 d_e). An ``ours``
    starting with ``_`` is read and checked but not a hyperparameter (BART's decoder head count,
    compared with the encoder's).
    """

    ours: str
    key: str
    default: int | Callable[[Hyper], int]


@dataclass(frozen=True)
class Float:
    """A positive number at ``key``."""

    ours: str
    key: str
    default: float


@dataclass(frozen=True)
class Const:
    """A hyperparameter the config has no setting for (BART's layer-norm ε)."""

    ours: str
    value: int | float


@dataclass(frozen=True)
class Derived:
    """A hyperparameter computed from others once the refusals passed (d_attn = d_e / H)."""

    ours: str
    value: Callable[[Hyper], int | float]


def head_size(hyper: Hyper) -> int:
    """d_e / H: the per-head size where the config has no setting of its own for it."""
    return int(hyper["d_e"]) // int(hyper["H"])


@dataclass(frozen=True)
class TokenId:
    """An optional token id (bos, eos): absent, null or negative leaves it out; a list gives its first."""

    ours: str
    key: str


# A setting read by code: (config, hyperparameters so far, refusals to add to) -> more hyperparameters.
Reader = Callable[[Config, Hyper, list[str]], Hyper]
ConfigField = Int | Float | Const | Derived | TokenId | Reader


def _json(value: object) -> str:
    """How config.json spells a value: true / false for flags, Python's repr otherwise."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


@dataclass(frozen=True)
class Allowed:
    """``key`` (``default`` when absent) must be one of ``values``: else "key = value: why"."""

    key: str
    default: object
    values: tuple[object, ...]
    why: str

    def refusal(self, config: Config, hyper: Hyper, keys: Mapping[str, str]) -> str | None:
        value = config.get(self.key, self.default)
        return None if value in self.values else f"{self.key} = {_json(value)}: {self.why}"


@dataclass(frozen=True)
class Flag:
    """A true/false setting the model computes only one way (``supported``)."""

    key: str
    supported: bool
    why: str

    def refusal(self, config: Config, hyper: Hyper, keys: Mapping[str, str]) -> str | None:
        value = config.get(self.key, self.supported)
        if value is not None and not isinstance(value, bool):  # the string "false" is true to bool()
            return f"{self.key} = {_json(value)}: not true or false"
        if (self.supported if value is None else value) == self.supported:
            return None
        return f"{self.key} = {_json(not self.supported)}: {self.why}"


@dataclass(frozen=True)
class Divisible:
    """Hyperparameter ``num`` divisible by ``den`` (another hyperparameter, or a number).

    ``text`` words the refusal, ``{num}`` and ``{den}`` standing for "key = value". ``unless``: a
    config key whose presence makes the division moot (Llama's explicit head_dim).
    """

    num: str
    den: str | int
    text: str = "{num} is not divisible by {den}"
    unless: str | None = None

    def refusal(self, config: Config, hyper: Hyper, keys: Mapping[str, str]) -> str | None:
        if self.unless is not None and config.get(self.unless) is not None:
            return None
        den = self.den if isinstance(self.den, int) else hyper[self.den]
        if hyper[self.num] % den == 0:
            return None
        num_text = f"{keys[self.num]} = {hyper[self.num]}"
        den_text = str(den) if isinstance(self.den, int) else f"{keys[self.den]} = {den}"
        return self.text.format(num=num_text, den=den_text)


@dataclass(frozen=True)
class Same:
    """Two settings the model has one hyperparameter for: "a = x differs from b = y: why"."""

    a: str
    b: str
    why: str

    def refusal(self, config: Config, hyper: Hyper, keys: Mapping[str, str]) -> str | None:
        if hyper[self.a] == hyper[self.b]:
            return None
        return f"{keys[self.a]} = {hyper[self.a]} differs from {keys[self.b]} = {hyper[self.b]}: {self.why}"


Refusal = Allowed | Flag | Divisible | Same


# ---- tensors -------------------------------------------------------------------------------------------


class Transform(Protocol):
    """One step from a HF tensor to ours, known by its shapes before any data is read."""

    def problem(self, shape: Shape) -> str | None: ...  # why the step cannot take this shape
    def shape(self, shape: Shape) -> Shape: ...
    def __call__(self, array: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Transpose:
    """HF stores [in, out] (GPT-2's Conv1D) or [rows, d_e] (embedding tables); the paper W ∈ ℝ^{out × in}."""

    def problem(self, shape: Shape) -> str | None:
        return None

    def shape(self, shape: Shape) -> Shape:
        return shape[::-1]

    def __call__(self, array: np.ndarray) -> np.ndarray:
        return array.T


@dataclass(frozen=True)
class Row:
    """Row ``index`` of a table (BERT's first token type); ``rows``: the exact row count it must have."""

    index: int
    rows: int | None = None
    why: str = ""

    def problem(self, shape: Shape) -> str | None:
        if self.rows is not None and shape[0] != self.rows or shape[0] <= self.index:
            return self.why or f"has no row {self.index}"
        return None

    def shape(self, shape: Shape) -> Shape:
        return shape[1:]

    def __call__(self, array: np.ndarray) -> np.ndarray:
        return array[self.index]


@dataclass(frozen=True)
class DropRows:
    """The table without its first ``count`` rows, which the model never reads (BART's position offset)."""

    count: int
    why: str

    def problem(self, shape: Shape) -> str | None:
        return None if shape[0] > self.count else self.why

    def shape(self, shape: Shape) -> Shape:
        return (shape[0] - self.count, *shape[1:])

    def __call__(self, array: np.ndarray) -> np.ndarray:
        return array[self.count:]


@dataclass(frozen=True)
class Cut:
    """``[start, stop)`` along ``axis``: one head of a projection (made by the engine from a ``Heads``)."""

    axis: int
    start: int
    stop: int

    def problem(self, shape: Shape) -> str | None:
        return None

    def shape(self, shape: Shape) -> Shape:
        out = list(shape)
        out[self.axis] = self.stop - self.start
        return tuple(out)

    def __call__(self, array: np.ndarray) -> np.ndarray:
        index = [slice(None)] * array.ndim
        index[self.axis] = slice(self.start, self.stop)
        return array[tuple(index)]


@dataclass(frozen=True)
class Heads:
    """Cut ``axis`` into ``len(parts)`` blocks (GPT-2's fused q|k|v), each into heads of one width.

    ``count``: the heads of every block (a hyperparameter's name, H or H_kv, or a number), or one count
    per block: Phi-3's packed qkv_proj is ``("H", "H_kv", "H_kv")``, its gate_up_proj ``1`` (two halves).
    The rule's ``ours`` names each piece with ``{h}`` (the head, from 0) and ``{part}``, and a part may
    itself hold ``{h}`` (``"heads.{h}.W_q"``, ``"g.{h}.W_k"``: blocks of different head families). A
    size that does not divide is refused, since a guess at the split would silently scramble the heads.
    ``interleaved``: the heads are outer and the parts inner, each head's parts side by side (GPT-NeoX's
    query_key_value, rows [H, 3, d]); the parts then share one count.
    """

    count: str | int | tuple[str | int, ...]
    axis: int = 0
    parts: tuple[str, ...] = ("",)
    interleaved: bool = False


@dataclass(frozen=True)
class Context:
    """What a rule's ``when`` may ask: the config, the hyperparameters, and the names the model expects."""

    config: Config
    hyper: Hyper
    expected: Collection[str]


When = Callable[[Context], bool]


def always(ctx: Context) -> bool:
    return True


def config_flag(key: str, default: bool = False) -> When:
    """A rule that holds when config.json's ``key`` is true."""
    return lambda ctx: config_bool(ctx.config, key, default)


def config_unset(key: str, default: bool = False) -> When:
    return lambda ctx: not config_bool(ctx.config, key, default)


def expects_any(names: Collection[str]) -> When:
    """A rule for a part of the model that only some entries have (BERT's MLM head)."""
    return lambda ctx: not frozenset(names).isdisjoint(ctx.expected)


def expects_none(names: Collection[str]) -> When:
    return lambda ctx: frozenset(names).isdisjoint(ctx.expected)


@dataclass(frozen=True)
class Tensor:
    """HF tensor(s) ``hf`` -> our ``ours``: ``ndim`` checked, then ``heads`` cut, then ``transforms``.

    ``hf`` is a name with the family's prefix removed; ``{l}`` matches an index (digits),
    ``{x:a|b}`` one of the spellings a, b, and ``{x:*}`` anything. The matched values fill ``ours``. Every rule whose
    pattern matches a tensor applies (Llama's tied embedding gives both W_e and W_u).
    """

    hf: str
    ours: str
    ndim: int
    transforms: tuple[Transform, ...] = ()
    heads: Heads | None = None
    when: When = always


@dataclass(frozen=True)
class Tie:
    """Tensors HF ties together: the first of ``sources`` present is read, as ``ours`` (if given);
    every other one of ``sources`` and ``copies`` the file holds must equal it, else ``untied``.

    ``message`` words an unequal copy: ``{shape}`` its shape, ``{source}`` the tensor read.
    """

    sources: tuple[str, ...]
    message: str
    copies: tuple[str, ...] = ()
    ours: str | None = None
    ndim: int = 2
    transforms: tuple[Transform, ...] = ()
    when: When = always


@dataclass(frozen=True)
class Fill:
    """``ours`` is ``value`` everywhere when the file has no ``absent`` and the model expects it
    (HF's own default on load: BART's final_logits_bias)."""

    ours: str
    absent: str
    value: float = 0.0


@dataclass(frozen=True)
class Ignore:
    """HF tensors that are known and deliberately unused (buffers, heads no entry has)."""

    hf: str
    when: When = always


@dataclass(frozen=True)
class Stack:
    """HF tensors ``hf``, one per value of ``{e}`` (``count``, a hyperparameter, of them: 0 … count − 1), stacked
    along a new first axis as one tensor named ``into`` (the other placeholders filled), which ``Tensor`` rules
    then map like any other: Mixtral's experts.{e}.w1.weight → one three-index W_1 (hf_stack.py)."""

    hf: str
    into: str
    count: str
    when: When = always


@dataclass(frozen=True)
class Table:
    """One HF family: the model types it reads, the algorithms whose parameters it names, and its rules.

    ``label`` names the family in a refusal ("config.json describes a GPT-2 variant ..."); ``kind``
    in an unknown tensor ("... that no gpt2 model here uses"). ``algorithms``: the models (.alg
    algorithms) whose parameter names the rules give, so that a parameter group typed as one of them
    (``θ : GPT2``) takes the checkpoint under its own name.
    """

    model_types: tuple[str, ...]
    label: str
    kind: str
    prefix: str
    algorithms: tuple[str, ...]
    config: tuple[ConfigField, ...]
    refusals: tuple[Refusal, ...]
    tensors: tuple[Tensor | Tie | Fill | Ignore | Stack, ...]
    doc: str = field(default="", compare=False)
