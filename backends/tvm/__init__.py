"""The TVM backend: lower an IR graph to Relax, compile it with TVM, run it on the Relax VM, save a .so.

Importing this package needs apache-tvm (pip install pseudoformer[tvm]); without it the import
raises BackendError with that advice, which the API and the CLI turn into a one-line error.
"""

from pseudoformer.backends.tvm.errors import BackendError, require_tvm

require_tvm()

from pseudoformer.backends.tvm.build import TVMModel, compile_graph, load_model, make_target  # noqa: E402
from pseudoformer.backends.tvm.lower import Lowered, to_relax  # noqa: E402

__all__ = ["BackendError", "Lowered", "TVMModel", "compile_graph", "load_model", "make_target", "require_tvm",
           "to_relax"]
