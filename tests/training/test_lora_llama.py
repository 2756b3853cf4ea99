"""LoRA fine-tuning of a SmolLM2-shaped Llama (llama_lora_loss.alg; two layers, SmolLM2-135M's widths and
vocabulary): only the adapters A and B change, the loss falls on a small repeated text, and every step's
loss is torch's, with the same per-head updates on HF's model and torch.optim.AdamW."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pseudoformer.passes.training_step import Optimizer
from pseudoformer.training.compile import compile_step
from pseudoformer.training.runtimes import OrtSplitStep, make_runtime
from tests.training.lora_cases import is_adapter, lora_llama, torch_lora

LR = 2e-3


def test_lora_on_a_smollm2_shaped_llama_trains_only_a_and_b_as_torch_does(tmp_path: Path) -> None:
    hf, model = lora_llama(tmp_path, layers=2)
    adapters = [k for k in model.weights if is_adapter(k)]
    assert len(adapters) == 2 * 2 * (9 + 3)  # A and B, on the 9 query heads and the 3 value heads, 2 layers
    step = compile_step(model.graph, model.weights, train=adapters, optimizer=Optimizer("adamw", weight_decay=0.0))
    assert sorted(step.trainable) == sorted(adapters)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split)
    assert isinstance(rt, OrtSplitStep)  # the gradient graph, then θ and the state updated in place
    tuned = torch_lora(hf, model.weights)
    opt = torch.optim.AdamW([p for p in tuned.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
    text = np.tile(np.array([17, 4093, 311, 28, 902, 12000, 5, 77], np.int64), 4)[None].repeat(2, axis=0)
    ours, theirs = [], []
    for _ in range(12):
        ours.append(rt.step({"x": text}, LR))
        opt.zero_grad()
        logp = torch.log_softmax(tuned(torch.from_numpy(text)).logits, dim=-1)
        loss = -logp[:, :-1].gather(-1, torch.from_numpy(text)[:, 1:, None]).sum(dim=(1, 2)).mean()
        loss.backward()
        opt.step()
        theirs.append(float(loss.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < 0.9 * ours[0] and max(ours[-3:]) < min(ours[:3])
    got = rt.values()
    assert all(not np.array_equal(got[k], model.weights[k]) for k in adapters)  # B from 0, A once B is not
    assert all(np.array_equal(step.frozen[k], model.weights[k]) for k in step.frozen)
    assert set(step.frozen) == {k for k in model.weights if not is_adapter(k)}
