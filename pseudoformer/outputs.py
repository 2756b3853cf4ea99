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
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pseudoformer.base.atomic_write import OutputError, check_output
from pseudoformer.base.model_files import data_path, manifest_path, weights_path
from pseudoformer.config import default_config_path


def outputs_of(args: argparse.Namespace) -> list[Path]:
    """The files `args`' command writes: -o, and the files of its set."""
    if args.command == "compile" and getattr(args, "genai_folder", None):
        return _genai_outputs(args)
    out = getattr(args, "output", None)
    if not out or args.command not in ("compile", "run", "inspect"):
        return []  # train's -o is a directory it writes its checkpoints into (training/), checked there
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
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"cannot write --genai-folder {folder}: it is a file; give a folder to write the model's "
                          "files into")
    if not folder.exists():
        if not folder.parent.is_dir():
            raise OutputError(f"cannot write --genai-folder {folder}: no directory {folder.parent}")
        return []
    names = [MODEL_FILE, MODEL_FILE + ".data", CONFIG_FILE, *TOKENIZER_FILES]
    return [folder / name for name in names]


def inputs_of(args: argparse.Namespace) -> Iterator[tuple[str, Path]]:
    """The files `args`' command reads that can be named before it runs."""
    for f in [*(getattr(args, "files", None) or []), *([args.file] if getattr(args, "file", None) else [])]:
        yield "the source", Path(f)
        if getattr(args, "config", None) is None and (toml := default_config_path(Path(f))) is not None:
            yield "the config", toml
        if Path(f).suffix == ".onnx":
            yield "the model's weights", data_path(Path(os.path.realpath(f)))
        if Path(f).suffix == ".so":
            yield "the library's weights", weights_path(Path(os.path.realpath(f)))
            yield "the library's manifest", manifest_path(Path(os.path.realpath(f)))
    if getattr(args, "config", None):
        yield "--config", Path(args.config)
    for name in ("tokenizer",):
        if getattr(args, name, None):
            yield f"--{name}", Path(getattr(args, name))
    weights = getattr(args, "weights", None)
    if weights:
        w = Path(weights)
        yield "--weights", w
        if w.is_dir():
            with contextlib.suppress(OSError):
                for child in sorted(w.iterdir())[:10_000]:
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


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output that cannot be written or that is one of the command's inputs."""
    outputs = outputs_of(args)
    for out in outputs:
        check_output(out)
    inputs = list(inputs_of(args)) if outputs else []
    for out in outputs:
        for what, path in inputs:
            if _same(out, path):
                given = args.output or args.genai_folder
                shown = f"{out}" if out == Path(given) else f"{given} (with {out.name})"
                raise OutputError(f"cannot write {shown}: it is {what}, {path}, which this command reads; "
                                  "write the output to another file")
