"""`train --backend torch --torch-compile`: the loss module under torch.compile trains as the eager module does
(a tiny GPT-2, AdamW with clipping, --grad-accum's micro-batches and a shorter last step: three input shapes,
each compiled once), the flag works end to end on the command line and says once that the first step compiles,
other backends refuse it, and a compiler that is missing is one message, not a traceback.

Compile time is kept low: the smallest sizes, two runs that compile (the API's and the command line's, which
finds the first's kernels in inductor's cache), and the failing compile fails at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from pseudoformer.cli import main  # noqa: E402
from pseudoformer.model import load  # noqa: E402
from pseudoformer.training.loop import train  # noqa: E402
from tests.training.tiny_train import LOSS, TINY  # noqa: E402

SIZES = [d for d in TINY if d != "-D"]
# 34 sequences of 12: steps of 2 micro-batches of 3 rows, the last step 4 rows (micro-batches of 3 and 1)
PLAN = dict(defines=SIZES, seq_len=12, batch_size=3, grad_accum=2, lr=3e-3, optimizer="adamw", clip=1.0,
            weight_decay=0.1, seed=1, progress=False, backend="torch", threads=1)
# inductor fuses and reorders the float32 sums (the loss's, the norms', the products' epilogues). Measured on
# this tiny GPT-2 over 6 steps (Intel Xeon, AVX-512): a loss within 1.2e-7 relative (5.1e-6 of ~43: an ulp or
# two), a weight within 6e-8. The bounds leave 16× room and more, for another CPU's vector width and order.
LOSS_RTOL = 2e-6
WEIGHT_RTOL, WEIGHT_ATOL = 1e-5, 1e-6


# b_k is left out: its gradient is exactly zero (a softmax does not see a shift of every score), so AdamW turns
# each side's rounding noise into steps of ±η, which would compare two noises (as tests/training/test_grad_accum.py)
TRAINED = [k for k in load(LOSS, defines=SIZES, seed=1).weights if ".b_k" not in k]


def _tokens(n: int = 34 * 12) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 50, n, dtype=np.int64)


@pytest.fixture(scope="module")
def eager():  # type: ignore[no-untyped-def]
    return train(LOSS, _tokens(), trainable=TRAINED, **PLAN)


def test_compiled_steps_give_the_eager_losses_and_weights(eager) -> None:  # type: ignore[no-untyped-def]
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = train(LOSS, _tokens(), torch_compile=True, trainable=TRAINED, **PLAN)
    # one graph for the micro-batches of 3 rows, one for the last step's second micro-batch of 1: not one a step
    assert counters["stats"]["unique_graphs"] == 2
    assert len(compiled.losses) == len(eager.losses) == 6
    np.testing.assert_allclose(compiled.losses, eager.losses, rtol=LOSS_RTOL)
    assert set(compiled.weights) == set(eager.weights)
    for k, w in eager.weights.items():
        np.testing.assert_allclose(compiled.weights[k], w, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL, err_msg=k)


def test_the_command_line_compiles_and_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "ids.npy", _tokens())
    argv = ["train", LOSS, "--data", str(tmp_path / "ids.npy"), *TINY, "--seq-len", "12", "--batch-size", "3",
            "--steps", "2", "--lr", "3e-3", "--threads", "1", "--backend", "torch", "--torch-compile", "-o",
            str(tmp_path / "out")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("note: --torch-compile: the first step compiles") == 1 and "trained 2 steps" in err
    assert (tmp_path / "out" / "model.safetensors").is_file()
    # the checkpoint has our names, not the compiled wrapper's (_orig_mod.)
    from pseudoformer.weights.safetensors_io import read_safetensors

    names = set(read_safetensors(tmp_path / "out" / "model.safetensors"))
    assert names and not any("_orig_mod" in k for k in names)
    state = set(read_safetensors(tmp_path / "out" / "optimizer.safetensors"))
    assert state == {"t"} | {f"{m}.{k}" for k in names for m in ("m", "v")}


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_other_backends_refuse_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str) -> None:
    np.save(tmp_path / "ids.npy", _tokens())
    argv = ["train", LOSS, "--data", str(tmp_path / "ids.npy"), *TINY, "--steps", "1", "--lr", "1e-3",
            "--backend", backend, "--torch-compile"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --torch-compile puts the torch backend's loss module under torch.compile: add "
                          "--backend torch") and err.count("\n") == 1


def test_a_missing_compiler_is_one_message(tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", _tokens())
    argv = [sys.executable, "-m", "pseudoformer", "train", LOSS, "--data", str(tmp_path / "ids.npy"), *TINY,
            "--seq-len", "12", "--batch-size", "3", "--steps", "1", "--lr", "1e-3", "--threads", "1",
            "--backend", "torch", "--torch-compile"]
    # no C++ compiler where inductor looks (CXX), and no cached kernels to stand in for one
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
           "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --torch-compile: torch.compile could not compile the loss module (")
    assert "no C++ compiler" in last and last.endswith("drop --torch-compile to train it eagerly")
    assert "Traceback" not in done.stderr


def test_our_inductor_rules_rewrite_gpt2s_step() -> None:
    """The tiny GPT-2's compiled step meets each of our post-grad rules (backends/torch/inductor_rules/): the
    loss's pick, the tied embedding's two gradients, GELU's tanh (its one layer's, in the forward and the
    backward); the same losses without them."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.torch_loop import torch_step

    model = load(LOSS, defines=SIZES, seed=1)
    x = _tokens(3 * 12).reshape(3, 12)
    losses, hits = [], []
    for rules in (True, False):
        torch._dynamo.reset()
        options = CompileOptions(backend="torch", threads=1, torch_compile=True, inductor_rules=rules)
        _, runtime = torch_step(model.graph, model.weights, None, Optimizer("adamw"), 2, {}, None, options=options)
        with inductor_config.patch(force_disable_caches=True):  # compiled here, so that the rules run
            losses.append([runtime.step({"x": x}, 1e-3) for _ in range(3)])
        hits.append(dict(runtime.module.inductor_rules.hits))
    assert hits == [{"scatter_add_onto_zeros": 1, "sparse_into_product": 1, "tanh_as_sigmoid": 2}, {}]
    np.testing.assert_allclose(losses[0], losses[1], rtol=LOSS_RTOL)
