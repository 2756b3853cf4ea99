"""Import every module of a package, so that a module registers what it defines just by existing.

The op families (ir/ops/), and each backend's lowerings, register themselves when imported; their
package imports them all through this instead of a hand-kept list that a new module could be left
out of. pkgutil lists a package's modules wherever it lives: the source folders of an editable
install, site-packages, or a zip.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_submodules(package: str, path: Iterable[str]) -> list[str]:
    """Import the modules (not subpackages) of `package` found on its `__path__`, by name; return their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(list(path)) if not m.ispkg)
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names
