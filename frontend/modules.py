"""Load a .alg file and the files it `use`s; look algorithms up in a module's scope.

`use "paper/primitives.alg"` brings every algorithm of that file into scope; `use MHAttention,
layer_norm from "variants.alg"` brings the named ones. Algorithms resolve their callees in the
module that defines them (lexical scope), so a file can shadow `layer_norm` without changing what
the imported MHAttention calls. `use Mistral as Phi3 from "mistral.alg"` defines Phi3 in the using
file as Mistral itself: the using file's entry and export under that name, its body and parameter
names Mistral's, its calls still resolved in mistral.alg.

A `use` names a .alg file by a path relative to the using file; one that is not there is looked
for under each --include directory, then under the installed models/ (so any file can `use
"paper/primitives.alg"`). Wherever it is found, it must lie inside an allowed root: the entry
file's directory tree, the installed models/ or an --include directory, symbolic links
resolved. A source therefore cannot make pseudoformer read (and quote in a diagnostic)
/etc/shadow or /proc/self/environ.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pseudoformer.base.errors import AlgError, CompileError, Diagnostics, Pos, UsageError
from pseudoformer.base.file_access import FileAccessError, read_bytes
from pseudoformer.base.limits import MAX_USE_DEPTH
from pseudoformer.frontend.assemble import parse_module
from pseudoformer.frontend.ast import Algorithm, Module, Use
from pseudoformer.frontend.errors import ModuleError, UnknownNameError
from pseudoformer.frontend.source_text import check_source_text


@dataclass
class Program:
    root: Module
    modules: dict[str, Module] = field(default_factory=dict)
    # module path → visible name → overloads, own definitions first
    scopes: dict[str, dict[str, list[Algorithm]]] = field(default_factory=dict)
    # (using module, `use` path) → the module it loaded
    targets: dict[tuple[str, str], str] = field(default_factory=dict)
    # the files read, links resolved: the entry's and each `use`d one's (what an output must never replace)
    files: list[Path] = field(default_factory=list)
    # module path → what it defines: its own algorithms, then those its `use … as` lines rename
    defined: dict[str, list[Algorithm]] = field(default_factory=dict)

    def lookup(self, module: Module, name: str) -> list[Algorithm]:
        return self.scopes[module.path].get(name, [])

    def entries(self) -> list[Algorithm]:
        return list(self.defined.get(self.root.path, self.root.algorithms))


def models_root() -> Path:
    """The installed models/ folder."""
    return Path(str(resources.files("pseudoformer.models"))).resolve()


def load_program(path: str | Path, source: str | None = None, include: Sequence[str | Path] = ()) -> Program:
    """Parse `path` and everything it uses; raise CompileError with every problem found.

    `include`: directories besides the entry's own tree and the installed models/ that a `use`
    may read from (--include DIR).
    """
    diags = Diagnostics()
    display = str(path)
    if Path(path).suffix != ".alg":
        raise UsageError(f"{display} is not a .alg file: pseudoformer compiles .alg sources")
    if Path(path).exists() and _resolve(Path(path)).suffix != ".alg":
        # Diagnostics quote lines of the source, so a link x.alg → /etc/passwd is no source.
        raise UsageError(f"{display} links to {_resolve(Path(path))}, which is not a .alg file")
    roots = _roots(Path(path), include)
    text = source if source is not None else _read(Path(path), display, diags, None)
    if text is None:
        diags.raise_if_any()
    root, errors = _parse(text, display)
    diags.errors.extend(errors)
    prog = Program(root=root)
    prog.modules[display] = root
    prog.files.append(_resolve(Path(path)))
    _load_uses(prog, root, Path(path), diags, [str(_resolve(Path(path)))], roots)
    for mod in prog.modules.values():
        _define(prog, mod, diags, set())
    for mod in prog.modules.values():
        _build_scope(prog, mod, diags)
    diags.raise_if_any()
    return prog


@lru_cache(maxsize=32)
def _parse(text: str, display: str) -> tuple[Module, tuple[AlgError, ...]]:
    """Parse a module once per process for each (text, name): the files a model uses are read by
    every load, and nothing changes a Module once it is built."""
    text, refused = check_source_text(text, display)  # line breaks and bidi controls, before anything reads it
    module, diags = parse_module(text, display)
    return module, (*refused, *diags.errors)


def _roots(entry: Path, include: Sequence[str | Path]) -> list[Path]:
    extra = []
    for d in include:
        p = Path(d)
        if not p.is_dir():
            raise UsageError(f"--include {d}: no such directory")
        extra.append(_resolve(p))
    return [_resolve(entry).parent, *extra, models_root()]


def _read(p: Path, display: str, diags: Diagnostics, pos: Pos | None) -> str | None:
    try:
        data = read_bytes(p, "file", "source", name=display)
        # utf-8-sig: an editor's byte-order mark is not part of the first line
        return data.decode("utf-8-sig")
    except FileAccessError as e:
        diags.add(ModuleError(e.message, pos))
    except UnicodeDecodeError as e:
        # Point at the offending byte in the file itself, as for any other mistake in it.
        head = data[: e.start]
        lineno = head.count(b"\n") + 1
        before = head[head.rfind(b"\n") + 1:].decode("utf-8")  # valid: decoding failed only at e.start
        line = data.split(b"\n")[lineno - 1].decode("utf-8", errors="replace")
        diags.add(ModuleError(f"{display} is not UTF-8 text (byte 0x{data[e.start]:02x})",
                              Pos(display, lineno, len(before) + 1), line))
    return None


def _load_uses(prog: Program, mod: Module, path: Path, diags: Diagnostics, stack: list[str],
               roots: list[Path]) -> None:
    for use in mod.uses:
        try:
            target, display = _locate(use, path, mod.path, roots)
            found = target.exists()
        except OSError as e:  # a name too long, a loop of links
            diags.add(ModuleError(f"cannot use {use.path!r}: {e.strerror or e}", use.pos, _line(mod, use.pos)))
            continue
        except ModuleError as e:
            e.source_line = _line(mod, use.pos)
            diags.add(e)
            continue
        key = str(target)
        prog.targets[(mod.path, use.path)] = display
        if len(stack) > MAX_USE_DEPTH:  # each level of `use` is a level of recursion here and in the parser
            diags.add(ModuleError(f"this `use` is the end of a chain of more than {MAX_USE_DEPTH} `use`s; use the "
                                  "algorithms you need from fewer levels of files", use.pos, _line(mod, use.pos)))
            continue
        if key in stack:
            cycle = " → ".join(Path(s).name for s in [*stack[stack.index(key):], key])
            diags.add(ModuleError(f"`use` cycle: {cycle}", use.pos, _line(mod, use.pos)))
            continue
        if display in prog.modules:
            continue
        if not found:
            diags.add(ModuleError(f"no such file: {display}", use.pos, _line(mod, use.pos), notes=(
                "a `use` path is looked for beside the using file, then in each --include directory and in "
                "the installed models/",)))
            continue
        text = _read(target, display, diags, use.pos)
        if text is None:
            if diags.errors[-1].pos == use.pos:  # not when it points into the file itself
                diags.errors[-1].source_line = _line(mod, use.pos)
            continue
        sub, errors = _parse(text, display)
        diags.errors.extend(errors)
        prog.modules[display] = sub
        prog.files.append(target)
        _load_uses(prog, sub, target, diags, [*stack, key], roots)


def _locate(use: Use, path: Path, mod_display: str, roots: list[Path]) -> tuple[Path, str]:
    """The file a `use` names, resolved, and the name diagnostics give it; ModuleError if it may not be read."""
    rel = use.path
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise ModuleError("the path of a `use` holds a control character", use.pos)
    if not rel.endswith(".alg"):
        raise ModuleError(f"`use` takes a .alg file, not {rel!r}", use.pos)
    if Path(rel).is_absolute() or rel.startswith("~"):
        raise ModuleError(f"`use` takes a path relative to the using file, not {rel!r}", use.pos)
    try:
        # Beside the using file where it really is: an entry file reached through a link uses its own neighbours,
        # as a Python script run through a link imports from the directory it lies in.
        here = _resolve(_resolve(path).parent / rel)
    except OSError as e:
        raise ModuleError(f"`use {rel!r}`: {e.strerror}", use.pos) from None
    if not any(here.is_relative_to(r) for r in roots) or here.suffix != ".alg":
        raise ModuleError(f"`use {rel!r}` leads outside the directories a source may use: the entry file's "
                          "directory, the installed models/ and --include directories", use.pos)
    base = Path(mod_display).parent
    display = str(Path(base, rel)) if str(base) != "." else rel
    if here.exists():
        return here, display
    for root in roots[1:]:  # --include directories, then the installed models/
        try:
            there = _resolve(root / rel)
        except OSError:
            continue
        if there.is_relative_to(root) and there.suffix == ".alg" and there.is_file():
            return there, str(there)
    return here, display


def _resolve(p: Path) -> Path:
    """Path.resolve, with a loop of symbolic links an OSError naming the path (Python 3.11 raises
    RuntimeError for one, which would read as a bug in pseudoformer)."""
    try:
        return p.resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(p)) from None


def _line(mod: Module, pos: Pos) -> str:
    return mod.line(pos.line)


def _define(prog: Program, mod: Module, diags: Diagnostics, busy: set[str]) -> list[Algorithm]:
    """What `mod` defines: its own algorithms, then a renamed copy of each one its `use … as` lines name
    (the copy keeps its module, so its body resolves its calls where it is written)."""
    if mod.path in prog.defined:
        return prog.defined[mod.path]
    if mod.path in busy:  # a cycle of `use`s, reported where _load_uses met it
        return mod.algorithms
    busy.add(mod.path)
    out = list(mod.algorithms)
    for use in mod.uses:
        sub = prog.modules.get(prog.targets.get((mod.path, use.path), ""))
        theirs = _define(prog, sub, diags, busy) if sub is not None else []
        for name, local in use.renames:
            clash = [a for a in out if a.name == local]
            if clash:  # one name, two meanings: which would a call take?
                first = "by an earlier `use … as`" if clash[0].alias_in is mod else f"at line {clash[0].pos.line}"
                pos = getattr(local, "pos", use.pos)
                diags.add(ModuleError(f"{local} is defined twice in this file: {first}, and here as {name}", pos,
                                      _line(mod, pos)))
                continue
            out.extend(replace(a, name=str(local), label=None, alias_in=mod) for a in theirs if a.name == name)
    prog.defined[mod.path] = out
    return out


def _build_scope(prog: Program, mod: Module, diags: Diagnostics) -> None:
    scope: dict[str, list[Algorithm]] = {}
    for alg in prog.defined[mod.path]:
        scope.setdefault(alg.name, []).append(alg)
    for use in mod.uses:
        sub = prog.modules.get(prog.targets.get((mod.path, use.path), ""))
        if sub is None:
            continue
        theirs = prog.defined[sub.path]
        wanted = use.names if use.names is not None else [a.name for a in theirs]
        for tok in dict.fromkeys([*wanted, *(name for name, _ in use.renames)]):
            name = str(tok)
            found = [a for a in theirs if a.name == name]
            if not found:
                have = ", ".join(dict.fromkeys(a.name for a in theirs)) or "nothing"
                pos = getattr(tok, "pos", use.pos)  # the name's own position when the parser gave one
                diags.add(UnknownNameError(f"{use.path} has no algorithm {name} (it defines {have})",
                                           pos, _line(mod, pos)))
            elif name not in scope and tok in wanted:  # a file's own definitions shadow imported ones
                scope[name] = list(found)
    prog.scopes[mod.path] = scope


__all__ = ["CompileError", "Program", "load_program"]
