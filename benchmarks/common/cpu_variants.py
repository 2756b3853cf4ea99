"""bench_cpu.py's models and every variant of them, built and run.

A model is a `Spec`: its HuggingFace twin (random weights, fixed seed) and what its compiled graph must
contain. Its variants are ours (`pseudoformer.compile` + save), the `torch.onnx.export`s (legacy,
dynamo), `optimize_model` on an export, each on an ONNX Runtime CPU session, and eager PyTorch.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Spec:
    """One model: how to build its HF twin, and what its compiled graph must contain."""

    name: str
    alg: str
    ort_type: str  # model_type for onnxruntime.transformers.optimizer
    full: dict[str, Any]
    quick: dict[str, Any]
    causal: bool

    def config(self, quick: bool) -> dict[str, Any]:
        return self.quick if quick else self.full

    def layers(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_layer", c.get("num_hidden_layers", 12)))

    def heads(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_head", c.get("num_attention_heads", 12)))

    def hidden(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_embd", c.get("hidden_size", 768)))

    def vocab(self, quick: bool) -> int:
        return int(self.config(quick).get("vocab_size", 50257 if self.name == "gpt2" else 30522))

    def layer_norms(self, quick: bool) -> int:
        # GPT-2: two per layer and the final one; BERT: two per layer, the embedding's and the MLM head's.
        return 2 * self.layers(quick) + (1 if self.name == "gpt2" else 2)


SPECS = {
    "gpt2": Spec(
        "gpt2", "gpt2.alg", "gpt2",
        full={},  # GPT2Config() is GPT-2 small
        # bos/eos default to 50256, outside the tiny vocabulary, which transformers warns about.
        quick=dict(n_embd=64, n_head=4, n_layer=2, n_positions=128, vocab_size=512, bos_token_id=0, eos_token_id=0),
        causal=True,
    ),
    "bert": Spec(
        "bert", "bert.alg", "bert",
        full={},  # BertConfig() is BERT-base
        quick=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                   vocab_size=512, max_position_embeddings=128),
        causal=False,
    ),
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The exporters print progress and warnings by the screenful; keep the bench's own output readable."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def build_hf(spec: Spec, quick: bool, seed: int, attn: str | None = None) -> Any:
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    kw = dict(spec.config(quick))
    if attn is not None:
        kw["attn_implementation"] = attn
    if spec.name == "gpt2":
        return GPT2LMHeadModel(GPT2Config(use_cache=False, **kw)).eval()
    return BertForMaskedLM(BertConfig(**kw)).eval()


def load_hf(spec: Spec, ckpt: Path, attn: str) -> Any:
    """The checkpoint again with another attention implementation: the same weights, bit for bit."""
    from transformers import BertForMaskedLM, GPT2LMHeadModel

    cls = GPT2LMHeadModel if spec.name == "gpt2" else BertForMaskedLM
    with quiet():
        return cls.from_pretrained(ckpt, attn_implementation=attn).eval()


def logits_module(hf: Any, *, explicit_mask: bool) -> Any:
    import torch

    class Logits(torch.nn.Module):
        """token ids → logits, the one input and output every variant shares."""

        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            if explicit_mask:
                # An all-ones mask is HF's default meaning; passing it skips transformers 5's packed-
                # sequence detection, whose aten::diff the legacy exporter cannot translate.
                return self.hf(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
            return self.hf(input_ids=input_ids).logits

    # The legacy exporter restores the module's training flag afterwards: an un-eval'd wrapper would
    # leave the HF model in training mode (dropout on) for the eager baseline.
    return Logits().eval()


def compile_ours(spec: Spec, ckpt: Path, out: Path, opt_level: int | None) -> tuple[float, str]:
    """pseudoformer.compile + save, timed in-process. Returns (seconds, the opt level it ran at)."""
    import pseudoformer

    alg = ROOT / "models" / spec.alg
    source: str | Path = alg if alg.is_file() else spec.name  # installed package without the checkout
    kwargs: dict[str, Any] = {"weights": ckpt}
    # Checked, not assumed: the script must work with a pseudoformer from before opt_level existed.
    param = inspect.signature(pseudoformer.compile).parameters.get("opt_level")
    if param is None:
        used = "none (this pseudoformer.compile takes no opt_level)"
    elif opt_level is None:
        used = f"{param.default} (default)"
    else:
        kwargs["opt_level"] = opt_level
        used = str(opt_level)
    t = time.perf_counter()
    pseudoformer.compile(source, **kwargs).save(out)
    return time.perf_counter() - t, used


def torch_export(spec: Spec, hf: Any, exporter: str, out: Path, opset: int, trace: Any) -> float:
    """torch.onnx.export with batch and sequence dynamic (as ours is), timed including the save."""
    import torch

    dynamo = exporter == "dynamo"
    module = logits_module(hf, explicit_mask=not dynamo and spec.name == "gpt2")
    kwargs: dict[str, Any]
    if dynamo:
        kwargs = dict(dynamic_shapes={"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", min=2)}})
    else:
        kwargs = dict(dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    t = time.perf_counter()
    with quiet(), torch.no_grad():
        torch.onnx.export(module, (trace,), str(out), input_names=["input_ids"], output_names=["logits"],
                          opset_version=opset, dynamo=dynamo, **kwargs)
    return time.perf_counter() - t


def ort_optimize(spec: Spec, src: Path, out: Path, quick: bool) -> tuple[float, dict[str, int], str]:
    from onnxruntime.transformers.optimizer import optimize_model

    t = time.perf_counter()
    with quiet():
        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        try:
            opt = optimize_model(str(src), model_type=spec.ort_type, num_heads=spec.heads(quick),
                                 hidden_size=spec.hidden(quick))
            model_type = spec.ort_type
        except IndexError:
            # ORT's GPT-2 post-processing assumes every Gemm has a bias, and the dynamo export's tied
            # lm_head has none; the "bert" optimizer runs the same fusions without that step.
            opt = optimize_model(str(src), model_type="bert", num_heads=spec.heads(quick),
                                 hidden_size=spec.hidden(quick))
            model_type = "bert"
        big = opt.model.ByteSize() > 2**31 - 2**26
        opt.save_model_to_file(str(out), use_external_data_format=big)
    fused = {k: int(v) for k, v in (opt.get_fused_operator_statistics() or {}).items() if v}
    return time.perf_counter() - t, fused, model_type


def ort_session(path: Path, threads: int, profile_prefix: Path | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def ort_runner(sess: Any) -> Callable[[np.ndarray], np.ndarray]:
    name = sess.get_inputs()[0].name
    out = sess.get_outputs()[0].name
    return lambda x: sess.run([out], {name: x})[0]


def eager_runner(hf: Any) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return hf(input_ids=torch.from_numpy(x)).logits.numpy()

    return run
