"""`pseudoformer compile FILE --weights DIR --genai-folder OUT`: an onnxruntime-genai model folder (deploy_genai.py).

The options of a compile that the folder's graph cannot honour are refused by name, by CompileOptions.problems
("genai"): genai runs an ONNX decoder in float32 or float16 here, with the attention mask and positions of its own
interface, on the CPU or (--provider cuda, onnxruntime-genai-cuda) on CUDA.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pseudoformer.base.terminal import escape

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions


def _log_of_probabilities(args: argparse.Namespace, entry: str) -> bool:
    """Whether the file's inference algorithm reads `entry`'s output as probabilities (softmax inside the
    model): genai takes logits, so the folder's are their log. Without an inference algorithm, logits."""
    from pseudoformer.base.errors import AlgError, CompileError
    from pseudoformer.frontend.inference import plan_inference
    from pseudoformer.frontend.modules import load_program
    from pseudoformer.model import resolve_source

    try:
        plan = plan_inference(load_program(resolve_source(args.file), include=args.include))
    except (CompileError, AlgError):
        return False
    return plan.model == entry and plan.model_output == "probabilities"


def compile_folder(args: argparse.Namespace, options: CompileOptions, say: Callable[[str], None]) -> int:
    """`options`: compile_options.from_arguments', checked for the folder."""
    from pseudoformer.deploy_genai import export
    from pseudoformer.model import load

    quantize = options.quantize
    model = load(args.file, entry=args.entry, config=args.config, defines=args.defines, weights=args.weights,
                 seed=args.seed, include=args.include, max_nodes=args.max_nodes,
                 allow_nonfinite=args.allow_nonfinite)
    folder = export(model, Path(args.genai_folder), options, weights=args.weights,
                    log=_log_of_probabilities(args, model.entry))
    decoder = folder.config["model"]["decoder"]
    kind = options.dtype if quantize is None else f"{options.dtype}, weights {quantize.describe()}"
    kind += ", for onnxruntime-genai-cuda" if options.provider == "cuda" else ""
    tokenizer = ("" if "tokenizer.json" in folder.files else
                 "; no tokenizer.json in the checkpoint: genai's Tokenizer will not load, give it token ids")
    say(escape(f"wrote {folder.path}: {model.entry} for onnxruntime-genai, {kind}, "
               f"{decoder['num_hidden_layers']} layers of {decoder['num_attention_heads']} heads "
               f"({decoder['num_key_value_heads']} key/value) of {decoder['head_size']}; "
               f"files {', '.join(folder.files)}{tokenizer}"))
    return 0
