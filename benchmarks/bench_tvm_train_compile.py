#!/usr/bin/env python3
"""TVM's compile of a training step, phase by phase: the tiny GPT-2 loss the tests train (tests/training/
gpt2_loss.alg at tiny_train.py's sizes: one layer, d_e 16, N_V 50), every parameter trained, AdamW with clipping
(--optimizer sgd for the CLI's default), in this process, each phase's wall time and this process's CPU time (the
compile runs on one core: on a loaded machine CPU seconds are the steadier figure):

    the loss model loaded (pseudoformer.load) · the step graph (our passes: autodiff, the optimizer, training-step)
    · TVM: our "tvm" passes (build.prepare) · the lowering to Relax, packing · the Relax passes (legalize, fuse,
    our schedules, memory planning) · TIR's passes and LLVM's codegen (relax.build) · the VM's set-up (LLVM's JIT
    makes the machine code here) · the first step · a step after it

then a census of the compiled module (kernels, LLVM IR lines, of them the packed-API wrappers'), and with --cli the
command end to end under `/usr/bin/time -v` (wall, user + sys CPU, peak RSS): `pseudoformer train LOSS --data ids
--backend tvm -D … --steps 2 -o DIR`.

    python benchmarks/bench_tvm_train_compile.py [--optimizer adamw|sgd] [--cli] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from common.harness import common_arguments, machine_summary  # noqa: E402

LOSS = ROOT / "tests" / "training" / "gpt2_loss.alg"
# tests/training/tiny_train.py's TINY, as defines
TINY = ["L=1", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "N_V=50", "ell_max=32", "eps=1e-5"]


class Clock:
    """Rows of (phase, wall s, CPU s of this process)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def time(self, name: str, call: Callable[[], Any]) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        out = call()
        self.rows.append((name, time.perf_counter() - wall, time.process_time() - cpu))
        return out

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.rows.append((name, wall, cpu))


def census(model: Any) -> dict[str, int]:
    """Kernels and LLVM IR lines of a compiled TVMModel, and the lines of TVM's packed-API wrappers (the
    argument checks of each kernel)."""
    ll = model.executable.mod.imports[0].inspect_source("ll")
    kernels, lines, wrappers, current = 0, 0, 0, None
    for line in ll.splitlines():
        if line.startswith("define "):
            current = re.search(r"@([\w.$]+)\(", line)
            name = current.group(1) if current else ""
            kernels += name.startswith("__tvm_ffi_")
            current = name
        elif line.startswith("}"):
            current = None
        elif current is not None:
            lines += 1
            wrappers += current.startswith("__tvm_ffi_")
    return {"kernels": kernels, "llvm_ir_lines": lines, "wrapper_lines": wrappers}


def in_process(optimizer: str, steps: int) -> tuple[Clock, dict[str, int], list[float]]:
    clock = Clock()
    clock.time("imports (pseudoformer, TVM)", lambda: __import__("pseudoformer.backends.tvm.build"))
    from pseudoformer.model import load
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.compile import compile_step
    from pseudoformer.training.runtimes import TvmStep

    model = clock.time("load the loss model", lambda: load(LOSS, defines=TINY, seed=0))
    opt = Optimizer("adamw", clip=1.0) if optimizer == "adamw" else Optimizer("sgd")
    step = clock.time("the step graph (our passes)", lambda: compile_step(model.graph, model.weights, optimizer=opt))
    wall, cpu = time.perf_counter(), time.process_time()
    runtime = TvmStep(step.graph, step.frozen, step.state)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    t = runtime.model.timings
    # compile_graph's wall times, in order; its CPU time is given as one figure, on the last row
    for name, key in (("TVM: our tvm passes", "prepare_s"), ("TVM: lowering to Relax, packing", None),
                      ("TVM: Relax passes (legalize, fuse, schedules, plan)", "relax_passes_s"),
                      ("TVM: TIR passes and LLVM codegen", "codegen_s")):
        s = t[key] if key else t["lower_s"] - t["prepare_s"]
        clock.add(name, s, float("nan"))
    clock.add("  (compile_graph as a whole)", wall, cpu)
    clock.time("the VM's set-up (LLVM's JIT)", runtime.model.vm)
    x = np.tile(np.arange(20, dtype=np.int64), 4)[:32].reshape(4, 8)
    losses = [clock.time("the first step", lambda: runtime.step({"x": x}, 1e-2))]
    for _ in range(steps):
        losses.append(clock.time("a step after it", lambda: runtime.step({"x": x}, 1e-2)))
    return clock, census(runtime.model), losses


def command_line(optimizer: str, steps: int) -> dict[str, float]:
    """`pseudoformer train … --backend tvm` under /usr/bin/time -v: wall s, CPU s (user + sys), peak RSS MiB."""
    with tempfile.TemporaryDirectory(prefix="bench-tvm-train-") as tmp:
        ids = Path(tmp) / "ids.npy"
        np.save(ids, np.tile(np.arange(20, dtype=np.int64), 20))
        argv = ["/usr/bin/time", "-v", sys.executable, "-m", "pseudoformer", "train", str(LOSS), "--data", str(ids),
                "--backend", "tvm", "--seq-len", "8", "--batch-size", "4", "--steps", str(steps),
                "--optimizer", optimizer, "--lr", "1e-2", "-o", str(Path(tmp) / "run")]
        for d in TINY:
            argv += ["-D", d]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"pseudoformer train failed:\n{proc.stderr[-3000:]}")
    fields = dict(line.strip().rsplit(": ", 1) for line in proc.stderr.splitlines() if ": " in line)
    h, m, s = (["0"] + fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":"))[-3:]
    return {"wall_s": int(h) * 3600 + int(m) * 60 + float(s),
            "cpu_s": float(fields["User time (seconds)"]) + float(fields["System time (seconds)"]),
            "peak_mib": int(fields["Maximum resident set size (kbytes)"]) / 1024}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--steps", type=int, default=2, help="steps after the first (default 2)")
    ap.add_argument("--cli", action="store_true", help="also the command end to end under /usr/bin/time -v")
    ap.add_argument("--json")
    common_arguments(ap)
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    print(f"# {machine_summary()}; TVM training step, tiny GPT-2 ({', '.join(TINY)}), {args.optimizer}, "
          f"{args.threads} threads")
    clock, counts, losses = in_process(args.optimizer, args.steps)
    print("| phase | wall s | CPU s |\n|---|---|---|")
    for name, wall, cpu in clock.rows:
        print(f"| {name} | {wall:.2f} | {'' if cpu != cpu else f'{cpu:.2f}'} |")
    print(f"kernels {counts['kernels']}, LLVM IR {counts['llvm_ir_lines']:,} lines, of them the packed-API "
          f"wrappers' {counts['wrapper_lines']:,}; losses {', '.join(f'{v:.6f}' for v in losses)}")
    result: dict[str, Any] = {"phases": clock.rows, **counts, "losses": losses}
    if args.cli:
        result["cli"] = command_line(args.optimizer, args.steps + 1)
        c = result["cli"]
        print(f"pseudoformer train --backend tvm end to end: {c['wall_s']:.1f} s wall, {c['cpu_s']:.1f} s CPU, "
              f"peak RSS {c['peak_mib']:,.0f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
