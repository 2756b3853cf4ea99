"""Mixed precision, `train --precision fp32|bf16|fp16`: the forward and backward computed in bfloat16 or float16,
the parameters (the master weights), their gradients and the optimizer state kept in float32.

Where it runs: the torch backend (`--backend torch`), on the CPU or with `--provider cuda`. Its forward runs
under torch.autocast in the reduced type (products and attention in it; the reductions, softmaxes and the
loss in float32: backends/torch/compile.to_torch_autocast), autograd's backward follows the forward's types,
and each gradient arrives in its parameter's float32, where torch.optim updates it. fp16, whose range ends at
65504 and whose small gradients flush to zero, scales the loss (torch.amp.GradScaler: ×2¹⁶ at first): the
gradients are unscaled before clipping and the update, a step whose gradients hold ±∞ or NaN is skipped (no
update, AdamW's t not counted) and the scale halved, and after 2000 steps without one it doubles. bf16 has
float32's range and needs no scaling.

The other backends compute their step in float32 and refuse a reduced precision with one message (refuse()):
onnxruntime's CPU provider (1.32) registers float16 and bfloat16 kernels for casts, data movement and a few
fused norms, but none for the products and arithmetic of a step (ORT_CPU_LACKS, checked against the installed
onnxruntime by tests/training/test_precision.py), so a reduced-precision ONNX step would cast back to float32
around every op; one for its CUDA provider, which has the kernels, is not built (this project has no GPU to
test it on), nor for TVM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError

TYPES = {"bf16": "bfloat16", "fp16": "float16"}

# Ops of every training step that onnxruntime's CPU provider has no float16 or bfloat16 kernel for.
ORT_CPU_LACKS = ("MatMul", "Gemm", "Add", "Mul", "Div", "Exp", "Softmax", "ReduceSum")

# fp16's loss-scale state in optimizer.safetensors (what --resume puts back): GradScaler's scale and the count
# of steps since it last changed
SCALE, GROWTH = "amp.scale", "amp.growth"
STATE_PREFIX = "amp."


def refuse(precision: str, backend: str, fsdp: bool = False) -> None:
    """One message where `precision` does not run on `backend` (a --backend name) with these options."""
    if precision == "fp32":
        return
    kind = TYPES[precision]
    if backend != "torch":
        why = {"onnx": f"onnxruntime's CPU provider has no {kind} kernels for {', '.join(ORT_CPU_LACKS)}, and no "
                       f"{kind} step is built for its CUDA provider",
               "tvm": f"no {kind} step is built for TVM",
               "numpy": "the reference interpreter computes in float32"}.get(backend, "")
        raise UsageError(f"--precision {precision} (compute in {kind}, float32 master weights) runs on the torch "
                         f"backend, under torch.autocast: add --backend torch (on the CPU, or with --provider cuda). "
                         f"The {backend} backend's training step computes in float32: {why}")
    if precision == "fp16" and fsdp:
        raise UsageError("--precision fp16 with --fsdp: fp16's loss scaling skips a step where any gradient "
                         "overflows, and FSDP2's shards would each decide alone; use --precision bf16 with --fsdp "
                         "(no loss scaling), or fp16 under DDP (without --fsdp)")


class Autocast:
    """What a torch step does differently in `precision`: the forward under autocast (forward()), the loss
    scaled before backward (backward()), the gradients unscaled before clipping (unscale()), and the update
    (step()) skipped where fp16's gradients overflowed, `skipped` then True."""

    def __init__(self, precision: str, device: Any) -> None:
        import torch

        self.torch = torch
        self.device_type = device.type
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        if self.dtype is torch.bfloat16 and self.device_type == "cuda" and not torch.cuda.is_bf16_supported():
            raise UsageError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 arithmetic; "
                             "use --precision fp16")
        self.scaler = torch.amp.GradScaler(self.device_type) if precision == "fp16" else None
        self.skipped = False

    @property
    def reduced(self) -> bool:
        return self.dtype is not None

    def forward(self) -> Any:
        """The context the forward runs in."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: Any) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: Any) -> None:
        """The gradients as they are (not scaled), for clipping them."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: Any) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)  # skips the update where the unscaled gradients hold ±∞ or NaN
        self.scaler.update()
        self.skipped = self.scaler.get_scale() < before  # the scale is halved exactly when a step was skipped

    def state(self) -> dict[str, np.ndarray]:
        """The loss scale's state by its names in optimizer.safetensors (none without loss scaling)."""
        if self.scaler is None:
            return {}
        state = self.scaler.state_dict()  # before the first step, the initial scale and a count of 0
        return {SCALE: np.asarray(state["scale"], np.float32), GROWTH: np.asarray(state["_growth_tracker"], np.float32)}

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        if self.scaler is None:
            return
        scale, growth = (float(np.asarray(state[k]).reshape(())) for k in (SCALE, GROWTH))
        if not (scale > 0 and growth >= 0 and growth == int(growth)):
            raise UsageError(f"--resume: the loss scale {scale} (growth count {growth}) in optimizer.safetensors is "
                             "not a scale > 0 and a whole count")
        self.scaler.load_state_dict({**self.scaler.state_dict(), "scale": scale, "_growth_tracker": int(growth)})
