"""benchmarks/gpu.py --smoke: every code path of the GPU benchmark at tiny sizes on the CPU, in one process.

Timings are never asserted. What is checked: the one table has a row per forward shape and dtype (and its session of fixed sizes, CUDA's graphs on a GPU), per decode
shape, precision, batch and figure (per token, per token with --cuda-graph: CUDA's alone, empty here with the
reason, and prefill), and the training step; our fp32 logits equal torch's; genai's cells say why
they are empty where genai is not importable; the smoke run judges no target; without a GPU the full run
refuses in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("gpu") / "gpu.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert out.read_text() in done.stdout
    return out.read_text()


def _rows(table: str, section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith(f"| {section} |")]


def test_the_table_has_every_row(smoke: str) -> None:
    assert "| section | case | dtype | ours ms | torch eager ms | torch.compile ms | genai ms | ratio | target | note |" in smoke
    assert "CPU:" in smoke and "in one process" in smoke
    forward = _rows(smoke, "forward")
    assert [(r[1], r[2]) for r in forward] == [(f"GPT-2 small {s}{graph}", d) for d in ("float32", "float16")
                                               for s in ("1×8", "2×16") for graph in ("", ", CUDA graph")]
    decode = _rows(smoke, "decode")
    assert len(decode) == 2 * 2 * 2 * 3  # shapes, precisions, batches; per token, with --cuda-graph, prefill
    assert {r[2] for r in decode} == {"fp16", "int4"}
    assert {r[1].split(" batch")[0] for r in decode} == {"SmolLM2-135M", "Qwen2.5-0.5B"}
    graphed = [r for r in decode if r[1].endswith("--cuda-graph")]
    assert len(graphed) == 8 and all(r[3] == "—" and "not on the CPU" in r[9] for r in graphed)  # CUDA's alone
    train = _rows(smoke, "train")
    assert len(train) == 1 and "AdamW" in train[0][1] and "× torch.compile" in train[0][9]
    for r in [*forward, *decode, *train]:
        assert r in graphed or float(r[3]) > 0  # ours ran


def test_ours_computes_torch_s_logits(smoke: str) -> None:
    for r in _rows(smoke, "forward"):
        delta = float(r[9].rsplit(" ", 1)[1])  # from torch's; a session of fixed sizes: from the session's without
        assert delta <= (1e-5 if r[2] == "float32" else 5e-3), r


def test_genai_s_cells_say_why_they_are_empty(smoke: str) -> None:
    for r in _rows(smoke, "decode"):
        assert r[6] != "—" or "onnxruntime-genai" in r[9] or "builder" in r[9], r


def test_the_smoke_run_judges_no_target(smoke: str) -> None:
    assert " met " not in smoke and "missed" not in smoke


def test_the_full_run_needs_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(SCRIPT), "--sections", "forward"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "no CUDA device here" in done.stderr and "Traceback" not in done.stderr


def test_the_decode_checkpoints_carry_a_tokenizer(tmp_path: Path) -> None:
    """genai's model builder (gpu.py's decode anchor) builds nothing from a checkpoint without a tokenizer."""
    sys.path.insert(0, str(SCRIPT.parent))
    from common.gpu_decode import checkpoint

    _, directory, vocab = checkpoint("SmolLM2-135M", tmp_path / "smol", smoke=True)
    assert (directory / "tokenizer.json").is_file() and (directory / "config.json").is_file() and vocab == 97
