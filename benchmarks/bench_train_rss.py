"""Peak memory of training end to end: `pseudoformer train` on the command line (load, compile, steps and the
final save, the HF export included) against a plain torch eager script doing the same (from_pretrained,
AdamW, the same batches, save_pretrained), each in a child process of its own, its peak RSS read from
getrusage(RUSAGE_CHILDREN) after it exits.

The workload is GPT-2 small (12 layers, d_e 768, 12 heads, the GPT-2 vocabulary; random weights from a config,
no download), batch 4, sequence 128, AdamW on every parameter; --layers shrinks it (say so when reporting),
--quick makes it tiny (the smoke test).

    python benchmarks/bench_train_rss.py [--steps 3] [--layers N] [--threads 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.harness import machine_facts, training_arguments

ROOT = Path(__file__).resolve().parents[1]
LOSS = ROOT / "tests" / "training" / "gpt2_loss.alg"
SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
QUICK = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101)

TORCH = """
import sys, numpy as np, torch
from transformers import GPT2LMHeadModel
torch.set_num_threads({threads})
model = GPT2LMHeadModel.from_pretrained({hf!r})
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
ids = np.load({data!r}).reshape(-1, {seq})
for i in range({steps}):
    x = torch.from_numpy(ids[i * {batch}:(i + 1) * {batch}])
    logp = torch.log_softmax(model(x).logits, -1)
    loss = -logp[:, :-1].gather(-1, x[:, 1:, None]).squeeze(-1).sum(-1).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
model.save_pretrained({out!r})
"""


def _peak_of(cmd: list[str]) -> float:
    """The peak RSS (MiB) of the command, run alone in a child (this process's children so far: none else)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if after <= before:
        raise RuntimeError("the child's peak is not above an earlier child's: run each measurement in its own process")
    return after / 1024


def main(argv: Sequence[str] | None = None) -> int:
    ap = training_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), steps_help="steps")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--which", choices=["both", "ours", "torch"], default="both", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.seq, args.batch, args.steps = 16, 2, 2
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = dict(QUICK if args.quick else SMALL)
    if args.layers:
        shape["n_layer"] = args.layers
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        GPT2LMHeadModel(GPT2Config(**shape)).save_pretrained(work / "hf")
        ids = np.random.default_rng(0).integers(0, shape["vocab_size"], args.steps * args.batch * args.seq)
        np.save(work / "ids.npy", ids.astype(np.int64))
        ours = [sys.executable, "-c", "import sys; from pseudoformer.cli import main; sys.exit(main())", "train", str(LOSS), "--weights", str(work / "hf"),
                "--data", str(work / "ids.npy"), "--seq-len", str(args.seq), "--batch-size", str(args.batch),
                "--steps", str(args.steps), "--optimizer", "adamw", "--lr", "1e-4", "--no-shuffle",
                "--threads", str(args.threads), "-o", str(work / "ours")]
        script = TORCH.format(threads=args.threads, hf=str(work / "hf"), data=str(work / "ids.npy"), seq=args.seq,
                              steps=args.steps, batch=args.batch, out=str(work / "torch"))
        torch_cmd = [sys.executable, "-c", script]
        if args.which != "both":  # one measurement in this process: the parent reads its children's peak
            print(json.dumps({args.which: _peak_of(ours if args.which == "ours" else torch_cmd)}))
            return 0
        peaks = {}
        for which in ("torch", "ours"):
            child = [sys.executable, __file__, "--which", which, "--steps", str(args.steps), "--threads",
                     str(args.threads), "--batch", str(args.batch), "--seq", str(args.seq)] + \
                (["--quick"] if args.quick else []) + (["--layers", str(args.layers)] if args.layers else [])
            peaks.update(json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout))
    facts = machine_facts("torch", "onnxruntime", "transformers")
    cpu = facts["cpu"]
    result = {"shape": shape, "batch": args.batch, "seq": args.seq, "steps": args.steps, "machine": facts,
              "peak_mib": peaks, "ratio": peaks["ours"] / peaks["torch"]}
    print(f"{cpu}: GPT-2 {shape['n_layer']} layers, d_e {shape['n_embd']}, batch {args.batch}, seq {args.seq}, "
          f"{args.steps} AdamW steps and the save: peak RSS ours {peaks['ours']:,.0f} MiB, torch eager "
          f"{peaks['torch']:,.0f} MiB, ratio {result['ratio']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
