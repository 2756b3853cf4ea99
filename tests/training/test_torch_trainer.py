"""`train --backend torch` against our ONNX trainer: 20 steps of the same data, plan and weights give the same
losses and parameters within 1e-5 (AdamW with warm-up, clipping and decay; SGD; LoRA's A and B alone), and
the same outputs (checkpoint, optimizer state, loss curve)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from pseudoformer.training.loop import train  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402

HERE = Path(__file__).parent
GPT2 = ["L=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=32", "N_V=23", "eps=1e-5"]
TOL = 1e-5


def _data(n: int = 400, vocab: int = 23) -> np.ndarray:
    return np.random.default_rng(7).integers(0, vocab, n, dtype=np.int64)


def _both(tmp_path: Path, source: Path, **kw):  # type: ignore[no-untyped-def]
    common = dict(seq_len=12, batch_size=4, steps=20, progress=False, seed=1) | kw
    ours = train(source, _data(), backend="onnx", out=tmp_path / "onnx", **common)
    theirs = train(source, _data(), backend="torch", out=tmp_path / "torch", **common)
    return ours, theirs


def _assert_same(ours, theirs) -> None:  # type: ignore[no-untyped-def]
    assert len(ours.losses) == len(theirs.losses) == 20
    np.testing.assert_allclose(theirs.losses, ours.losses, rtol=TOL, atol=TOL)
    assert set(theirs.weights) == set(ours.weights)
    for k, w in ours.weights.items():
        np.testing.assert_allclose(theirs.weights[k], w, rtol=TOL, atol=TOL, err_msg=k)


def test_adamw_with_warmup_clipping_and_decay_matches_the_onnx_trainer(tmp_path: Path) -> None:
    ours, theirs = _both(tmp_path, HERE / "gpt2_loss.alg", defines=GPT2, lr=3e-3, optimizer="adamw", warmup=5,
                         clip=0.5, weight_decay=0.1)
    _assert_same(ours, theirs)
    for out in ("onnx", "torch"):  # the same files, and the optimizer state under the same names
        d = tmp_path / out
        assert {p.name for p in d.iterdir()} >= {"model.safetensors", "optimizer.safetensors", "loss.csv", "loss.svg"}
    a, b = (read_safetensors(tmp_path / out / "optimizer.safetensors") for out in ("onnx", "torch"))
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-6, err_msg=k)
    meta = [json.loads((tmp_path / out / "training.json").read_text()) for out in ("onnx", "torch")]
    assert meta[0]["trainable"] == meta[1]["trainable"] and meta[1]["steps"] == 20


def test_sgd_matches_the_onnx_trainer(tmp_path: Path) -> None:
    _assert_same(*_both(tmp_path, HERE / "gpt2_loss.alg", defines=GPT2, lr=0.05, optimizer="sgd"))


def test_lora_trains_a_and_b_alone_as_the_onnx_trainer_does(tmp_path: Path) -> None:
    from pseudoformer.model import load

    model = load(HERE / "lora_loss.alg", entry="LoRALoss", config="models/examples/lora.toml", seed=1)
    adapters = [k for k in model.weights if k.rsplit(".", 1)[-1] in ("A_q", "B_q", "A_v", "B_v")]
    ours, theirs = _both(tmp_path, HERE / "lora_loss.alg", entry="LoRALoss", config="models/examples/lora.toml",
                         lr=1e-2, optimizer="adamw", trainable=adapters)
    _assert_same(ours, theirs)
    frozen = [k for k in model.weights if k not in adapters]
    assert all(np.array_equal(theirs.weights[k], model.weights[k]) for k in frozen)


def test_the_command_line_trains_with_torch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pseudoformer.cli import main

    np.save(tmp_path / "ids.npy", _data())
    argv = ["train", str(HERE / "gpt2_loss.alg"), "--data", str(tmp_path / "ids.npy"), "--backend", "torch",
            "--seq-len", "12", "--batch-size", "4", "--steps", "3", "--lr", "1e-3", "-o", str(tmp_path / "out")]
    for d in GPT2:
        argv += ["-D", d]
    assert main(argv) == 0
    assert "trained 3 steps" in capsys.readouterr().err
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "loss.csv").is_file()
    assert main([*argv[:-2], "--fsdp", "--backend", "onnx"]) == 1
    assert "--fsdp" in capsys.readouterr().err


def test_provider_cuda_is_the_torch_trainers_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.cli import main

    assert CompileOptions(backend="torch", provider="cuda").problems("train") == []
    assert CompileOptions(backend="torch", provider="cuda").problems("run")  # train alone runs torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the refusal below is for one without")
    np.save(tmp_path / "ids.npy", _data())
    argv = ["train", str(HERE / "gpt2_loss.alg"), "--data", str(tmp_path / "ids.npy"), "--backend", "torch",
            "--provider", "cuda", "--steps", "1", "--lr", "1e-3", *[a for d in GPT2 for a in ("-D", d)]]
    assert main(argv) == 1
    assert "sees no CUDA device" in capsys.readouterr().err


def test_adamw_constants_and_decay_all_match_the_onnx_trainer(tmp_path: Path) -> None:
    # β₁, β₂, ε from the options, and λ on every parameter (not the matrices alone): one param group
    _assert_same(*_both(tmp_path, HERE / "gpt2_loss.alg", defines=GPT2, lr=3e-3, optimizer="adamw",
                        betas=(0.8, 0.95), eps=1e-6, weight_decay=0.2, decay_all=True))


def test_resume_goes_on_with_m_v_and_t(tmp_path: Path) -> None:
    common = dict(defines=GPT2, seq_len=12, batch_size=4, lr=3e-3, optimizer="adamw", weight_decay=0.1,
                  progress=False, seed=1, backend="torch")
    whole = train(HERE / "gpt2_loss.alg", _data(), steps=20, **common)
    train(HERE / "gpt2_loss.alg", _data(), steps=12, out=tmp_path / "run", **common)
    resumed = train(HERE / "gpt2_loss.alg", _data(), steps=20, resume=tmp_path / "run", out=tmp_path / "run",
                    **common)
    np.testing.assert_allclose(resumed.losses, whole.losses[12:], rtol=TOL, atol=TOL)
    for k, w in whole.weights.items():
        np.testing.assert_allclose(resumed.weights[k], w, rtol=TOL, atol=TOL, err_msg=k)
    state = read_safetensors(tmp_path / "run" / "optimizer.safetensors")
    assert float(np.asarray(state["t"]).reshape(())) == 20


def test_validation_loss_is_the_loops(tmp_path: Path) -> None:
    ours, theirs = _both(tmp_path, HERE / "gpt2_loss.alg", defines=GPT2, lr=3e-3, optimizer="adamw",
                         val_data=_data(96), val_every=10)
    vals = [[h[3] for h in r.history if h[0] in (10, 20)] for r in (ours, theirs)]
    assert len(vals[1]) == 2 and np.isfinite(vals[1]).all()
    np.testing.assert_allclose(vals[1], vals[0], rtol=TOL, atol=TOL)
