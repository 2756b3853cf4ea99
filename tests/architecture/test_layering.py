"""The pipeline's layering, read off the import statements: no cycles, and no stage importing a later one.

    ir  ←  frontend, passes  ←  backends  ←  pseudoformer (the API, CLI, weights, generation)

`pseudoformer.base.errors`, `pseudoformer.version`, the safetensors file format (`pseudoformer.weights.errors`,
`.safetensors_io` and `.safetensors_stream`, which the TVM backend saves its weights in) and the rules for touching files
(`pseudoformer.base.limits`, `.regular_file`, `.file_access`, `.atomic_write`) and the import of a package's modules
that register themselves (`pseudoformer.base.submodules`) and the hostile-input helpers (`.terminal`, `.model_files`,
`.manifest`) sit below every stage, with the two packages whose __init__ imports nothing eagerly
(`pseudoformer.base`, `pseudoformer.weights`: base/lazy_names.py). Function-level and relative imports count too;
imports under `if TYPE_CHECKING:` do not (they never run). An import of `a.b.c` also runs `a/__init__` and
`a/b/__init__`, so it is an edge to each of them that is not the importer's own package (test_fresh_imports.py runs
every module's import first, to catch what this reading misses).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"pseudoformer": "pseudoformer", "pseudoformer.frontend": "frontend", "pseudoformer.ir": "ir",
           "pseudoformer.passes": "passes", "pseudoformer.backends": "backends"}
SHARED = {"pseudoformer.base", "pseudoformer.base.lazy_names", "pseudoformer.weights", "pseudoformer.base.errors", "pseudoformer.version", "pseudoformer.weights.errors",
          "pseudoformer.weights.safetensors_io", "pseudoformer.weights.safetensors_stream",
          "pseudoformer.weights.tensor_ref", "pseudoformer.base.limits",
          "pseudoformer.base.regular_file", "pseudoformer.base.file_access", "pseudoformer.base.atomic_write",
          "pseudoformer.base.submodules", "pseudoformer.base.terminal", "pseudoformer.base.model_files", "pseudoformer.base.manifest"}
# What each stage may import besides itself and the shared modules.
ALLOWED = {
    "ir": set(),
    "frontend": {"ir"},
    "passes": {"ir"},
    "backends": {"ir", "passes"},
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, folder in FOLDERS.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


def _imports() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                       for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue  # `if TYPE_CHECKING:` imports are for type hints and never run
            if isinstance(node, ast.ImportFrom):
                base = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    base = base.rsplit(".", 1)[0]
                module = node.module if not node.level else ".".join(filter(None, [base, node.module]))
                # `from pkg import sub` imports the submodule; `from pkg import name`, the package.
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            g.add_edges_from((m, t) for t in targets if t in mods and t != m)
            # Importing a.b.c runs a/__init__ and a/b/__init__ first, unless they are m's own packages, which are
            # running already; a cycle through a package's __init__ fails as surely as one between modules.
            own = _packages(m)
            g.add_edges_from((m, p) for t in targets if t in mods for p in _packages(t)
                             if p in mods and p not in own and p != m)
    return g


def _packages(module: str) -> set[str]:
    """The packages whose __init__ an import of `module` runs: a, a.b for a.b.c."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _stage(module: str) -> str:
    parts = module.split(".")
    if module in SHARED:
        return "shared"
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "api"


def test_shared_modules_import_nothing_above_them() -> None:
    g = _imports()
    assert not [(a, b) for a, b in g.edges if a in SHARED and b not in SHARED]


def test_no_import_cycles() -> None:
    cycles = list(nx.simple_cycles(_imports()))
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles[:10])


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_no_stage_imports_a_later_one(stage: str) -> None:
    g = _imports()
    bad = [(a, b) for a, b in g.edges if _stage(a) == stage and _stage(b) not in {stage, "shared", *ALLOWED[stage]}]
    assert not bad, "\n".join(f"{a} imports {b}" for a, b in bad)
