"""Run by test_torch_distributed.py under torchrun (2 CPU processes, gloo): train() with --grad-accum 2 (micro-batches
of 5 rows) and then with the same global batch of 10 in one, counting each run's gradient reductions: DDP's through
a comm hook on each bucket's all-reduce, FSDP2's as its calls of torch.distributed's reduce-scatter. Rank 0 writes
the counts (counts.json) and the accumulated run's parameters (weights.npz) into the folder it is given.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.training.accum_sync_worker OUT ddp|fsdp
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from pseudoformer.training import distributed
from pseudoformer.training.loop import train
from tests.training.test_torch_trainer import GPT2, HERE, _data

PLAN = dict(seq_len=12, steps=6, lr=1e-3, optimizer="adamw", clip=1.0, seed=1, threads=1, progress=False,
            backend="torch")
REDUCE_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor")  # what FSDP2's collectives call, by version
calls = [0]


def _counted(fn: Any) -> Any:
    @functools.wraps(fn)
    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return fn(*args, **kwargs)

    return counting


def _count_ddp() -> None:
    wrap = distributed.Group.wrap

    # DDP's own all-reduce of the bucket, counted; unannotated: DDP refuses a hook whose annotations are not its
    # types (here, under `from __future__ import annotations`, strings)
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    def wrapped(self: distributed.Group, module: Any, *, fsdp: bool = False) -> Any:
        out = wrap(self, module, fsdp=fsdp)
        out.register_comm_hook(None, hook)
        return out

    distributed.Group.wrap = wrapped  # type: ignore[method-assign]


def main(out: Path, mode: str) -> None:
    fsdp = mode == "fsdp"
    if fsdp:
        for name in REDUCE_SCATTERS:
            if hasattr(dist, name):
                setattr(dist, name, _counted(getattr(dist, name)))
    else:
        _count_ddp()
    counts = {}
    for accum, size in ((2, 5), (1, 10)):
        calls[0] = 0
        result = train(HERE / "gpt2_loss.alg", _data(), defines=GPT2, batch_size=size, grad_accum=accum, fsdp=fsdp,
                       **PLAN)  # type: ignore[arg-type]
        counts[accum] = calls[0]
        if accum == 2:
            weights = result.weights
    if dist.get_rank() == 0:
        np.savez(out / "weights.npz", **weights)
        (out / "counts.json").write_text(json.dumps(counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
