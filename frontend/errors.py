"""The frontend's kinds of mistake: one class per kind, each an AlgError (pseudoformer/base/errors.py)."""

from __future__ import annotations

from pseudoformer.base.errors import AlgError


class LayoutError(AlgError):
    """The line structure is wrong: indentation, missing line numbers, unclosed blocks."""


class AlgSyntaxError(AlgError):
    """A line does not parse."""


class UnknownNameError(AlgError):
    """A name, algorithm or module that is not defined."""


class ShapeError(AlgError):
    """Operands whose shapes don't fit."""


class ArityError(AlgError):
    """A call with the wrong number of arguments."""


class HyperparameterError(AlgError):
    """A hyperparameter that is missing, unknown, or has a value of the wrong kind."""


class BadTypeError(AlgError):
    """A value used as something it is not (a sequence as a matrix, a vector as a group…)."""


class DuplicateError(AlgError):
    """A name declared twice where it must be unique (two parameters that would share one weight)."""


class ModuleError(AlgError):
    """A `use` that cannot be satisfied: a missing file or an import cycle."""


class InferenceError(AlgError):
    """An inference algorithm (Algorithms 14, 15) whose loop is not the one generation runs: the wrong
    column of P, a sampled token that is not fed back, a return that is not the generated tokens."""


class LimitError(AlgError):
    """A program that is too big to build: more IR nodes than the limit, or nesting past the parser's."""


class TrainingError(AlgError):
    """A training algorithm (the paper's Algorithms 11–13: a gradient step θ ← θ − η·∇loss(θ)) whose
    lines are not the shape training runs (frontend/training.py)."""
