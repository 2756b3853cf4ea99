"""The process group `train --backend torch` runs on under torchrun (torch_loop.py): one process is a group
of one; under `torchrun --nproc-per-node N` (WORLD_SIZE > 1) torch.distributed's, gloo on CPUs and NCCL on
GPUs, each rank on its own device (with --provider cuda LOCAL_RANK's GPU, else the CPU).

    share(batch)   this rank's rows of the global batch (np.array_split: shares differ by a row at most)
    wrap(module)   DDP, or FSDP2 (`fully_shard` on each layer — each child of a module named `layers` —
                   then on the whole) with fsdp=True
    syncing(module, sync)   the context of one micro-batch's forward and backward: without sync (all but a
                   step's last) the ranks keep their gradients to themselves (DDP's no_sync, FSDP2's
                   set_requires_gradient_sync(False)), and the last one's reduces the step's sum once
    sum(x)         a number summed over the ranks;   add(numbers): each of a few floats summed over the ranks
    full(t)        a parameter or state tensor, whole, as numpy
    like(p, a)     a whole array as a tensor placed as parameter p is (p's shard of it under FSDP2)
    writes         whether this rank writes files and draws the progress bar (rank 0 alone)
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError


@dataclass
class Group:
    rank: int = 0
    world: int = 1
    device: Any = "cpu"

    @classmethod
    def from_env(cls, cuda: bool = False) -> Group:
        import torch
        import torch.distributed as dist

        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local) if cuda else torch.device("cpu")
        if world <= 1:
            return cls(0, 1, device)
        if not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            # destroyed before the interpreter's teardown: a rank ending with gloo's threads still alive dies in
            # std::terminate ("terminate called without an active exception", exit -6) after a finished run
            atexit.register(_destroy)
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def writes(self) -> bool:
        return self.rank == 0

    def share(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.world == 1:
            return dict(batch)
        rows = len(next(iter(batch.values())))
        if rows < self.world:
            raise UsageError(f"a batch of {rows} rows cannot be shared by {self.world} processes: --batch-size is "
                             "the global batch, at least one row a process")
        return {k: np.array_split(v, self.world)[self.rank] for k, v in batch.items()}

    def wrap(self, module: Any, *, fsdp: bool = False) -> Any:
        if self.world == 1 and not fsdp:
            return module
        if fsdp:
            from torch.distributed.fsdp import fully_shard

            from pseudoformer.backends.torch.layer_calls import call_layers

            layers = [f"{name}.{child}" for name, m in module.named_modules() if name.rsplit(".", 1)[-1] == "layers"
                      for child, _ in m.named_children()]
            call_layers(module, layers)  # so that each layer's forward runs, and FSDP2's hooks with it
            for name in layers:
                fully_shard(module.get_submodule(name), reshard_after_forward=False)
            return fully_shard(module)
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if getattr(self.device, "type", "cpu") == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids)

    @contextlib.contextmanager
    def syncing(self, module: Any, sync: bool) -> Iterator[None]:
        """A micro-batch's forward and backward on the wrapped `module`, its gradient averaged over the ranks only if
        `sync`: the micro-batches before a step's last add into each rank's own .grad, and the last one's reduction
        averages the sum, which is the sum of the averages (within float rounding), once a step instead of once a
        micro-batch."""
        if sync or self.world == 1:
            yield
        elif hasattr(module, "no_sync"):  # DDP: its forward reads the flag too, so both run inside
            with module.no_sync():
                yield
        else:  # FSDP2: each layer's unsharded gradient accumulates; a step's last backward reduce-scatters it
            module.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                module.set_requires_gradient_sync(True)

    def sum(self, value: Any) -> float:
        if self.world > 1:
            import torch.distributed as dist

            value = value.clone()
            dist.all_reduce(value)
        return float(value)

    def add(self, values: Sequence[float]) -> list[float]:
        """Each number summed over the ranks, in float64 (the validation loss's sums, steps.py)."""
        if self.world == 1:
            return [float(v) for v in values]
        import torch
        import torch.distributed as dist

        summed = torch.tensor(list(values), dtype=torch.float64, device=self.device)  # NCCL reduces on the GPU
        dist.all_reduce(summed)
        return [float(v) for v in summed.tolist()]

    def like(self, param: Any, array: np.ndarray) -> Any:
        import torch

        whole = torch.from_numpy(np.array(array, np.float32)).to(param.device)
        if hasattr(param, "device_mesh"):  # an FSDP2 shard (a DTensor): the same placement of the whole
            from torch.distributed.tensor import distribute_tensor

            return distribute_tensor(whole, param.device_mesh, param.placements)
        return whole.reshape(param.shape)

    def full(self, tensor: Any) -> np.ndarray:
        if hasattr(tensor, "full_tensor"):  # an FSDP2 shard
            tensor = tensor.full_tensor()
        return tensor.detach().cpu().numpy().copy()


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
