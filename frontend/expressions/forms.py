"""Every expression form, registered, and the functions that evaluate an expression.

`ev` (core.py) dispatches on the expression's form; each module imported here registers the forms it handles.
Statements and calls import from here, so that the forms are all registered before anything is evaluated. The
package's __init__ imports nothing: the forms (lookup.py reads masks.py and pieces.py) sit above modules that use
core.py and affine.py, and an __init__ that imported the forms would close a cycle through them.
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
