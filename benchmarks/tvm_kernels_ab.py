#!/usr/bin/env python3
"""TVM's decode step with our attention and append kernels against TVM's own lowering of the same ops, in one
process, interleaved in blocks: the A/B behind benchmarks/TVM.md's "Fifth round".

    ours     the lowering table as shipped: ATTENTION and BUFFERED_ATTENTION → attention_kernel.py (the cache in
             buffers the kernel appends to, passes/kv_buffers.py), CONCAT → concat_kernel.py
    tvm      the same table without the attention lowerings (so the step concatenates its cache and attention is
             decomposed: matmul, masks, softmax, matmul) and with CONCAT as relax.op.concat, as before our kernels

Both decode one token for one row after `--past` cached positions (the specialised function, the cache in TVM
tensors, as the generator runs it) and prefill `--prompt` tokens. Prints the VM's calls a step, the largest
difference of the logits, and the medians of the block means.

    python benchmarks/tvm_kernels_ab.py --shape smollm2
    python benchmarks/tvm_kernels_ab.py --shape tiny --blocks 2      # a smoke run
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common.decoding import ROOT, SHAPES  # noqa: E402
from common.harness import block_medians, machine_summary  # noqa: E402
from common.tvm_step import decode_feed, step_arguments  # noqa: E402


def tvms_table(ours: dict[Any, Any]) -> dict[Any, Any]:
    """The lowering table without our kernels: attention decomposes, concat is relax.op.concat."""
    from pseudoformer.backends.lowering_table import Lowering
    from pseudoformer.backends.tvm.lowerings.registry import R
    from pseudoformer.ir.ops import Op

    table = {op: lowering for op, lowering in ours.items() if op not in (Op.ATTENTION, Op.BUFFERED_ATTENTION)}
    table[Op.CONCAT] = Lowering(lambda lw, n: R.concat([lw.tensor(s) for s in n.src], axis=n.attrs["axis"]))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    step_arguments(ap, blocks=7, runs=30)
    ap.add_argument("--prompt", type=int, default=128)
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM starts its pool
    import tvm

    from pseudoformer.backends.tvm.lowerings import LOWERINGS
    from pseudoformer.backends.tvm.specialise import SPECIALISED
    from pseudoformer.generation import Generator
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    path, defines = SHAPES[args.shape]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    opts = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=4)
    shipped = dict(LOWERINGS._by_op)  # the table is read-only by design: swapped here for the comparison only
    gens = {}
    try:
        for name, table in (("tvm", tvms_table(shipped)), ("ours", shipped)):
            LOWERINGS._by_op = table
            gens[name] = Generator(load(ROOT / path, defines=defines, seed=0), backend="tvm", quantize=opts,
                                   int8_activations=True)
    finally:
        LOWERINGS._by_op = shipped
    feeds = {name: decode_feed(g.runtime.step_graph, args.past, vocab)  # type: ignore[attr-defined]
             for name, g in gens.items()}  # the same cached positions, in buffers (ours) or not
    on_device = {name: {k: tvm.runtime.tensor(v) if v.dtype == np.float32 else v for k, v in feed.items()}
                 for name, feed in feeds.items()}
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
    print(f"# tvm_kernels_ab: {args.shape}, tvm8, one token after {args.past} positions, prefill {args.prompt}, "
          f"on {machine_summary()}\n")
    steps: dict[str, Callable[[], Any]] = {}
    prefills: dict[str, Callable[[], Any]] = {}
    logits = {}
    for name, g in gens.items():
        model, keep = g.runtime.step_model, g.runtime._cache_outputs  # type: ignore[attr-defined]
        counts = model.call_counts(on_device[name], function=SPECIALISED)
        kernels = sum(v for k, v in counts.items() if not k.startswith("vm."))
        print(f"{name}: {sum(counts.values())} VM calls a step, {kernels} kernels")
        logits[name] = model.run(on_device[name], function=SPECIALISED)[g.output]
        steps[name] = lambda m=model, keep=keep, f=on_device[name]: m.run(f, keep=keep, function=SPECIALISED)
        token = g.decoder_input
        prefills[name] = lambda g=g, token=token: g.runtime.prefill({token: prompt})  # type: ignore[attr-defined]
    print(f"largest difference of the logits: {float(np.abs(logits['ours'] - logits['tvm']).max()):.2e}")
    step_t = block_medians(steps, blocks=args.blocks, runs=args.runs)
    prefill_t = block_medians(prefills, blocks=args.blocks, runs=1, warmup=1)
    print("\n| lowering | step (ms) | prefill (ms) |\n|---|---|---|")
    med = {n: (step_t[n], prefill_t[n]) for n in gens}
    for name, (s, p) in med.items():
        print(f"| {name} | {s * 1e3:.2f} | {p * 1e3:.0f} |")
    base = med["tvm"]
    print(f"\nours ÷ tvm: step {med['ours'][0] / base[0]:.2f}, prefill {med['ours'][1] / base[1]:.2f}; "
          f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
