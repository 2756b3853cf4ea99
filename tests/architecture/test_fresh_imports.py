"""Every module imports on its own, first, in an interpreter that has imported nothing of pseudoformer.

test_layering.py reads the cycles off the import statements; this runs them. A cycle between modules (or through a
package's __init__) fails only when the import starts at the wrong module, and in a test session some other test
has always imported the right one first, so each module here is imported in a fresh child. The children are forked
from one interpreter that has read the third-party libraries (numpy, onnx, TVM), which keeps the ~280 imports to
seconds; nothing of pseudoformer is in it when it forks.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.architecture.test_layering import _modules

# Forks a child per module; a child that fails prints its module and traceback, and the parent exits 1.
_SCRIPT = textwrap.dedent("""
    import importlib, os, sys, traceback
    for lib in ("numpy", "onnx", "onnxruntime", "lark", "networkx", "safetensors", "gguf", "tqdm", "tvm"):
        try:
            importlib.import_module(lib)
        except ImportError:
            pass  # an optional backend's library that is not installed; its modules' children fail on their own
    assert not [m for m in sys.modules if m.startswith("pseudoformer")]
    failed = 0
    for module in sys.stdin.read().split():
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(module)
            except BaseException:
                print(f"--- import {module}", flush=True)
                traceback.print_exc(file=sys.stdout)
                sys.stdout.flush()
                os._exit(1)
            os._exit(0)
        failed += os.waitpid(pid, 0)[1] != 0
    sys.exit(1 if failed else 0)
""")


def _optional(module: str) -> bool:
    """Modules of the TVM backend need apache-tvm, an optional extra."""
    return module.startswith("pseudoformer.backends.tvm")


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    try:
        import tvm  # noqa: F401
        modules = sorted(_modules())
    except ImportError:
        modules = sorted(m for m in _modules() if not _optional(m))
    done = subprocess.run([sys.executable, "-c", _SCRIPT], input="\n".join(modules), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
