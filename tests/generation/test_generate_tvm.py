"""Generation on the TVM backend against the numpy reference: the paper's encoder–decoder (Algorithms 8 and 15).

The derived graphs (encoder, then the cached decoder step, which also prefills) are compiled by TVM
once; every step's scores must equal the interpreter's to 1e-4 and so give the same tokens, greedy
and seeded sampling alike.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm.relax", reason="the TVM backend needs apache-tvm: pip install pseudoformer[tvm]")

from pseudoformer.cli import main  # noqa: E402  (after the skip: without TVM nothing here runs)
from pseudoformer.generation import Generation, Generator, Sampling  # noqa: E402
from pseudoformer.model import load  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models" / "paper"
# Small, as in tests/passes/test_kv_cache.py, with two layers each side so that the cache has several slots.
SIZES = ["L_enc=2", "L_dec=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=24", "N_V=29"]
PROMPTS = [[1, 2, 3], [4, 5, 6]]  # a batch of two, each its own context
CONTEXTS = [[3, 1, 4, 1, 5, 9, 2], [2, 6, 5, 3, 5, 8, 9]]


@pytest.fixture(scope="module")
def generators() -> dict[str, Generator]:
    model = load(MODELS / "edtransformer.alg", config=os.devnull, defines=SIZES)
    return {b: Generator(model, decoder_input="x", encoder_input="z", backend=b) for b in ("numpy", "tvm")}


def _generate(gen: Generator, sampling: Sampling, **kw: object) -> Generation:
    return gen.generate(PROMPTS, max_new_tokens=10, sampling=sampling, seed=7, keep_scores=True,
                        encoder_inputs={"z": CONTEXTS}, **kw)


@pytest.mark.parametrize("sampling", [Sampling(temperature=0), Sampling(temperature=1.2, top_k=8)],
                         ids=["greedy", "sampled"])
def test_encoder_decoder_on_tvm_gives_the_numpy_tokens_and_scores(generators: dict, sampling: Sampling) -> None:
    want, got = (_generate(generators[b], sampling) for b in ("numpy", "tvm"))
    assert got.tokens == want.tokens
    assert len(got.scores) == len(want.scores) == 10
    for step, (g, w) in enumerate(zip(got.scores, want.scores, strict=True)):
        assert g.shape == w.shape == (2, 29), step
        assert np.abs(g - w).max() <= 1e-4, f"step {step}: max |tvm − numpy| {np.abs(g - w).max():.3g}"
    assert got.prefill_seconds > 0 and len(got.step_seconds) == 9


def test_a_row_stops_at_the_end_token_on_tvm_as_on_numpy(generators: dict) -> None:
    greedy = Sampling(temperature=0)
    first = _generate(generators["numpy"], greedy).tokens[0]
    eos = first[3]  # a token row 0 produces: it stops there, the other row may go on
    want, got = (_generate(generators[b], greedy, eos_token=eos) for b in ("numpy", "tvm"))
    assert got.tokens == want.tokens and got.tokens[0][-1] == eos


def test_cli_generate_edinference_on_tvm_prints_the_numpy_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", str(MODELS / "edinference.alg"), "--config", os.devnull,
            *(a for d in [*SIZES, "τ=1", "ℓ_gen=6", "bos_token=1", "eos_token=0"] for a in ("-D", d)),
            "--encoder-ids", "3 1 4 1 5 9 2", "--temperature", "0"]
    printed = []
    for backend in ("numpy", "tvm"):
        assert main([*argv, "--backend", backend]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and printed[0].strip()
