"""What the decoding benchmarks share (bench_llama.py, bench_generate.py, bench_quant.py, bench_int4.py,
bench_scale.py and the tvm_* scripts): SmolLM2-135M's config and a random checkpoint of it, the decode shapes
as .alg defines, HF eager generation, the onnxruntime-genai worker and builder, one ORT matrix-vector product,
and the streaming read bandwidth a decode step's floor is measured against.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from common.harness import interleaved

ROOT = Path(__file__).resolve().parents[2]
# Each shape's model and defines (bench_int4.py and the tvm_* scripts)
SHAPES: dict[str, tuple[str, list[str]]] = {
    "smollm2": ("models/llama.alg", ["L=30", "H=9", "H_kv=3", "d_e=576", "d_attn=64", "d_mlp=1536", "N_V=49152"]),
    "qwen0.5b": ("models/qwen2.alg", ["L=24", "H=14", "H_kv=2", "d_e=896", "d_attn=64", "d_mlp=4864",
                                      "N_V=151936"]),
    "qwen1.5b": ("models/qwen2.alg", ["L=28", "H=12", "H_kv=2", "d_e=1536", "d_attn=128", "d_mlp=8960",
                                      "N_V=151936"]),
    "tiny": ("models/llama.alg", ["L=2", "H=4", "H_kv=2", "d_e=64", "d_attn=16", "d_mlp=128", "N_V=1000"]),
}

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
TINY = {**SMOLLM2, "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512}


def make_checkpoint(directory: Path, quick: bool) -> None:
    """A random LlamaForCausalLM with its config, and a tokenizer (the builder insists on one)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**(TINY if quick else SMOLLM2))).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(directory)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(256)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1", eos_token="w2").save_pretrained(directory)


def genai_venv(venv: Path) -> Path:
    """The interpreter of the virtual environment onnxruntime-genai runs in, made on first use."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"# making {venv} for onnxruntime-genai (pip install onnxruntime-genai)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "onnxruntime-genai"], check=True)
    return python


def genai_build(python: Path, checkpoint: Path, out: Path, log: Path) -> str:
    """Run the model builder (fp32, CPU) from the genai package's source with this interpreter."""
    found = subprocess.run([str(python), "-c", "import onnxruntime_genai, os; "
                            "print(os.path.dirname(onnxruntime_genai.__file__), onnxruntime_genai.__version__)"],
                           check=True, capture_output=True, text=True).stdout.split()
    builder, version = Path(found[0]) / "models", found[1]
    cmd = [sys.executable, str(builder / "builder.py"), "-i", str(checkpoint), "-o", str(out), "-p", "fp32",
           "-e", "cpu", "-c", str(out / "cache")]
    with open(log, "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(builder)})
    return version


class Genai:
    """The genai worker process (llama_genai.py): one whole generation per request."""

    def __init__(self, python: Path, model_dir: Path, threads: int, profile: Path | None = None) -> None:
        extra = [str(profile)] if profile is not None else []
        self.proc = subprocess.Popen([str(python), str(ROOT / "benchmarks" / "llama_genai.py"), str(model_dir),
                                      str(threads), *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = json.loads(self._line())["ready"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the onnxruntime-genai worker stopped; see its messages above")
        return line

    def generate(self, prompt: list[int], new: int) -> tuple[list[int], float, list[float]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"prompt": prompt, "new": new}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self._line())
        # The first generate_next_token picks from the prompt's logits; each later one runs the model once.
        return out["tokens"], out["prefill"], out["steps"][1:]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def ort_gemv(w: np.ndarray, threads: int) -> object:
    """An onnxruntime session of one row x [1, K] times the constant w [K, N]: the product a decode step makes."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, n = w.shape
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(w, "w")])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def read_bandwidth(threads: int) -> float:
    """Bytes per second this machine streams from memory: the better of a numpy sum of 512 MB and an
    ORT MatMul of one row by a 512 MB matrix (the GEMV a decode step is made of)."""
    a = np.ones(2**27, np.float32)
    best = []
    for _ in range(5):
        start = time.perf_counter()
        a.sum()
        best.append(time.perf_counter() - start)
    rates = [a.nbytes / min(best)]
    k, n = 512, 2**18
    w = np.random.default_rng(0).random((k, n), dtype=np.float32)
    session = ort_gemv(w, threads)
    x = np.ones((1, k), np.float32)
    best = []
    for _ in range(7):
        start = time.perf_counter()
        session.run(None, {"x": x})
        best.append(time.perf_counter() - start)
    rates.append(w.nbytes / min(best))
    return max(rates)


def step_bytes(weights: dict[str, np.ndarray]) -> int:
    """Bytes of weights one decode step reads: all of them, but of the embedding table only one row."""
    return sum(a.nbytes for name, a in weights.items() if name != "W_e")



def torch_generate(hf, prompt: np.ndarray, n: int, logits_to_keep: int) -> tuple[list[int], float, list[float]]:
    import torch

    with torch.inference_mode():
        ids = torch.from_numpy(prompt)
        start = time.perf_counter()
        kw = {"logits_to_keep": logits_to_keep} if logits_to_keep else {}
        out = hf(ids, use_cache=True, **kw)
        y = out.logits[:, -1].argmax(-1)
        prefill = time.perf_counter() - start
        tokens, steps, past = [int(y)], [], out.past_key_values
        for _ in range(n - 1):
            start = time.perf_counter()
            out = hf(y[:, None], past_key_values=past, use_cache=True)
            y = out.logits[:, -1].argmax(-1)
            past = out.past_key_values
            steps.append(time.perf_counter() - start)
            tokens.append(int(y))
    return tokens, prefill, steps


Generation = tuple[list[int], float, list[float]]  # greedy tokens, prefill seconds, each step's seconds


def generation_rounds(variants: Mapping[str, Callable[[], Generation]], rounds: int
                      ) -> tuple[dict[str, dict[str, list[float]]], dict[str, list[int]]]:
    """Whole generations interleaved: a warm-up round, then `rounds` rotating, 0.2 s apart (the last variant's
    worker threads stop spinning). Each variant's prefill and median step seconds by round, and its tokens."""
    results = interleaved(variants, reps=rounds, warmup=1, gap_s=0.2)
    rows = {k: {"prefill": [g[1] for g in gs], "step": [statistics.median(g[2]) for g in gs]}
            for k, gs in results.items()}
    return rows, {k: gs[-1][0] for k, gs in results.items() if gs}
