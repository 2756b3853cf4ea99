"""Peak memory of training end to end: `pseudoformer train` on the command line (load, compile, steps and the
final save, the HF export included) against a plain torch eager script doing the same (from_pretrained,
AdamW, the same batches, save_pretrained), each a process of its own that reports its own peak resident set
(VmHWM, read as it ends) and its wall time. The checkpoint and the tokens are made once, by this process,
before either runs.

The workload is GPT-2 small (12 layers, d_e 768, 12 heads, the GPT-2 vocabulary; random weights from a config,
no download), batch 4, sequence 128, AdamW on every parameter; --layers shrinks it (say so when reporting),
--quick makes it tiny (the smoke test). --phases runs ours alone, in one process, and prints its peak and
resident set phase by phase (load, compile, the sessions, the steps, the save: common/rss_phases.py).

    python benchmarks/bench_train_rss.py [--steps 2] [--layers N] [--threads 2] [--quick] [--phases] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.harness import machine_facts, training_arguments

ROOT = Path(__file__).resolve().parents[1]
LOSS = ROOT / "tests" / "training" / "gpt2_loss.alg"
SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
QUICK = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101)

# The last line each measured process prints: its own peak resident set (VmHWM, which an exec resets, where
# ru_maxrss carries the parent's over).
PEAK = """
for _line in open("/proc/self/status"):
    if _line.startswith("VmHWM:"):
        print("peak_mib", int(_line.split()[1]) / 1024)
"""

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

OURS = """
import sys
from pseudoformer.cli import main
rc = main({argv!r})
if rc:
    sys.exit(rc)
"""

# --phases: the same command in this process, each stage of the run a phase of its own
PHASES = """
import sys
from common.rss_phases import Phases
from pseudoformer.training import loop, steps
from pseudoformer.training.runtimes import OrtSplitStep, OrtStep
phases = Phases()
phases.wrap(loop, "_load", "load the model and its weights")
phases.wrap(loop, "compile_step", "compile the step graph")
phases.wrap(loop, "make_runtime", "make the sessions")
phases.wrap(OrtSplitStep, "step", "a step")
phases.wrap(OrtStep, "step", "a step")
phases.wrap(steps, "_save", "save")
from pseudoformer.cli import main
rc = main({argv!r})
print(phases.table())
if rc:
    sys.exit(rc)
"""


def _measure(code: str) -> tuple[float, float, str]:
    """Run `code` in a Python process of its own: its peak RSS (MiB), its wall seconds and its output."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code + PEAK], capture_output=True, text=True,
                          cwd=Path(__file__).parent)
    if proc.returncode != 0:
        raise RuntimeError(f"the measured process failed:\n{proc.stderr[-2000:]}")
    peak = next(float(ln.split()[1]) for ln in reversed(proc.stdout.splitlines()) if ln.startswith("peak_mib"))
    return peak, time.perf_counter() - t, proc.stdout


def main(argv: Sequence[str] | None = None) -> int:
    ap = training_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), steps=2, steps_help="steps")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--which", choices=["both", "ours", "torch"], default="both")
    ap.add_argument("--phases", action="store_true", help="ours alone, its peak and resident set phase by phase")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.quick:
        args.seq, args.batch, args.steps = 16, 2, 2
    shape = dict(QUICK if args.quick else SMALL)
    if args.layers:
        shape["n_layer"] = args.layers
    facts = machine_facts("torch", "onnxruntime", "transformers")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # In a process of its own, so that this one stays small (its children start from its resident set)
        subprocess.run([sys.executable, "-c", "import sys; from transformers import GPT2Config, GPT2LMHeadModel; "
                        f"GPT2LMHeadModel(GPT2Config(**{shape!r})).save_pretrained(sys.argv[1])", str(work / "hf")],
                       check=True, capture_output=True)
        ids = np.random.default_rng(0).integers(0, shape["vocab_size"], args.steps * args.batch * args.seq)
        np.save(work / "ids.npy", ids.astype(np.int64))
        command = ["train", str(LOSS), "--weights", str(work / "hf"), "--data", str(work / "ids.npy"),
                   "--seq-len", str(args.seq), "--batch-size", str(args.batch), "--steps", str(args.steps),
                   "--optimizer", "adamw", "--lr", "1e-4", "--no-shuffle", "--threads", str(args.threads),
                   "-o", str(work / "ours")]
        if args.phases:
            _, wall, out = _measure(PHASES.format(argv=command))
            rows = [ln for ln in out.splitlines() if ln.startswith("|")]
            # the peak is reset at every boundary: the run's is the highest phase's
            peak = max(float(r.split("|")[2].replace(",", "")) for r in rows[2:])
            print(f"{facts['cpu']}, load average {facts['loadavg_at_start'][0]:.1f} at the start: ours alone, peak "
                  f"{peak:,.0f} MiB, {wall:.0f} s (under load)\n")
            print("\n".join(rows))
            return 0
        codes = {"torch": TORCH.format(threads=args.threads, hf=str(work / "hf"), data=str(work / "ids.npy"),
                                       seq=args.seq, steps=args.steps, batch=args.batch, out=str(work / "torch")),
                 "ours": OURS.format(argv=command)}
        peaks, walls = {}, {}
        for which, code in codes.items():
            if args.which in ("both", which):
                peaks[which], walls[which], _ = _measure(code)
    result = {"shape": shape, "batch": args.batch, "seq": args.seq, "steps": args.steps, "machine": facts,
              "peak_mib": peaks, "wall_s": walls}
    said = ", ".join(f"{k} {v:,.0f} MiB ({walls[k]:.0f} s)" for k, v in peaks.items())
    if len(peaks) == 2:
        result["ratio"] = peaks["ours"] / peaks["torch"]
        said += f", ratio {result['ratio']:.2f}"
    print(f"{facts['cpu']}, load average {facts['loadavg_at_start'][0]:.1f} at the start: GPT-2 "
          f"{shape['n_layer']} layers, d_e {shape['n_embd']}, batch {args.batch}, seq {args.seq}, {args.steps} AdamW "
          f"steps and the save: peak RSS {said}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
