"""Expressions → Vals: names, arithmetic, products, indexing, sums, lists, Iverson brackets and builtins.

`ev` (core.py) dispatches on the expression's form; each module here registers the forms it handles.
Importing this package registers them all.
"""

from pseudoformer.frontend.expressions import aggregates, arith, indexing, integers, lookup, topk  # noqa: F401  (they register)
from pseudoformer.frontend.expressions.builtin_calls import BUILTINS, call_builtin
from pseudoformer.frontend.expressions.core import (
    as_size,
    const,
    describe,
    ev,
    ev_val,
    handles,
    size_node,
    size_val,
)
from pseudoformer.frontend.expressions.indexing import distinct_index_vars
from pseudoformer.frontend.expressions.integers import static_int

__all__ = ["BUILTINS", "as_size", "call_builtin", "const", "describe", "distinct_index_vars", "ev", "ev_val",
           "handles", "size_node", "size_val", "static_int"]
