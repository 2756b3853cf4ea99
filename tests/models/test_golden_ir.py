"""Golden IR dumps: the literal lowering of every model at a small size, printed deterministically.

A change to the frontend that changes a graph shows up here as a diff to review. Regenerate with
UPDATE_GOLDEN=1 pytest tests/models/test_golden_ir.py, then read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pseudoformer.ir.printer import format_graph
from pseudoformer.ir.verify import verify
from pseudoformer.model import load

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
TINY = dict(L=1, H=2, d_e=4, d_mlp=8, d_attn=2, d_mid=2, ell_max=8, N_V=5)
CASES = {
    "gpt2": ("models/gpt2.alg", None, TINY | {"eps": 1e-5}),
    "bert": ("models/bert.alg", "BERT", TINY | {"eps": 1e-12, "d_f": 4}),
    "bert_encoder": ("models/bert.alg", "BERTEncoder", TINY | {"eps": 1e-12}),
    "alg4_attention": ("models/paper/primitives.alg", "4", dict(d_x=3, d_z=2, d_attn=2, d_out=3)),
    "alg5_mhattention": ("models/paper/primitives.alg", "MHAttention", dict(d_x=3, d_z=3, d_attn=2, d_mid=2,
                                                                              d_out=3, H=2)),
    "alg6_layer_norm": ("models/paper/primitives.alg", "layer_norm", dict(d_e=3)),
    "alg8_edtransformer": ("models/paper/edtransformer.alg", None,
                           {k: v for k, v in TINY.items() if k != "L"} | {"L_enc": 1, "L_dec": 1}),
    "alg9_etransformer": ("models/paper/etransformer.alg", None, TINY | {"d_f": 4}),
    "alg10_dtransformer": ("models/paper/dtransformer.alg", None, TINY),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_ir(name: str) -> None:
    source, entry, hyper = CASES[name]
    model = load(source, entry=entry, config=os.devnull, defines=[f"{k}={v}" for k, v in hyper.items()])
    verify(model.graph)
    text = format_graph(model.graph, with_locations=False)
    path = GOLDEN / f"{name}.ir"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_printing_is_deterministic() -> None:
    source, entry, hyper = CASES["gpt2"]
    defines = [f"{k}={v}" for k, v in hyper.items()]
    a = format_graph(load(source, config=os.devnull, defines=defines).graph)
    b = format_graph(load(source, config=os.devnull, defines=defines).graph)
    assert a == b
