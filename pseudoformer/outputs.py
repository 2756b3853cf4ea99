"""The files a command will write, checked before it does any work.

A command learns that it cannot write its output only at the end, after seconds or minutes of
compiling, unless it asks first. So before a command runs, every file it will write — `-o` and the
files written with it (an ONNX model's `.data`, a TVM library's weights and manifest) — is checked as
the atomic write will check it (atomic_write.check_output: no directory, no device, a directory that
exists), and compared with every file the command reads: an output that is one of its inputs (the
`.alg`, a weights file, a config, an `--input` array, the tokenizer), by any path or link, is refused,
since replacing it would destroy what the command was reading.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

from pseudoformer.base.atomic_write import OutputError, check_output, describe
from pseudoformer.base.file_access import read_inside
from pseudoformer.base.model_files import data_path, manifest_path, weights_path
from pseudoformer.config import default_config_path


def outputs_of(args: argparse.Namespace) -> list[Path]:
    """The files `args`' command writes: -o, and the files of its set (of its folder, for train)."""
    if args.command == "compile" and getattr(args, "genai_folder", None):
        return _genai_outputs(args)
    out = getattr(args, "output", None)
    if out and args.command == "train":
        return _train_outputs(Path(out))
    if not out or args.command not in ("compile", "run", "inspect"):
        return []
    path = Path(out)
    if args.command != "compile":
        return [path]
    target = check_output(path)
    if args.backend == "tvm":
        return [path, weights_path(target), manifest_path(target)]
    return [path, data_path(target)]


def _genai_outputs(args: argparse.Namespace) -> list[Path]:
    """The files of an onnxruntime-genai folder (deploy_genai.py): the model, its config and the tokenizer
    files it copies from the checkpoint. A folder not there yet is made by the command, in a parent that is."""
    from pseudoformer.deploy_genai import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILES

    folder = Path(args.genai_folder)
    if not _writable_folder(folder, "--genai-folder", made_with_parents=False):
        return []
    names = [MODEL_FILE, MODEL_FILE + ".data", CONFIG_FILE, *TOKENIZER_FILES]
    return [folder / name for name in names]


def _train_outputs(folder: Path) -> list[Path]:
    """Checked before the first step, so that a run is never lost to an output it could not write at the end.
    `train -o FOLDER` writes nothing in place: each save is a new generation that one rename makes current
    (training/run_folder.py), so the folder is checked, and the names a save takes over (claimed)."""
    from pseudoformer.training import run_folder
    from pseudoformer.training.outputs import HF_DIR, RUN_FILES

    if _writable_folder(folder, "-o", made_with_parents=True):
        run_folder.check_folder(folder, (*RUN_FILES, HF_DIR))
    return []


def _claimed(args: argparse.Namespace) -> list[Path]:
    """What `train -o FOLDER` replaces or removes whole at a save besides its outputs: the run's files and its hf/
    checkpoint's, by name, and the generation they lead into (an input inside it would be removed)."""
    if args.command != "train" or not getattr(args, "output", None):
        return []
    from pseudoformer.training import run_folder
    from pseudoformer.training.outputs import CHECKPOINT, HF_DIR, HF_FILES, RUN_FILES

    folder = Path(args.output)
    hf = [folder / HF_DIR / name for name in (*HF_FILES, CHECKPOINT)]
    return [*(folder / name for name in RUN_FILES), *hf, *run_folder.link_names(folder),
            *([run_folder.current(folder)] if (folder / run_folder.CURRENT).is_symlink() else [])]


def _writable_folder(folder: Path, flag: str, *, made_with_parents: bool) -> bool:
    """Refuse a folder output that is a file (the data, the .alg, /dev/null, a FIFO), or that cannot be made or
    written; True when it exists already, so that its files are checked too."""
    try:
        if folder.exists():
            if not folder.is_dir():
                kind = "a file" if folder.is_file() else "not a folder"
                raise OutputError(f"cannot write {flag} {folder}: it is {kind}; give a folder to write the files into")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise OutputError(f"cannot write {flag} {folder}: the folder is not writable")
            return True
        parent = folder.parent
        while made_with_parents and not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise OutputError(f"cannot write {flag} {folder}: no directory {folder.parent}")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write {flag} {folder}: {parent} is not writable")
    except (OSError, ValueError) as e:  # a name too long, a loop of links, a NUL byte
        raise OutputError(f"cannot write {flag} {folder}: {describe(e)}") from None
    return False


def inputs_of(args: argparse.Namespace) -> Iterator[tuple[str, Path]]:
    """The files `args`' command reads that can be named before it runs."""
    for f in [*(getattr(args, "files", None) or []), *([args.file] if getattr(args, "file", None) else [])]:
        yield "the source", Path(f)
        if Path(f).suffix == ".alg" and Path(f).is_file():
            from pseudoformer.frontend.modules import load_program

            for used in load_program(f, include=getattr(args, "include", None) or ()).files[1:]:
                yield "a file the source uses", used
        if getattr(args, "config", None) is None and (toml := default_config_path(Path(f))) is not None:
            yield "the config", toml
        if Path(f).suffix == ".onnx":
            yield "the model's weights", data_path(Path(os.path.realpath(f)))
        if Path(f).suffix == ".so":
            yield "the library's weights", weights_path(Path(os.path.realpath(f)))
            yield "the library's manifest", manifest_path(Path(os.path.realpath(f)))
    if getattr(args, "config", None):
        yield "--config", Path(args.config)
    for name in ("tokenizer", "data", "val_data"):
        if getattr(args, name, None):
            yield f"--{name.replace('_', '-')}", Path(getattr(args, name))
    weights = getattr(args, "weights", None)
    if weights:
        w = Path(weights)
        yield "--weights", w
        from pseudoformer.weights import checkpoint_files  # only for a command given --weights

        for child in checkpoint_files(w):
            yield "a file of --weights", child
    for spec in getattr(args, "inputs", None) or []:
        name, _, file = spec.partition("=")
        if file and not file.lstrip().startswith("["):
            yield f"--input {name}", Path(file)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):
            return False


def _within(path: Path, folder: Path) -> bool:
    """Whether `path`, links resolved, lies inside the directory `folder` (which a save removes whole)."""
    try:
        return folder.is_dir() and Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))
    except (OSError, ValueError):
        return False


def _copied(args: argparse.Namespace) -> tuple[Path, tuple[str, ...]] | None:
    """The checkpoint folder whose files the command copies into its output, and their names."""
    weights = getattr(args, "weights", None)
    if not weights:
        return None
    from pseudoformer.weights import checkpoint_directory  # only for a command given --weights

    if (directory := checkpoint_directory(weights)) is None:
        return None
    if args.command == "train" and getattr(args, "output", None):
        from pseudoformer.training.outputs import HF_FILES

        return directory, HF_FILES
    if args.command == "compile" and getattr(args, "genai_folder", None):
        from pseudoformer.deploy_genai import TOKENIZER_FILES

        return directory, ("config.json", *TOKENIZER_FILES)
    return None


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that cannot be written or that is one of the command's inputs, and a
    file to be copied into it from the checkpoint that lies outside the checkpoint (file_access.read_inside)."""
    if (copied := _copied(args)) is not None:
        for name in copied[1]:
            read_inside(copied[0], name, "checkpoint file", "tokenizer")
    outputs = outputs_of(args)
    for out in outputs:
        check_output(out)
    claimed = [*outputs, *_claimed(args)]
    inputs = list(inputs_of(args)) if claimed else []
    for out in claimed:
        for what, path in inputs:
            if _same(out, path) or _within(path, out):
                given = args.output or args.genai_folder
                shown = f"{out}" if out == Path(given) else f"{given} (with {out.name})"
                raise OutputError(f"cannot write {shown}: it is {what}, {path}, which this command reads; "
                                  "write the output to another file")
