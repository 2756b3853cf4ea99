"""The split training step's update graph alone (pseudoformer/passes/update_chunks.py), over whole tensors
and in pieces of several sizes: every variant a session of its own over the same θ, g, m, v buffers (numpy
arrays its OrtValues are views of), run in place, interleaved, with the same threads.

    python benchmarks/bench_update_pieces.py [--workload gpt2] [--chunks 0,8192,32768,131072] [--runs 7]

0 is the whole-tensor update. The step's values drift from run to run (each run updates them), the same
for every variant: AdamW's arithmetic does not depend on the values.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import training  # noqa: E402
from common.harness import common_arguments, round_robin  # noqa: E402


def update_session(split, arrays: dict[str, np.ndarray], lr: np.ndarray, chunk: int, threads: int):  # type: ignore[no-untyped-def]
    """A run of the update graph cut into `chunk`-element pieces (0: whole), bound in place to `arrays`."""
    import onnxruntime as ort

    from pseudoformer.backends.onnx.sessions import step_session
    from pseudoformer.passes.training_step import LR, NEW
    from pseudoformer.passes.update_chunks import chunked_update

    graph, pieces = chunked_update(split.update, chunk) if chunk else (split.update, [])
    session, _, _ = step_session(graph, {}, threads=threads, optimize=False)
    value = ort.OrtValue.ortvalue_from_numpy
    views = {k: value(v) for k, v in arrays.items()} | {LR: value(lr)}
    for p in pieces:
        if not p.whole.startswith(NEW):
            views[p.name] = value(arrays[p.whole].reshape(-1)[p.start:p.stop])
    b = session.io_binding()
    for i in session.get_inputs():
        b.bind_ortvalue_input(i.name, views[i.name])
    for o in session.get_outputs():  # new.X → X, new.X@j → X@j
        whole, _, j = o.name.partition("@")
        b.bind_ortvalue_output(o.name, views[whole[len(NEW):] + (f"@{j}" if j else "")])
    return (lambda: session.run_with_iobinding(b)), len(graph.nodes())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt2")
    ap.add_argument("--chunks", default="0,8192,32768,131072")
    ap.add_argument("--runs", type=int, default=7)
    common_arguments(ap)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    from pseudoformer.passes.autodiff import GRAD
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.compile import compile_step
    from pseudoformer.training.loop import _load

    hf = training.hf_model(args.workload, args)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        hf.save_pretrained(tmp)
        del hf
        model, _, _ = _load(training.LOSSES / "gpt2_loss.alg", Path(tmp), 0)
    step = compile_step(model.graph, model.weights, train=list(model.weights), optimizer=Optimizer("adamw"))
    del model
    rng = np.random.default_rng(0)
    arrays = {k: np.array(v, order="C") for k, v in step.state.items()}
    arrays |= {GRAD + k: rng.standard_normal(arrays[k].shape, np.float32) * 1e-3 for k in step.trainable}
    lr = np.asarray(1e-4, np.float32)
    runs = {c: update_session(step.split, arrays, lr, c, args.threads) for c in map(int, args.chunks.split(","))}
    # one warm-up round (the arenas take what they need), then the runs interleaved, the order rotating
    times = round_robin({c: fn for c, (fn, _) in runs.items()}, reps=args.runs, warmup=1)
    n = sum(int(np.prod(arrays[k].shape)) for k in step.trainable)
    print(f"{args.workload}: {len(step.trainable)} tensors, {n} elements, {args.threads} threads, {args.runs} runs\n")
    print("| pieces of | update nodes | ms (median) | min |\n|---|---|---|---|")
    for c, ts in times.items():
        print(f"| {c or 'whole tensors'} | {runs[c][1]} | {statistics.median(ts) * 1e3:.1f} | {min(ts) * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
