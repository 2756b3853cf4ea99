"""`train --backend torch` on a process group: 2 CPU processes (gloo, started by torchrun on localhost) give the
weights and the validation loss of one process with the same global batch, within 1e-5, with DDP and with FSDP2
(--fsdp); rank 0 alone writes the checkpoint and the loss curve; each rank computes its share of the validation
batches; with --grad-accum the ranks reduce the summed gradient once a step (accum_sync_worker.py counts it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from pseudoformer.training import loop, steps  # noqa: E402
from pseudoformer.training.loop import train  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402
from tests.training.test_torch_trainer import GPT2, HERE, _data  # noqa: E402

PLAN = dict(seq_len=12, batch_size=5, steps=6, lr=1e-3, optimizer="adamw", clip=1.0)  # 5 rows: shares of 3 and 2
VAL = dict(val_every=3)  # and at the last step: 2 measures of the held-out data


def _torchrun(tmp_path: Path, out: Path, *flags: str, expect: int = 6, val: bool = False) -> None:
    np.save(tmp_path / "ids.npy", _data())
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "pseudoformer", "train", str(HERE / "gpt2_loss.alg"), "--data", str(tmp_path / "ids.npy"),
            "--backend", "torch", "--threads", "1", "--seed", "1", "-o", str(out)]
    if val:  # the held-out data too, its loss measured VAL's steps
        np.save(tmp_path / "val.npy", _val())
        argv += ["--val-data", str(tmp_path / "val.npy"), "--val-every", str(VAL["val_every"])]
    for k, v in PLAN.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    argv += flags  # after the plan's: a later --steps is the one argparse keeps
    for d in GPT2:
        argv += ["-D", d]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count(f"trained {expect} steps") == 1  # rank 0 alone reports


def _val() -> np.ndarray:
    return _data(156)[::-1].copy()  # 13 rows of 12: batches of 5, 5 and 3


@pytest.fixture(scope="module")
def one_process():  # type: ignore[no-untyped-def]
    return train(HERE / "gpt2_loss.alg", _data(), defines=GPT2, backend="torch", seed=1, threads=1, progress=False,
                 val_data=_val(), **PLAN, **VAL)


@pytest.mark.parametrize("flags", [(), ("--fsdp",)], ids=["ddp", "fsdp"])
def test_two_processes_give_the_weights_of_one(tmp_path: Path, one_process, flags: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    _torchrun(tmp_path, tmp_path / "out", *flags, val=True)
    got = read_safetensors(tmp_path / "out" / "model.safetensors")
    assert set(got) == set(one_process.weights)
    for k, w in one_process.weights.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, err_msg=k)
    rows = [line.split(",") for line in (tmp_path / "out" / "loss.csv").read_text().splitlines()]
    assert rows[0][1] == "loss" and rows[0][3] == "val_loss"
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], one_process.losses, rtol=1e-5)
    vals = [float(r[3]) for r in rows[1:] if r[3]]
    assert len(vals) == 2
    np.testing.assert_allclose(vals, [h[3] for h in one_process.history if np.isfinite(h[3])], rtol=1e-5)


def test_fsdp_resumes_from_a_run_of_two_processes(tmp_path: Path, one_process) -> None:  # type: ignore[no-untyped-def]
    # m, v and t read back whole and placed as each rank's shard (distributed.Group.like)
    _torchrun(tmp_path, tmp_path / "out", "--fsdp", "--steps", "3", expect=3)
    _torchrun(tmp_path, tmp_path / "out", "--fsdp", "--resume", str(tmp_path / "out"))
    got = read_safetensors(tmp_path / "out" / "model.safetensors")
    for k, w in one_process.weights.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("flags", [("--precision", "bf16"), ("--precision", "bf16", "--fsdp")], ids=["ddp", "fsdp"])
def test_bf16_on_two_processes_tracks_one(tmp_path: Path, flags: tuple[str, ...]) -> None:
    # torch.autocast in each rank's forward over DDP's or FSDP2's float32 parameters; two processes' bf16 rows
    # round as one process's do up to the products' blocking, so within bf16's rounding, not 1e-5
    one = train(HERE / "gpt2_loss.alg", _data(), defines=GPT2, backend="torch", seed=1, threads=1, progress=False,
                precision="bf16", **PLAN)
    _torchrun(tmp_path, tmp_path / "out", *flags)
    got = read_safetensors(tmp_path / "out" / "model.safetensors")
    for k, w in one.weights.items():
        assert got[k].dtype == np.float32
        if ".b_k" not in k:  # a key bias's gradient is exactly 0 in exact arithmetic: AdamW makes its noise steps
            np.testing.assert_allclose(got[k], w, rtol=0, atol=2e-3, err_msg=k)
    losses = [float(line.split(",")[1]) for line in (tmp_path / "out" / "loss.csv").read_text().splitlines()[1:]]
    np.testing.assert_allclose(losses, one.losses, rtol=1e-2)


def test_fp16_on_two_processes_skips_on_every_rank(tmp_path: Path) -> None:
    # DDP averages the gradients before the scaler reads them: every rank sees the same ±∞ and skips the same
    # step, and rank 0's checkpoint holds the scale that every rank's halvings left
    _torchrun(tmp_path, tmp_path / "out", "--precision", "fp16")
    meta = json.loads((tmp_path / "out" / "training.json").read_text())
    state = read_safetensors(tmp_path / "out" / "optimizer.safetensors")
    skipped = meta["skipped_steps"]
    assert skipped and skipped[0] == 1
    assert float(state["amp.scale"]) == 2.0 ** 16 / 2 ** len(skipped)
    assert float(state["t"]) == 6 - len(skipped)


def test_each_rank_computes_its_share_of_the_validation_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[steps.Run] = []
    monkeypatch.setattr(loop, "run_steps", runs.append)  # the run as prepared, its steps not run
    train(HERE / "gpt2_loss.alg", _data(), defines=GPT2, backend="torch", seed=1, threads=1, progress=False,
          val_data=_val(), **PLAN, **VAL)
    sizes = [len(batch) for batch in np.array_split(runs[0].val, range(5, len(runs[0].val), 5))]
    assert len(sizes) == 3
    whole = steps._val_sums(runs[0], 0, 1)
    shares = [steps._val_sums(runs[0], rank, 2) for rank in (0, 1)]
    assert [count for _, count in shares] == [sizes[0] + sizes[2], sizes[1]] and whole[1] == sum(sizes)
    assert sum(total for total, _ in shares) == pytest.approx(whole[0], rel=1e-12)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_micro_batches_on_two_processes_give_one_process_s_batch_and_reduce_once(tmp_path: Path, mode: str) -> None:
    """--grad-accum 2 on two processes: micro-batches of 5 rows (shares of 3 and 2), each rank's gradients summed in
    its own .grad and reduced over the processes once a step, in the last micro-batch's backward (DDP's no_sync,
    FSDP2's set_requires_gradient_sync): as many reductions as the same global batch in one micro-batch (each
    micro-batch's own would be twice as many), and one process's batch of 10's parameters."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "tests.training.accum_sync_worker", str(tmp_path), mode]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts["1"] > 0 and counts["2"] == counts["1"], counts
    whole = train(HERE / "gpt2_loss.alg", _data(), defines=GPT2, backend="torch", seed=1, threads=1, progress=False,
                  **(PLAN | {"batch_size": 10}))
    got = np.load(tmp_path / "weights.npz")
    assert set(got.files) == set(whole.weights)
    for k, w in whole.weights.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, err_msg=k)
