"""Weight quantization as the API and the command line take it: `quantize="int4"` or `--quantize int8`.

The pass itself is passes/quantize.py, in the pipeline backends/pipeline.py assembles; this reads the
options, checking them as a user's input, for compile and for generation alike.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError

if TYPE_CHECKING:  # the command line reads its arguments without importing the passes

    from pseudoformer.passes.quantize import QuantizeOptions

__all__ = ["add_arguments", "from_arguments", "int8_activations", "options"]

KINDS = {"int4": 4, "int8": 8}


def options(quantize: str | QuantizeOptions | None, *, block_size: int | None = None, symmetric: bool = False,
            accuracy_level: int | None = None, embeddings: bool = False, method: str | None = None,
            output: bool = True) -> QuantizeOptions | None:
    """The options of `quantize` ("int4", "int8", a QuantizeOptions, or None: no quantization).

    The one reader of quantize options: compile, generate, prepare, Generator, lower and the command
    line all take them through here, so each takes the same spellings.
    """
    from pseudoformer.passes.quantize import QuantizeOptions

    details = {"block size": block_size, "symmetric": symmetric or None, "accuracy level": accuracy_level,
               "quantize embeddings": embeddings or None, "method": method,
               "keep output fp32": None if output else True}
    given = [k for k, v in details.items() if v is not None]
    if quantize is None:
        if given:
            raise UsageError(f"{', '.join(given)}: these set how weights are quantized; add --quantize int4|int8")
        return None
    if isinstance(quantize, QuantizeOptions):
        if given:
            raise UsageError(f"{', '.join(given)}: set these in the QuantizeOptions given as quantize")
        opts = quantize
    else:
        if quantize not in KINDS:
            raise UsageError(f"--quantize {quantize}: choose {' or '.join(KINDS)}")
        d = QuantizeOptions()
        opts = QuantizeOptions(bits=KINDS[quantize], block_size=d.block_size if block_size is None else block_size,
                               symmetric=symmetric,
                               accuracy_level=d.accuracy_level if accuracy_level is None else accuracy_level,
                               embeddings=embeddings, method=method or d.method, output=output)
    problems = opts.problems()
    if problems:
        raise UsageError("--quantize: " + "; ".join(problems))
    return opts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quantize", choices=sorted(KINDS), help="store the weight matrices in 4 or 8 bits, in blocks "
                   "(onnx: com.microsoft MatMulNBits)")
    p.add_argument("--block-size", type=int, metavar="N", help="weights per scale along K: 16, 32 (default), 64, "
                   "128 or 256")
    p.add_argument("--symmetric", action="store_true", help="no zero points: each block is centred on 0")
    p.add_argument("--accuracy-level", type=int, metavar="L", help="MatMulNBits' accuracy_level: 4 (default) "
                   "quantizes the activations to int8 inside the op, the fast one on a CPU; 0 computes as the "
                   "reference does (int8 weights then run far slower than fp32). --backend tvm computes as 0 "
                   "does unless 4 is given: then its int4 products take int8 activations too")
    p.add_argument("--quantize-embeddings", action="store_true",
                   help="also every embedding table (the output projection and an embedding tied to it are "
                   "quantized by default; a tied pair is stored once)")
    p.add_argument("--keep-output-fp32", action="store_true",
                   help="keep the output projection (unembedding), and an embedding tied to it, in fp32: "
                   "more accurate, bigger and slower (docs/quantization.md)")
    p.add_argument("--quantize-method", choices=["balanced", "mse", "rtn"],
                   help="balanced (default): mse with each block's errors summing to about zero; mse: per block, "
                   "the clipping with the least squared error; rtn: round to nearest")


def int8_activations(args: Any, backend: str | None) -> bool:
    """Whether the tvm backend's 4-bit products take int8 activations: `--accuracy-level 4` given on the
    command line. Not by default, where TVM stays exact to the reference (level 0's arithmetic), as it was
    before the option; onnxruntime's default, 4, is the file's attribute, not a choice of kernel."""
    return backend == "tvm" and args.accuracy_level == 4 and args.quantize == "int4"


def from_arguments(args: Any) -> QuantizeOptions | None:
    return options(args.quantize, block_size=args.block_size, symmetric=args.symmetric,
                   accuracy_level=args.accuracy_level, embeddings=args.quantize_embeddings,
                   method=args.quantize_method, output=not args.keep_output_fp32)
