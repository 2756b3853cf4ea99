"""The `pseudoformer` command line's arguments: one parser, its subcommands and their options.

The handlers are in pseudoformer/cli.py (and generation/cli.py, training/cli.py); tests/docs reads this
parser to check that every flag the docs name exists.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pseudoformer.base import limits
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.base.terminal import escape
from pseudoformer.compile_options import add_backend_argument, add_provider_argument
from pseudoformer.quantization import add_arguments as add_quantize_arguments
from pseudoformer.version import __version__


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # A bad argument is a user error like any other: one message, exit 1.
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {escape(message)}", file=sys.stderr)  # one line, whatever the argument held
        raise SystemExit(1)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Refuse an empty value (`-o ""`, `--weights ""`, `-D ""`): the handlers test options for truth, so an
        empty path would be taken for an option not given (no output written, random weights, the checkpoint's
        tokenizer), silently. No option or file of any command means anything by an empty string."""
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if "" in (value if isinstance(value, list | tuple) else [value]):
                name = "/".join(action.option_strings) or action.metavar or action.dest
                self.error(f"argument {name}: the value is empty")
        return namespace, extras


def _model_args(p: argparse.ArgumentParser, entry: bool = True) -> None:
    if entry:
        p.add_argument("--entry", help="the algorithm to compile (a name, or its number as in `Algorithm 4`)")
    p.add_argument("--config", help="a TOML file of hyperparameters (default: the .toml beside the .alg file)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a hyperparameter, e.g. -D L=2 or -D ℓ_max=128")
    p.add_argument("--include", action="append", default=[], metavar="DIR",
                   help="a directory `use` may read from, besides the entry file's and the installed models/")
    p.add_argument("--max-nodes", type=int, default=MAX_NODES, metavar="N",
                   help=f"refuse a model whose graph would pass N IR nodes (default {MAX_NODES:,})")
    p.add_argument("--max-seq-len", type=int, metavar="N",
                   help="the longest sequence a model without a position table of its own takes (default "
                   f"{limits.MAX_SEQ_LEN:,}; a model with one takes at most its ℓ_max)")


def _weights_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--weights", help="a .safetensors or .gguf file, or a HuggingFace checkpoint directory")
    p.add_argument("--seed", type=int, default=0, help=f"seed of {what} (a whole number ≥ 0)")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="load weights that hold NaN or ±∞ (refused by default, naming the tensors)")


def _opt_arg(p: argparse.ArgumentParser, default: int, what: str) -> None:
    p.add_argument("-O", dest="opt", type=int, default=default, metavar="LEVEL",
                   help=f"optimisation level: -O0 literal, -O1 cleanup, -O2 all passes (default -O{default} {what})")


def _compile_args(p: argparse.ArgumentParser, defaults: bool) -> None:
    """The options that choose a compile's passes and output; `inspect` takes them too (without defaults:
    given, --passes, --refusals, --diff and the viewer follow the whole compile's pipeline)."""
    add_backend_argument(p, "onnx" if defaults else None, "onnx (the default) or tvm (a .so; pip install "
                         "pseudoformer[tvm])")
    p.add_argument("--dtype", default="float32" if defaults else None, help="float32 (default) or float16")
    p.add_argument("--opset", type=int, help="ONNX opset, 17 to 26 (default 24: the newest at which onnxruntime has a "
                   "kernel for every op written)")
    p.add_argument("--padding-mask", action="store_true",
                   help="add an attention_mask input (1 token, 0 padding; pad on the right) per token input")
    p.add_argument("--functions", action="store_true",
                   help="onnx: write each algorithm call (a layer, MHAttention, layer_norm, ...) as an ONNX local "
                   "function, so that Netron shows the paper's structure and folds it")
    p.add_argument("--contrib-ops", action="store_true",
                   help="onnx: let onnxruntime's own kernels take what they compute exactly and faster (com.microsoft "
                   "GroupQueryAttention with the rotation inside, SkipLayerNormalization and its RMS form); the "
                   "file then runs on onnxruntime only")
    add_quantize_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="pseudoformer", description="Compile transformers written as in Formal Algorithms for "
                 "Transformers (Phuong & Hutter, 2022).")
    ap.add_argument("--version", action="version", version=f"pseudoformer {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("check", help="parse and shape-check .alg files")
    c.add_argument("files", nargs="+", metavar="FILE")
    _model_args(c)

    i = sub.add_parser("inspect", help="print the IR graph of an algorithm")
    i.add_argument("file", metavar="FILE", nargs="?")
    _model_args(i)
    _opt_arg(i, 0, "here, so you see the paper's dataflow")
    i.set_defaults(opt=None)  # -O0 for the graph, -O2 for --passes, --refusals and --diff
    _compile_args(i, defaults=False)
    i.add_argument("--after", metavar="PASS", help="show the IR after this pass")
    i.add_argument("--diff", metavar="PASS", help="show what this pass changed")
    i.add_argument("--passes", action="store_true",
                   help="list the passes and their levels; with compile options (--contrib-ops, --quantize, "
                   "--dtype, ...), the pipeline such a compile runs, at -O2 unless -O says")
    i.add_argument("--refusals", action="store_true",
                   help="instead of the graph, say which fusions were refused at -O2 (or -O LEVEL) and why, "
                   "and how often each rule fired")
    i.add_argument("--format", choices=["text", "dot", "json", "html", "svg"], default="text",
                   help="html: an interactive viewer (one offline file) that steps through the passes; svg: a picture")
    i.add_argument("--locations", action="store_true", help="show each node's source line and scope")
    i.add_argument("-o", "--output", help="write to this file instead of stdout")

    k = sub.add_parser("compile", help="compile a model to a deployable file")
    k.add_argument("file", metavar="FILE")
    _model_args(k)
    _weights_args(k, "the random init when no --weights are given")
    _compile_args(k, defaults=True)
    k.add_argument("--target", default="llvm", help="tvm target: llvm (this CPU, the default) or cuda")
    k.add_argument("--provider", default="cpu", help="--genai-folder: the onnxruntime-genai provider the folder's "
                   "config names, cpu (default) or cuda (onnxruntime-genai-cuda)")
    k.add_argument("--cuda-graph", action="store_true",
                   help="--genai-folder with --provider cuda --dtype float16 --contrib-ops: genai captures the step "
                   "as a CUDA graph (enable_cuda_graph 1)")
    k.add_argument("--tvm-params", choices=["args", "bind"],
                   help="tvm: args (the default) passes the weights at run time, saved beside the .so as "
                   "NAME.weights.safetensors; bind compiles them into the .so as constants (one file, "
                   "slower to compile and save)")
    _opt_arg(k, 2, "for deployment")
    out = k.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", help="the file to write, e.g. model.onnx (or model.so for tvm)")
    out.add_argument("--genai-folder", metavar="DIR",
                     help="write an onnxruntime-genai model folder instead: model.onnx (+ .data), genai_config.json "
                     "and the checkpoint's tokenizer files (a decoder; see docs/generation.md, onnxruntime-genai)")

    r = sub.add_parser("run", help="run a model on inputs saved as .npy files")
    r.add_argument("file", metavar="FILE", help="a .alg file (or a compiled model.onnx or TVM model.so)")
    _model_args(r)
    _weights_args(r, "the random init when no --weights are given")
    add_backend_argument(r, None, "numpy (the reference interpreter), onnx (ONNX Runtime) or tvm; the default "
                         "is numpy for a .alg file, onnx for a .onnx file and tvm for a .so file")
    r.add_argument("--target", default="llvm", help="tvm target for a .alg file: llvm (this CPU) or cuda")
    add_provider_argument(r, "run")
    r.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (1 to 4 × the cores)")
    r.add_argument("-O", dest="opt", type=int, metavar="LEVEL",
                   help="optimisation level (default: -O0 on numpy, the reference; -O2 on onnx and tvm)")
    r.add_argument("--input", dest="inputs", action="append", default=[], metavar="NAME=FILE.npy", required=True,
                   help="an input from a .npy file, or written inline as a JSON list: x='[[464, 2068]]'")
    r.add_argument("--max-memory", type=int, metavar="BYTES",
                   help="for a .onnx file: the most memory onnxruntime may use to run it (default: twice the "
                   "file's weights and 4 GiB, at most the memory available)")
    r.add_argument("-o", "--output", required=True, help="the .npz file to write the outputs to")
    r.set_defaults(seed=None)  # None: not given, so that a compiled model can refuse it (0 for a .alg)
    from pseudoformer.generation.cli import add_parser as add_generate

    add_generate(sub, _model_args)
    from pseudoformer.training.cli import add_parser as add_train

    add_train(sub, _model_args)
    return ap
