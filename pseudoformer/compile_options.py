"""One CompileOptions (backends/options.py) from whatever asked for a compile: a command's arguments
(`from_arguments`, for compile, inspect, run, generate, train and --genai-folder alike) or the API's
keywords (`from_keywords`, the thin layer `compile`, `generate`, `train`, `lower` and `Generator` keep).

Light to import: the parser (cli_parser.py) takes `add_backend_argument` and `add_provider_argument`
from here, and `pseudoformer --version` builds the parser without numpy.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from pseudoformer.backends.options import (
    BACKENDS,
    CUDA_MEANS,
    CUDA_RUNS,
    OLD_SPELLINGS,
    PROVIDERS,
    CompileOptions,
)

# Read apart from the rest: -O's default depends on the command, quantize is its own group of flags
# (quantization.py), and int8 activations are asked for as --accuracy-level 4 on the tvm backend.
_READ_APART = ("opt_level", "quantize", "int8_activations")
# The API's spellings of how the weights are quantized, as quantization.options takes them.
QUANTIZE_DETAILS = {"block_size": "block_size", "symmetric": "symmetric", "accuracy_level": "accuracy_level",
                    "quantize_embeddings": "embeddings", "quantize_output": "output", "quantize_method": "method"}


def add_backend_argument(p: argparse.ArgumentParser, default: str | None, help: str) -> None:  # noqa: A002
    """--backend, one spelling for every command (BACKENDS); the old ones are read as the new, with a note."""
    p.add_argument("--backend", type=_backend_argument, default=default, metavar="|".join(BACKENDS), help=help)


def add_provider_argument(p: argparse.ArgumentParser, command: str) -> None:
    """--provider, whose help says what cuda is on each backend `command` runs on it (CUDA_RUNS)."""
    cuda = "; ".join(f"{CUDA_MEANS[b]} with --backend {b}" for b in CUDA_RUNS[command])
    p.add_argument("--provider", default="cpu", metavar="|".join(PROVIDERS),
                   help=f"where the model runs: cpu (the default) or cuda ({cuda})")


def backend_name(name: str) -> str:
    """The backend `name` spells: itself, or the one an old spelling (train's onnxruntime, interpreter) now is."""
    return OLD_SPELLINGS.get(name, name)


def _backend_argument(text: str) -> str:
    name = backend_name(text)
    if name != text:
        print(f"note: --backend {text} is now spelled --backend {name}", file=sys.stderr)
    return name


def command_of(args: argparse.Namespace) -> str:
    """The command whose rules the options follow: compile --genai-folder has its own."""
    return "genai" if getattr(args, "genai_folder", None) is not None else args.command


def from_arguments(args: argparse.Namespace) -> CompileOptions:
    """The options a command's arguments ask for, checked against each other and against the command."""
    from pseudoformer.quantization import from_arguments as quantize_from_arguments
    from pseudoformer.quantization import int8_activations

    command = command_of(args)
    given = {f.name: getattr(args, f.name) for f in fields(CompileOptions)
             if "flag" in f.metadata and f.name not in _READ_APART and getattr(args, f.name, None) is not None}
    backend = given.setdefault("backend", _default_backend(args))
    opt = getattr(args, "opt", None)
    level = opt if opt is not None else 0 if (command, backend) == ("run", "numpy") else 2  # run: numpy is the reference
    options = CompileOptions(**given, opt_level=level,
                             quantize=quantize_from_arguments(args) if hasattr(args, "quantize") else None,
                             int8_activations=hasattr(args, "quantize") and int8_activations(args, backend))
    return options.checked(command)


def _default_backend(args: argparse.Namespace) -> str:
    """Without --backend: `run` runs a .onnx file on onnx, a .so on tvm and a .alg on numpy; the rest compile to onnx."""
    if args.command != "run":
        return "onnx"
    return {".onnx": "onnx", ".so": "tvm"}.get(Path(args.file).suffix, "numpy")


def from_keywords(options: CompileOptions | None, keywords: Mapping[str, Any], command: str,
                  **defaults: Any) -> CompileOptions:
    """The API's thin layer: `options` (else CompileOptions(**defaults)) with `keywords` set, each named as
    the field it sets (backend="tvm", quantize="int4", contrib_ops=True) or as a detail of quantize
    (block_size, symmetric, accuracy_level, quantize_embeddings, quantize_output, quantize_method); checked
    for `command` as the command line's are. A name that is neither is a TypeError, as Python's own."""
    from pseudoformer.quantization import options as quantize_options

    given = dict(keywords)
    details = {QUANTIZE_DETAILS[k]: given.pop(k) for k in list(given) if k in QUANTIZE_DETAILS}
    if "backend" in given:
        old = given["backend"]
        given["backend"] = backend_name(old)
        if given["backend"] != old:
            warnings.warn(f"backend={old!r} is now spelled backend={given['backend']!r}", DeprecationWarning,
                          stacklevel=3)
    unknown = sorted(set(given) - {f.name for f in fields(CompileOptions)})
    if unknown:
        raise TypeError(f"{command}() got an unexpected keyword argument {unknown[0]!r}")
    base = options if options is not None else CompileOptions(**defaults)
    base = base.with_fields(given)
    quantize = quantize_options(base.quantize, **details)
    return (replace(base, quantize=quantize) if quantize is not base.quantize else base).checked(command)
