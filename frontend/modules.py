"""Load a .alg file and the files it `use`s; look algorithms up in a module's scope.

`use "paper/primitives.alg"` brings every algorithm of that file into scope; `use MHAttention,
layer_norm from "variants.alg"` brings the named ones. Paths are relative to the using file.
Algorithms resolve their callees in the module that defines them (lexical scope), so a file can
shadow `layer_norm` without changing what the imported MHAttention calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pseudoformer.errors import CompileError, Diagnostics, Pos
from pseudoformer.frontend.assemble import parse_module
from pseudoformer.frontend.ast import Algorithm, Module
from pseudoformer.frontend.errors import ModuleError, UnknownNameError


@dataclass
class Program:
    root: Module
    modules: dict[str, Module] = field(default_factory=dict)
    # module path → visible name → overloads, own definitions first
    scopes: dict[str, dict[str, list[Algorithm]]] = field(default_factory=dict)

    def lookup(self, module: Module, name: str) -> list[Algorithm]:
        return self.scopes[module.path].get(name, [])

    def entries(self) -> list[Algorithm]:
        return list(self.root.algorithms)


def load_program(path: str | Path, source: str | None = None) -> Program:
    """Parse `path` and everything it uses; raise CompileError with every problem found."""
    diags = Diagnostics()
    display = str(path)
    text = source if source is not None else _read(Path(path), display, diags, None)
    if text is None:
        diags.raise_if_any()
    root, d = parse_module(text, display)
    diags.errors.extend(d.errors)
    prog = Program(root=root)
    prog.modules[display] = root
    _load_uses(prog, root, Path(path), diags, stack=[str(Path(path).resolve())])
    for mod in prog.modules.values():
        _build_scope(prog, mod, diags)
    diags.raise_if_any()
    return prog


def _read(p: Path, display: str, diags: Diagnostics, pos: Pos | None) -> str | None:
    try:
        data = p.read_bytes()
        # utf-8-sig: an editor's byte-order mark is not part of the first line
        return data.decode("utf-8-sig")
    except FileNotFoundError:
        diags.add(ModuleError(f"no such file: {display}", pos))
    except IsADirectoryError:
        diags.add(ModuleError(f"{display} is a directory, not a .alg file", pos))
    except UnicodeDecodeError as e:
        # Point at the offending byte in the file itself, as for any other mistake in it.
        head = data[: e.start]
        lineno = head.count(b"\n") + 1
        before = head[head.rfind(b"\n") + 1:].decode("utf-8")  # valid: decoding failed only at e.start
        line = data.split(b"\n")[lineno - 1].decode("utf-8", errors="replace")
        diags.add(ModuleError(f"{display} is not UTF-8 text (byte 0x{data[e.start]:02x})",
                              Pos(display, lineno, len(before) + 1), line))
    except OSError as e:
        diags.add(ModuleError(f"cannot read {display}: {e.strerror}", pos))
    return None


def _load_uses(prog: Program, mod: Module, path: Path, diags: Diagnostics, stack: list[str]) -> None:
    for use in mod.uses:
        target = (path.parent / use.path)
        key = str(target.resolve())
        display = _display(path, use.path, mod.path)
        if key in stack:
            cycle = " → ".join(Path(s).name for s in [*stack[stack.index(key):], key])
            diags.add(ModuleError(f"`use` cycle: {cycle}", use.pos, _line(mod, use.pos)))
            continue
        if display in prog.modules:
            continue
        text = _read(target, display, diags, use.pos)
        if text is None:
            if diags.errors[-1].pos == use.pos:  # not when it points into the file itself
                diags.errors[-1].source_line = _line(mod, use.pos)
            continue
        sub, d = parse_module(text, display)
        diags.errors.extend(d.errors)
        prog.modules[display] = sub
        _load_uses(prog, sub, target, diags, [*stack, key])


def _display(path: Path, rel: str, mod_display: str) -> str:
    base = Path(mod_display).parent
    return str(Path(base, rel)) if str(base) != "." else rel


def _line(mod: Module, pos: Pos) -> str:
    return mod.line(pos.line)


def _build_scope(prog: Program, mod: Module, diags: Diagnostics) -> None:
    scope: dict[str, list[Algorithm]] = {}
    for alg in mod.algorithms:
        scope.setdefault(alg.name, []).append(alg)
    for use in mod.uses:
        sub = prog.modules.get(_display(Path(mod.path), use.path, mod.path))
        if sub is None:
            continue
        wanted = use.names if use.names is not None else [a.name for a in sub.algorithms]
        for tok in dict.fromkeys(wanted):
            name = str(tok)
            found = sub.overloads(name)
            if not found:
                have = ", ".join(dict.fromkeys(a.name for a in sub.algorithms)) or "nothing"
                pos = getattr(tok, "pos", use.pos)  # the name's own position when the parser gave one
                diags.add(UnknownNameError(f"{use.path} has no algorithm {name} (it defines {have})",
                                           pos, _line(mod, pos)))
            elif name not in scope:  # a file's own definitions shadow imported ones
                scope[name] = list(found)
    prog.scopes[mod.path] = scope


__all__ = ["CompileError", "Program", "load_program"]
