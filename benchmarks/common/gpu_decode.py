"""benchmarks/gpu.py's decode rows: ours (`generate --provider cuda --dtype float16 --contrib-ops`, int4 too)
against onnxruntime-genai on its own builder's folder of the same checkpoint, like for like, in one process.

    shape          HF config (random weights, saved once, read by both sides)
    SmolLM2-135M   Llama: 30 layers, d 576, 9 heads (3 key/value), MLP 1536, vocabulary 49152, tied
    Qwen2.5-0.5B   Qwen2: 24 layers, d 896, 14 heads (2 key/value), MLP 4864, vocabulary 151936, tied, qkv biases

    precision      ours                                           genai's builder
    fp16           --dtype float16 --contrib-ops                  -p fp16 -e cuda
    int4           the same, --quantize int4 --symmetric          -p int4 -e cuda (blocks of 32, symmetric,
                   --block-size 32 --accuracy-level 4             fp16 activations)

On CUDA ours is timed twice: as above, and with --cuda-graph (the step captured once as a CUDA graph and replayed,
generation/step_values.py), a generator of its own made after the first is let go. The CPU (--smoke) has no
CUDA graphs: that row's cells are empty there, with the reason.

Each is timed as `generate` times itself (generation/generator.py's Generation: the prefill, the prompt and its
first token, and every later step) and as common/genai_generate.time_model times genai: the median over rounds of the
prefill and of each round's median step. A genai that is not importable here, or a builder that fails, leaves
its cells empty with the reason; ours never falls back.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

SHAPES = {
    "SmolLM2-135M": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   max_position_embeddings=2048, rope_theta=100000.0, tie_word_embeddings=True,
                                   rms_norm_eps=1e-5)),
    "Qwen2.5-0.5B": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                   max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True,
                                   rms_norm_eps=1e-6)),
}
SMOKE = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 128}
PRECISIONS = ("fp16", "int4")


@dataclass
class DecodeRow:
    shape: str
    precision: str
    batch: int
    ours_prefill_ms: float
    ours_step_ms: float
    genai_prefill_ms: float | None
    genai_step_ms: float | None
    note: str = ""
    graph_step_ms: float | None = None  # ours with --cuda-graph (CUDA only)


def checkpoint(shape: str, directory: Path, smoke: bool) -> tuple[str, Path, int]:
    """The HF checkpoint of `shape` (random weights, and a tokenizer: genai's builder builds nothing without one),
    its .alg, and its vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from common.checkpoints import write_tokenizer

    kind, sizes = SHAPES[shape]
    sizes = {**sizes, **SMOKE} if smoke else sizes
    config, model = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    torch.manual_seed(0)
    model(config(**sizes)).eval().save_pretrained(directory)
    write_tokenizer(directory)
    return str(ROOT / "models" / f"{kind}.alg"), directory, int(sizes["vocab_size"])


def ours_generator(alg: str, weights: Path, precision: str, provider: str,  # type: ignore[no-untyped-def]
                   cuda_graph: bool = False):
    from pseudoformer.generation.api import prepare
    from pseudoformer.passes.quantize import QuantizeOptions

    quantize = QuantizeOptions(bits=4, block_size=32, symmetric=True, accuracy_level=4) if precision == "int4" else None
    return prepare(alg, weights=weights, dtype="float16", provider=provider, quantize=quantize,
                   contrib_ops=True, cuda_graph=cuda_graph).generator


def ours(generator, prompts: np.ndarray, new: int, rounds: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Our median prefill and step, in ms."""
    from pseudoformer.generation.sampling import Sampling

    prefill, steps = [], []
    for r in range(rounds + 1):  # round 0 warms up
        out = generator.generate(prompts, max_new_tokens=new, sampling=Sampling(temperature=0))
        if r:
            prefill.append(out.prefill_seconds)
            steps.append(statistics.median(out.step_seconds))
    return statistics.median(prefill) * 1e3, statistics.median(steps) * 1e3


def genai_folder(weights: Path, precision: str, ep: str, out: Path) -> tuple[Path | None, str]:
    """genai's builder folder for the checkpoint, or None and why not."""
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(weights),
                           "-o", str(out), "-p", precision, "-e", ep, "-c", str(out.parent / "builder-cache")],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"genai's builder failed: {last[:160]}"
    return out, ""


def genai(folder: Path, prompts: np.ndarray, new: int, rounds: int) -> tuple[float, float]:
    import onnxruntime_genai as og

    from common.genai_generate import time_model

    model = og.Model(str(folder))
    timed = time_model(og, model, prompts, new, rounds)
    return statistics.median(timed["prefill_s"]) * 1e3, statistics.median(timed["step_s"]) * 1e3


def genai_missing() -> str | None:
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError as e:
        return f"onnxruntime-genai is not importable in this process ({e})"
    return None


def decode_rows(*, smoke: bool, provider: str, prompt: int, new: int, rounds: int, batches: tuple[int, ...],
                out_of_time: object) -> list[DecodeRow]:
    """Every decode row; `out_of_time()` is asked before each shape and precision (the script's budget)."""
    rows = []
    missing = genai_missing()
    ep = "cuda" if provider == "cuda" else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            alg, weights, vocab = checkpoint(shape, Path(tmp) / shape, smoke)
            for precision in PRECISIONS:
                if out_of_time():  # type: ignore[operator]
                    rows += [DecodeRow(shape, precision, b, float("nan"), float("nan"), None, None,
                                       "not run: the time budget was spent") for b in batches]
                    continue
                folder, why = (None, missing) if missing else genai_folder(weights, precision, ep,
                                                                          Path(tmp) / f"genai-{shape}-{precision}")
                prompts = {b: np.random.default_rng(b).integers(0, vocab, (b, prompt)) for b in batches}
                generator = ours_generator(alg, weights, precision, provider)
                done = []
                for batch in batches:
                    p, s = ours(generator, prompts[batch], new, rounds)
                    gp = gs = None
                    if folder is not None:
                        gp, gs = genai(folder, prompts[batch], new, rounds)
                    done.append(DecodeRow(shape, precision, batch, p, s, gp, gs, why or ""))
                del generator  # its sessions and cache, before the next one is made
                if provider == "cuda":
                    generator = ours_generator(alg, weights, precision, provider, cuda_graph=True)
                    for row in done:
                        row.graph_step_ms = ours(generator, prompts[row.batch], new, rounds)[1]
                    del generator
                rows += done
    return rows
