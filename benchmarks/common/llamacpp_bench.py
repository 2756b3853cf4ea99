"""bench_int4.py's llama.cpp contender, on our side: the files it runs, its rounds, and its check against HF.

llama.cpp runs in llama-cpp-python's own venv (llamacpp_timing.py, a subprocess per call); what runs here is
the GGUF conversion (llamacpp_gguf.py) and HF's reference (llamacpp_check.py, a subprocess of this
interpreter, so that HF's float32 model is not held beside our generators). Per shape, next to genai's folder
ROOT/<rung>/int4:

  ROOT/<rung>/             the random HF checkpoint (scale_checkpoints.py; written when missing)
  ROOT/<rung>/bf16.gguf    the checkpoint as GGUF (its bfloat16 values unchanged)
  ROOT/<rung>/q4_0.gguf    llama_model_quantize's Q4_0 of it (q4_0-pure.gguf with --llamacpp-pure)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.harness import decode_flags

HERE = Path(__file__).resolve().parents[1]  # benchmarks/: the scripts this runs as subprocesses

# bench_int4's tiny Llama (SHAPES["tiny"]) as a HF checkpoint, for --quick and the tests
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000}


def skip_reason(args: argparse.Namespace) -> str | None:
    """Why the llamacpp contender cannot run with these options (None: it can)."""
    if not args.llamacpp_python:
        return ("no llama.cpp: set PSEUDOFORMER_LLAMACPP_PYTHON or --llamacpp-python to the python of a venv with "
                "llama-cpp-python built from source (../shared/anchors/llama-cpp.md)")
    if not Path(args.llamacpp_python).exists():
        return f"--llamacpp-python {args.llamacpp_python} does not exist"
    if not args.genai_root:
        return "it runs the shape's HF checkpoint ROOT/<rung>: give --genai-root ROOT"
    return None


def rung_config(rung: str) -> dict[str, Any]:
    from common.checkpoints import SHAPES

    return {**SHAPES["SmolLM2-135M"], **TINY} if rung == "tiny-llama" else SHAPES[rung]


def json_line(cmd: list[str]) -> dict[str, Any]:
    """Run cmd, return the JSON of its last line of output; its stderr in the error when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class LlamaCpp:
    """One shape's llama.cpp files, made when missing, and the calls that time and check them."""

    def __init__(self, args: argparse.Namespace, shape: str, rung: str, vocab: int) -> None:
        from common.checkpoints import write_checkpoint, write_tokenizer
        from common.llamacpp_gguf import convert

        self.args, self.shape, self.vocab = args, shape, vocab
        self.python = str(args.llamacpp_python)
        self.checkpoint = Path(args.genai_root) / rung
        if not (self.checkpoint / "model.safetensors").exists():
            write_checkpoint(self.checkpoint, rung_config(rung))
            write_tokenizer(self.checkpoint)
        config = json.loads((self.checkpoint / "config.json").read_text())
        if config["vocab_size"] != vocab:
            raise ValueError(f"{self.checkpoint}: vocabulary {config['vocab_size']}, the shape's is {vocab}")
        self.bf16 = self.checkpoint / "bf16.gguf"
        if not self.bf16.exists():
            partial = self.bf16.with_name("bf16.gguf.partial")
            convert(self.checkpoint, partial)
            partial.replace(self.bf16)
        self.q4 = self.checkpoint / ("q4_0-pure.gguf" if args.llamacpp_pure else "q4_0.gguf")
        if not self.q4.exists():
            partial = self.q4.with_name(self.q4.name + ".partial")
            json_line([self.python, str(HERE / "llamacpp_timing.py"), "quantize", str(self.bf16), str(partial),
                       "--threads", str(args.threads), *(["--pure"] if args.llamacpp_pure else [])])
            partial.replace(self.q4)
        self.model_bytes = 0

    def _time(self, model: Path, rounds: int, logits: Path | None = None) -> dict[str, Any]:
        a = self.args
        out = json_line([self.python, str(HERE / "llamacpp_timing.py"), "time", str(model),
                         *decode_flags(a, rounds=rounds, threads=a.llamacpp_threads),
                         "--vocab", str(self.vocab), *(["--save-logits", str(logits)] if logits else [])])
        return out

    def time_round(self) -> dict[str, Any]:
        """One timed generation of the Q4_0 file (after an untimed one), in a process of its own."""
        out = self._time(self.q4, 1)
        self.model_bytes = out["model_bytes"]
        return out

    def check(self, model: Path) -> dict[str, Any]:
        """llama.cpp's greedy logits of `model` against HF's on the checkpoint (llamacpp_check.agreement)."""
        with tempfile.TemporaryDirectory(dir=self.checkpoint) as tmp:
            logits = Path(tmp) / "logits.npy"
            out = self._time(model, 0, logits)
            return json_line([sys.executable, str(HERE / "llamacpp_check.py"), str(self.checkpoint), str(logits),
                              "--prompt", str(self.args.prompt), "--vocab", str(self.vocab), "--tokens",
                              ",".join(map(str, out["tokens"])), ])

    def check_against_hf(self) -> list[str]:
        """Lines for below the table: each file's agreement with HF, and the Q4_0 file's size."""
        import gguf

        types = sorted({t.tensor_type.name for t in gguf.GGUFReader(self.q4).tensors if len(t.shape) > 1})
        embedding = next(t.tensor_type.name for t in gguf.GGUFReader(self.q4).tensors if t.name == "token_embd.weight")
        lines = [f"llamacpp on {self.shape}: {self.q4.name}, {self.model_bytes / 1e6:.0f} MB of tensors, matrices "
                 f"{'/'.join(types)}, the tied embedding and unembedding {embedding} (llama.cpp's Q4_0 takes Q6_K "
                 f"there, Q8_0 when the width is no multiple of 256); checkpoint {self.checkpoint} (genai's, not "
                 "our other contenders' weights)"]
        for model in (self.q4, self.bf16):
            r = self.check(model)
            lines.append(f"llamacpp {model.name} against HF float32 on that checkpoint, {r['steps']} greedy steps: "
                         f"top-1 agreement {r['top1']:.2f}, relative error of the logits median "
                         f"{r['rel_err_median']:.3f} (max {r['rel_err_max']:.3f}), correlation ≥ {r['corr_min']:.3f}")
        return lines
