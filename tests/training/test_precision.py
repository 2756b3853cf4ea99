"""`train --precision bf16|fp16` (training/precision.py) on the torch trainer, on the CPU: the forward and backward
in the reduced type under torch.autocast, the master weights, optimizer state, loss and checkpoint in float32.

- bf16 tracks fp32 training over 20 AdamW steps of a tiny GPT-2 within BF16_TRACK (1e-3 relative, each step's loss),
  and differs from it (it does compute in bf16), its loss summed in float32;
- bf16 follows a hand-written torch.autocast loop over HF's GPT-2 with the same weights and batches within
  BF16_HF (2e-4 relative, each loss) and BF16_HF_WEIGHTS (1e-3, each weight after 10 SGD steps);
- a bf16 run's checkpoint, optimizer state and HF export are float32;
- fp16's dynamic loss scaling skips the steps whose gradients overflow (parameters and AdamW's t unchanged, the
  scale halved), reports them, and --resume puts the scale back; with --grad-accum it skips the steps one batch of
  that size skips (an overflow in any micro-batch) and otherwise follows that batch;
- every other backend, fp16 with --fsdp and an unknown precision are refused in one line, and the reason given
  for onnxruntime is checked against the installed one's kernels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pseudoformer.base.errors import UsageError  # noqa: E402
from pseudoformer.passes.training_step import Optimizer  # noqa: E402
from pseudoformer.training.loop import train  # noqa: E402
from pseudoformer.training.options import TrainingOptions  # noqa: E402
from pseudoformer.training.precision import GROWTH, ORT_CPU_LACKS, SCALE  # noqa: E402
from pseudoformer.training.torch_loop import torch_step  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402
from tests.training import torch_cases  # noqa: E402
from tests.training.test_torch_trainer import GPT2, HERE, _data  # noqa: E402

LOSS = HERE / "gpt2_loss.alg"
PLAN = dict(defines=GPT2, seq_len=12, batch_size=4, lr=3e-3, optimizer="adamw", progress=False, seed=1,
            backend="torch", threads=1)
BF16_TRACK = 1e-3  # bf16 against fp32: each step's loss, relative (measured: 1.1e-4)
BF16_HF = 2e-4  # bf16 against torch's own autocast loop: each step's loss, relative (measured: 2.5e-5)
BF16_HF_WEIGHTS = 1e-3  # … and each weight after 10 SGD steps, absolute (measured: 1.6e-4; they move up to 4e-2)
# fp16's micro-batches against one batch of their size: each loss relative, each weight absolute (measured: 3.1e-6
# and 4.3e-5; fp16 against fp32 is 2.9e-3 a weight)
FP16_ACCUM = (1e-4, 5e-4)


def _bf16(a: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.asarray(a, np.float32)).bfloat16().float().numpy()


def test_bf16_tracks_fp32_and_writes_a_float32_checkpoint(tmp_path: Path) -> None:
    full = train(LOSS, _data(), steps=20, **PLAN)
    half = train(LOSS, _data(), steps=20, precision="bf16", out=tmp_path / "run", **PLAN)
    got, want = np.array(half.losses), np.array(full.losses)
    assert min(want[-5:]) < want[0] - 0.5  # it trains (random tokens: towards their unigram entropy)
    np.testing.assert_allclose(got, want, rtol=BF16_TRACK)
    assert np.abs(got / want - 1).max() > 1e-5  # it computes in bf16 (fp32 against itself: bit for bit)
    assert np.any(got != _bf16(got))  # each loss summed in float32, not rounded to bf16's 8 bits
    for d in (read_safetensors(tmp_path / "run" / "model.safetensors"),
              read_safetensors(tmp_path / "run" / "optimizer.safetensors")):
        assert {str(v.dtype) for v in d.values()} == {"float32"}
    # the master weights are float32 with values bf16 cannot hold (updates of 3e-3 on values of ~0.02)
    weights = read_safetensors(tmp_path / "run" / "model.safetensors")
    assert any(np.any(w != _bf16(w)) for w in weights.values())
    assert json.loads((tmp_path / "run" / "training.json").read_text())["options"]["precision"] == "bf16"


def test_bf16_follows_a_hand_written_torch_autocast_loop(tmp_path: Path) -> None:
    # SGD, whose step is η times the gradient: two bf16 computations' gradients differ by rounding, which
    # AdamW's m/√v would turn into full-size steps wherever a gradient is near zero
    case = torch_cases.gpt2(tmp_path / "hf")
    start = case.torch_params()
    _, ours = torch_step(case.model.graph, case.model.weights, None, Optimizer("sgd"), 2, {}, None, precision="bf16")
    theirs = torch.optim.SGD(case.hf.parameters(), lr=0.01)
    for i in range(10):
        x = case.tokens(2, 9, seed=100 + i)
        loss = ours.step({"x": x}, 0.01)
        theirs.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = case.hf(torch.from_numpy(x)).logits
        # as HF's own losses do: the logits upcast, the log-softmax and the sum in float32
        logp = torch.log_softmax(logits.float(), dim=-1)
        want = -logp[:, :-1].gather(-1, torch.from_numpy(x)[:, 1:, None]).sum(dim=(1, 2)).mean()
        want.backward()
        theirs.step()
        want_loss = float(want.detach())
        assert abs(loss - want_loss) <= BF16_HF * abs(want_loss), (i, loss, want_loss)
    got, want_params = ours.values(), case.torch_params()
    assert max(np.abs(want_params[k] - start[k]).max() for k in start) > 0.02  # the steps moved the weights
    for k, w in want_params.items():
        assert got[k].dtype == np.float32
        assert np.abs(got[k] - w).max() <= BF16_HF_WEIGHTS, k


def test_a_bf16_runs_hf_export_is_float32(tmp_path: Path) -> None:
    from transformers import GPT2LMHeadModel

    torch_cases.gpt2(tmp_path / "hf")
    data = np.random.default_rng(3).integers(0, torch_cases.GPT2_SMALL["vocab_size"], 200)
    train(LOSS, data, weights=tmp_path / "hf", seq_len=12, batch_size=4, steps=3, lr=1e-3, progress=False,
          backend="torch", threads=1, precision="bf16", out=tmp_path / "run")
    exported = read_safetensors(next((tmp_path / "run" / "hf").glob("*.safetensors")))
    assert exported and {str(v.dtype) for v in exported.values()} == {"float32"}
    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "run" / "hf")
    assert {p.dtype for p in hf.parameters()} == {torch.float32}


def test_fp16_skips_the_steps_whose_gradients_overflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pseudoformer.cli import main

    np.save(tmp_path / "ids.npy", _data())
    argv = ["train", str(LOSS), "--data", str(tmp_path / "ids.npy"), "--backend", "torch", "--precision", "fp16",
            "--seq-len", "12", "--batch-size", "4", "--steps", "12", "--lr", "3e-3", "--seed", "1", "--threads", "1",
            "-o", str(tmp_path / "run"), *[a for d in GPT2 for a in ("-D", d)]]
    assert main(argv) == 0
    err = capsys.readouterr().err
    meta = json.loads((tmp_path / "run" / "training.json").read_text())
    skipped = meta["skipped_steps"]
    # at the first scale, 2¹⁶, a gradient of the loss (a sum over positions) overflows fp16's 65504
    assert skipped and skipped[0] == 1
    assert f"{len(skipped)} step" in err and "skipped" in err
    state = read_safetensors(tmp_path / "run" / "optimizer.safetensors")
    # one halving per skipped step; AdamW counted the others alone
    assert float(state[SCALE]) == 2.0 ** 16 / 2 ** len(skipped)
    assert float(state["t"]) == 12 - len(skipped)
    assert float(state[GROWTH]) == 12 - skipped[-1]
    assert {str(v.dtype) for v in read_safetensors(tmp_path / "run" / "model.safetensors").values()} == {"float32"}


def test_a_skipped_step_changes_no_parameter() -> None:
    from pseudoformer.model import load

    model = load(LOSS, defines=GPT2, seed=1)
    _, rt = torch_step(model.graph, model.weights, None, Optimizer("adamw"), 2, {}, None, precision="fp16")
    before = rt.values()
    x = _data()[:48].reshape(4, 12)
    rt.step({"x": x}, 3e-3)
    assert rt.skipped  # the first step at 2¹⁶
    after = rt.values()
    for k in model.weights:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    assert float(after["t"]) == 0 and float(after[SCALE]) == 2.0 ** 15
    for _ in range(6):  # then steps land: the parameters move
        rt.step({"x": x}, 3e-3)
    assert not rt.skipped and float(rt.values()["t"]) > 0


def test_fp16_micro_batches_follow_one_batch_of_their_size() -> None:
    """Two micro-batches of 2 rows against one batch of 4, in fp16 with AdamW and clipping (which unscales the
    summed gradient first), over 8 steps at a loss scale none overflows (2¹⁰: where the steps skipped differ, the
    runs do): each micro-batch's loss scaled by the one scale, their sum unscaled once, gives one batch's losses and
    weights within FP16_ACCUM, far inside fp16's own distance from fp32."""
    from pseudoformer.model import load
    from pseudoformer.training.accumulate import micro_batches

    model = load(LOSS, defines=GPT2, seed=1)
    xs = _data()[:384].reshape(8, 4, 12)
    runs = []
    for accumulate in (False, True):
        _, rt = torch_step(model.graph, model.weights, None, Optimizer("adamw", clip=1.0), 2, {}, None,
                           precision="fp16")
        rt.load_state({**rt.initial_state(), SCALE: np.float32(2.0 ** 10)})
        losses = []
        for x in xs:
            losses.append(rt.step_many(micro_batches({"x": x}, 2, None), 3e-3) if accumulate
                          else rt.step({"x": x}, 3e-3))
            assert not rt.skipped
        runs.append((np.array(losses), rt.values()))
    (want, whole), (got, accum) = runs
    np.testing.assert_allclose(got, want, rtol=FP16_ACCUM[0])
    assert max(np.abs(whole[k] - model.weights[k]).max() for k in model.weights) > 0.02  # the steps moved them
    for k in model.weights:
        if ".b_k" not in k:  # a key bias's gradient is exactly 0 in exact arithmetic: AdamW makes its noise steps
            np.testing.assert_allclose(accum[k], whole[k], rtol=0, atol=FP16_ACCUM[1], err_msg=k)


def test_fp16_micro_batches_skip_and_count_as_one_batch_does(tmp_path: Path) -> None:
    """--grad-accum in fp16 through train(): the first step overflows at 2¹⁶ and is skipped, each skip halves the
    scale once (not once a micro-batch), and AdamW counts the steps that landed."""
    run = train(LOSS, _data(), steps=12, precision="fp16", out=tmp_path / "run",
                **dict(PLAN, batch_size=2, grad_accum=2))
    assert run.skipped and run.skipped[0] == 1
    state = read_safetensors(tmp_path / "run" / "optimizer.safetensors")
    assert float(state[SCALE]) == 2.0 ** 16 / 2 ** len(run.skipped)
    assert float(state["t"]) == 12 - len(run.skipped) and float(state[GROWTH]) == 12 - run.skipped[-1]


def test_a_skipped_step_of_micro_batches_changes_no_parameter() -> None:
    """An overflow in either micro-batch skips the whole step: ±∞ in one micro-batch's gradient stays ±∞ (or NaN)
    in the sum the scaler checks. The first micro-batch's loss is weighted down to where its gradients stay finite
    at 2¹⁶ and the second's overflows, and the other way round; then, the scale halved, steps land."""
    from pseudoformer.model import load
    from pseudoformer.training.accumulate import micro_batches

    model = load(LOSS, defines=GPT2, seed=1)
    x = _data()[:48].reshape(4, 12)
    for weights in ((1e-9, 1.0), (1.0, 1e-9)):
        _, rt = torch_step(model.graph, model.weights, None, Optimizer("adamw"), 2, {}, None, precision="fp16")
        before = rt.values()
        micro = [(feeds, w) for (feeds, _), w in zip(micro_batches({"x": x}, 2, None), weights, strict=True)]
        rt.step_many(micro, 3e-3)
        assert rt.skipped, weights
        after = rt.values()
        for k in model.weights:
            np.testing.assert_array_equal(after[k], before[k], err_msg=k)
        assert float(after["t"]) == 0 and float(after[SCALE]) == 2.0 ** 15
    # the case's premise: at 2¹⁶ the weighted-down micro-batch alone does not overflow, the other alone does
    for w, overflows in ((1e-9, False), (1.0, True)):
        _, rt = torch_step(model.graph, model.weights, None, Optimizer("adamw"), 2, {}, None, precision="fp16")
        rt.step_many([({"x": x[:2]}, w)], 3e-3)
        assert rt.skipped == overflows, w
    micro = micro_batches({"x": x}, 2, None)
    for _ in range(6):  # then steps land: the parameters move
        rt.step_many(micro, 3e-3)
    assert not rt.skipped and float(rt.values()["t"]) > 0


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_fp16_resume_puts_back_the_loss_scale(tmp_path: Path, optimizer: str) -> None:
    # SGD has no state but the scale (its optimizer.safetensors holds amp.* alone); clipping reads the
    # gradients unscaled
    common = dict(PLAN, precision="fp16", optimizer=optimizer, clip=0.5 if optimizer == "sgd" else 0.0,
                  lr=3e-3 if optimizer == "adamw" else 0.02)
    whole = train(LOSS, _data(), steps=12, **common)
    train(LOSS, _data(), steps=6, out=tmp_path / "run", **common)
    resumed = train(LOSS, _data(), steps=12, resume=tmp_path / "run", out=tmp_path / "run", **common)
    np.testing.assert_allclose(resumed.losses, whole.losses[6:], rtol=1e-5, atol=1e-5)
    for k, w in whole.weights.items():
        np.testing.assert_allclose(resumed.weights[k], w, rtol=1e-5, atol=1e-5, err_msg=k)
    assert resumed.skipped == [k for k in whole.skipped if k > 6]
    meta = json.loads((tmp_path / "run" / "training.json").read_text())
    assert meta["skipped_steps"] == whole.skipped and whole.skipped
    if optimizer == "sgd":
        assert set(read_safetensors(tmp_path / "run" / "optimizer.safetensors")) == {SCALE, GROWTH}
    # an fp16 run's state holds a loss scale that an fp32 step has not: resuming it so is refused, naming --precision
    with pytest.raises(UsageError, match="--precision"):
        train(LOSS, _data(), steps=14, resume=tmp_path / "run", **PLAN)


@pytest.mark.parametrize("backend", ["onnx", "tvm", "numpy"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_another_backend_refuses_a_reduced_precision(backend: str, precision: str) -> None:
    with pytest.raises(UsageError, match="add --backend torch") as e:
        train(LOSS, _data(), **dict(PLAN, backend=backend, threads=None), precision=precision, steps=1)
    assert "\n" not in str(e.value) and f"--precision {precision}" in str(e.value)


def test_the_command_line_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pseudoformer.cli import main

    np.save(tmp_path / "ids.npy", _data())
    base = ["train", str(LOSS), "--data", str(tmp_path / "ids.npy"), "--steps", "1", "--lr", "1e-3",
            *[a for d in GPT2 for a in ("-D", d)]]
    assert main([*base, "--precision", "bf16"]) == 1  # the onnx backend, the default
    err = capsys.readouterr().err
    assert "--backend torch" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main([*base, "--backend", "torch", "--precision", "fp16", "--fsdp"]) == 1
    assert "--precision bf16 with --fsdp" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's choices
        main([*base, "--precision", "fp8"])
    with pytest.raises(UsageError, match="the precisions are fp32, bf16, fp16"):
        TrainingOptions(precision="fp8")


def test_onnxruntimes_cpu_provider_lacks_the_kernels_the_refusal_names() -> None:
    from onnxruntime.capi import _pybind_state

    reduced: dict[str, set[str]] = {"tensor(float16)": set(), "tensor(bfloat16)": set()}
    for k in _pybind_state.get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider" and k.domain in ("", "ai.onnx"):
            for t in {t for ts in k.type_constraints.values() for t in ts} & set(reduced):
                reduced[t].add(k.op_name)
    for t, ops in reduced.items():
        assert not ops & set(ORT_CPU_LACKS), (t, ops & set(ORT_CPU_LACKS))
        assert "Cast" in ops  # the listing is of kernels that exist: a cast to the type is among them


def test_the_autocast_module_computes_what_to_torch_does_without_autocast() -> None:
    from pseudoformer.backends.torch.compile import to_torch, to_torch_autocast
    from pseudoformer.model import load
    from pseudoformer.training.compile import loss_graph

    model = load(LOSS, defines=GPT2, seed=1)
    graph = loss_graph(model.graph, 2, {})
    used = {p.attrs["name"] for p in graph.params()}
    weights = {k: v for k, v in model.weights.items() if k in used}
    plain, mixed = to_torch(graph, weights), to_torch_autocast(graph, weights)
    assert ".float()" in mixed.code and ".float()" not in plain.code  # the anchors' operands, cast
    x = torch.from_numpy(_data()[:48].reshape(4, 12))
    a, b = (m(x=x)[graph.outputs[0][0]] for m in (plain, mixed))
    assert torch.equal(a, b)  # a cast of a float32 tensor to float32 is no cast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = mixed(x=x)[graph.outputs[0][0]]
    assert c.dtype == torch.float32 and not torch.equal(c, a)
