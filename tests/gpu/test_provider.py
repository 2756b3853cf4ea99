"""`--provider cuda` wherever a model runs (run, generate, train, and the API's `provider=`): refused in one
line naming pseudoformer[gpu] (exit 1) where onnxruntime has no CUDA, before anything is compiled; on CUDA
(`pytest -m cuda`) fp32 with TF32 off agrees with the CPU's fp32 to 1e-5 and greedy tokens are the CPU's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pseudoformer
from pseudoformer.backends.onnx.providers import CUDA_OPTIONS, session_providers
from pseudoformer.base.errors import UsageError
from tests.cli.test_cli import assert_user_error
from tests.cli.test_generate import TINY as GEN_TINY
from tests.cli.test_train import LOSS
from tests.cli.test_train import TINY as TRAIN_TINY
from tests.gpu.cuda import HAS_CUDA, cuda

GPT2 = "models/gpt2.alg"
GENERATE = ["generate", GPT2, *GEN_TINY, "--prompt-ids", "4 5 6", "--max-new-tokens", "5", "--temperature", "0"]
no_cuda_here = pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA: the refusal is for one without it")


def _train_args(data: Path, *extra: str) -> list[str]:
    return ["train", LOSS, *TRAIN_TINY, "--seq-len", "8", "--batch-size", "4", "--data", str(data),
            "--steps", "3", "--lr", "0.01", *extra]


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.tile(np.arange(20, dtype=np.int64), 20))
    return path


def test_cuda_is_asked_for_with_tf32_off() -> None:
    assert session_providers("cuda") == [("CUDAExecutionProvider", {"use_tf32": "0"})] and CUDA_OPTIONS
    assert session_providers("cpu") == ["CPUExecutionProvider"]


@no_cuda_here
@pytest.mark.parametrize("command", ["generate", "train"])
def test_cuda_without_it_is_one_line_naming_the_extra(cli, command: str, ids: Path) -> None:  # type: ignore[no-untyped-def]
    argv = GENERATE if command == "generate" else _train_args(ids)
    code, out, err = cli(*argv, "--provider", "cuda")
    assert_user_error((code, out, err), "CUDAExecutionProvider", "pseudoformer[gpu]")
    assert len(err.strip().splitlines()) == 1 and out == ""


@no_cuda_here
def test_the_api_refuses_cuda_without_it(ids: Path) -> None:
    with pytest.raises(UsageError, match=r"pseudoformer\[gpu\]"):
        pseudoformer.generate(GPT2, [4, 5, 6], max_new_tokens=2, temperature=0, defines=GEN_TINY[1::2],
                              provider="cuda")
    with pytest.raises(UsageError, match=r"pseudoformer\[gpu\]"):
        pseudoformer.train(LOSS, str(ids), defines=TRAIN_TINY[1::2], seq_len=8, batch_size=4, steps=1, lr=0.01,
                           provider="cuda", progress=False)


@pytest.mark.parametrize("argv", [
    [*GENERATE, "--backend", "numpy", "--provider", "cuda"],
    [*GENERATE, "--provider", "tpu"],
], ids=["numpy", "unknown"])
def test_a_provider_where_none_applies(cli, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    want = "unknown provider 'tpu'" if "tpu" in argv else "is for the onnx backend"
    assert_user_error(cli(*argv), want)


def test_train_refuses_a_provider_for_the_interpreter(cli, ids: Path) -> None:  # type: ignore[no-untyped-def]
    assert_user_error(cli(*_train_args(ids, "--backend", "numpy", "--provider", "cuda")),
                      "is for the onnx or torch backend")  # the torch trainer runs on CUDA too


@cuda
def test_generate_on_cuda_gives_the_cpu_s_greedy_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    from pseudoformer.cli import main

    tokens = {}
    for provider in ("cpu", "cuda"):
        assert main([*GENERATE, "--max-new-tokens", "12", "--provider", provider]) == 0
        tokens[provider] = capsys.readouterr().out.split()
    assert tokens["cuda"] == tokens["cpu"] and len(tokens["cpu"]) == 12
    api = pseudoformer.generate(GPT2, [[4, 5, 6], [7, 8, 9]], max_new_tokens=12, temperature=0,
                                defines=GEN_TINY[1::2], provider="cuda")
    assert api[0] == [int(t) for t in tokens["cpu"]]


@cuda
def test_generate_on_cuda_keeps_the_cache_on_the_device() -> None:
    from pseudoformer.generation.api import prepare

    prepared = prepare(GPT2, defines=GEN_TINY[1::2], provider="cuda")
    runtime = prepared.generator.runtime
    assert runtime.device == "cuda"
    _, cache = runtime.prefill({"x": np.array([[4, 5, 6]], np.int64)})
    values = [v for v in cache.values() if hasattr(v, "device_name")]
    assert values and all(v.device_name() == "cuda" for v in values)


@cuda
def test_fp32_on_cuda_agrees_with_the_cpu_to_1e_5(tmp_path: Path) -> None:
    compiled = pseudoformer.compile(GPT2, defines=GEN_TINY[1::2], seed=3)
    x = np.random.default_rng(0).integers(0, 50, (4, 48), dtype=np.int64)
    cpu, gpu = compiled.run({"x": x}), compiled.run({"x": x}, provider="cuda")
    for k in cpu:
        assert np.abs(gpu[k] - cpu[k]).max() <= 1e-5 * max(1.0, float(np.abs(cpu[k]).max())), k


@cuda
def test_train_on_cuda_follows_the_cpu(tmp_path: Path, ids: Path) -> None:
    results = {}
    for provider in ("cpu", "cuda"):
        results[provider] = pseudoformer.train(LOSS, str(ids), defines=TRAIN_TINY[1::2], seq_len=8, batch_size=4,
                                               steps=5, lr=0.01, provider=provider, progress=False)
    np.testing.assert_allclose(results["cuda"].losses, results["cpu"].losses, rtol=1e-5)
