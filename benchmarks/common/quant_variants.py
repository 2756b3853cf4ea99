"""Quantized variants of one compiled model, and how far each is from the fp32 model: for bench_quant.py
(GPT-2) and bench_llama.py (the SmolLM2-sized Llama).

  ours        pseudoformer.compile(..., quantize=QuantizeOptions(...)) from the same .alg and weights
  ort         onnxruntime's own quantizer (onnxruntime.quantization.matmul_nbits_quantizer) applied to our
              fp32 .onnx after onnxruntime's basic graph optimisation (which folds the transposes and
              concatenations of weights into initializers, so every weight matmul has a constant B,
              which the quantizer needs): DEFAULT (round to nearest, MLAS), and HQQ (4 bits)

Accuracy is measured on onnxruntime, at accuracy_level 0 unless a variant says otherwise, against the
fp32 .onnx on the same token ids: the logits' relative error ‖L_q − L‖ / ‖L‖ over every position,
the largest absolute error, the top-1 agreement, and the mean KL(p ‖ p_q) of the next-token
distributions (nats).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Accuracy:
    rel_error: float
    max_abs: float
    top1: float
    kl: float


def accuracy(logits: np.ndarray, reference: np.ndarray) -> Accuracy:
    a, r = logits.astype(np.float64), reference.astype(np.float64)
    la = a - a.max(-1, keepdims=True)
    lr = r - r.max(-1, keepdims=True)
    la -= np.log(np.exp(la).sum(-1, keepdims=True))
    lr -= np.log(np.exp(lr).sum(-1, keepdims=True))
    kl = float((np.exp(lr) * (lr - la)).sum(-1).mean())
    return Accuracy(float(np.linalg.norm(a - r) / np.linalg.norm(r)), float(np.abs(a - r).max()),
                    float((a.argmax(-1) == r.argmax(-1)).mean()), kl)


def run_logits(path: Path, batches: list[np.ndarray], output: str | None, threads: int = 2) -> np.ndarray:
    """The model's `output` (None: its first) for each batch of token ids, concatenated."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name, output = session.get_inputs()[0].name, output or session.get_outputs()[0].name
    return np.concatenate([session.run([output], {name: x})[0] for x in batches])


def ort_folded(fp32: Path, out: Path) -> Path:
    """Our fp32 .onnx after onnxruntime's basic optimisations (constant folding), saved."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(out)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", out.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    ort.InferenceSession(str(fp32), so, providers=["CPUExecutionProvider"])
    return out


def ort_quantized(folded: Path, out: Path, *, bits: int, block_size: int, symmetric: bool, embeddings: bool,
                  algorithm: str, unembedding: str | None) -> Path:
    """onnxruntime's quantizer on `folded`: its MatMuls (and Gathers, with `embeddings`) by weight; the
    unembedding MatMul (its B initializer is named `unembedding`) only with `embeddings`."""
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as mq

    logging.disable(logging.WARNING)  # the quantizer logs every node
    model = onnx.load(str(folded))
    ops = ("MatMul", "Gather") if embeddings and algorithm != "hqq" else ("MatMul",)
    exclude = [] if embeddings or unembedding is None else \
        [n.name for n in model.graph.node if n.op_type == "MatMul" and unembedding in n.input]
    if algorithm == "hqq":
        config: object = mq.HQQWeightOnlyQuantConfig(block_size=block_size, bits=bits, op_types_to_quantize=ops)
    else:
        config = mq.DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric, bits=bits,
                                                 op_types_to_quantize=ops)
    q = mq.MatMulNBitsQuantizer(model, bits=bits, block_size=block_size, is_symmetric=symmetric,
                                nodes_to_exclude=exclude, algo_config=config)
    q.process()
    for stale in (out, out.with_name(out.name + ".data")):
        stale.unlink(missing_ok=True)
    q.model.save_model_to_file(str(out), use_external_data_format=True)
    logging.disable(logging.NOTSET)
    return out


def file_bytes(path: Path) -> int:
    """The model file and its external data, if any."""
    extra = [p for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path]
    return path.stat().st_size + sum(p.stat().st_size for p in extra)


def op_counts(path: Path, types: tuple[str, ...] = ("MatMul", "MatMulNBits", "Gather", "GatherBlockQuantized"),
              ) -> Mapping[str, int]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {t: sum(n.op_type == t for n in model.graph.node) for t in types}
