"""A condition on the block-loop variable is known in each layer (issue 27): Gemma 2's alternating local and
global layers, `[[t_z ≤ t_x ∧ (l mod 2 = 0 ∨ t_x − t_z < w)]]`, give layer 1 a windowed causal attention and
layer 2 a plain causal one, each without a mask operand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from tests.frontend.notation_run import run_both

EXAMPLE = Path(__file__).resolve().parents[2] / "models" / "examples" / "sliding_window.alg"
WINDOW = "Mask[t_z, t_x] ≡ [[t_z ≤ t_x ∧ t_x − t_z < w]]"


def _alternating(tmp_path: Path, condition: str) -> Path:
    source = EXAMPLE.read_text(encoding="utf-8")
    assert WINDOW in source
    path = tmp_path / "alternating.alg"
    path.write_text(source.replace(WINDOW, f"Mask[t_z, t_x] ≡ [[{condition}]]"), encoding="utf-8")
    (tmp_path / "alternating.toml").write_text(EXAMPLE.with_suffix(".toml").read_text(encoding="utf-8"),
                                               encoding="utf-8")
    return path


def _attentions(path: Path) -> list[dict]:
    model = load(path, include=[EXAMPLE.parents[1]], defines=["L=4", "w=3"])
    graph = optimize(model.graph, 2)
    ops = [n.op for n in graph.nodes()]
    assert Op.WHERE not in ops and Op.EQ not in ops and ops.count(Op.SOFTMAX) == 1
    return [(dict(n.attrs), len(n.src)) for n in graph.nodes() if n.op is Op.ATTENTION]


def test_alternating_windows_become_each_layers_own_attention(tmp_path: Path) -> None:
    got = _attentions(_alternating(tmp_path, "t_z ≤ t_x ∧ (l mod 2 = 0 ∨ t_x − t_z < w)"))
    assert [(a.get("causal"), a.get("window", 0), k) for a, k in got] == [(True, 3, 3), (True, 0, 3)] * 2


def test_the_other_spellings_fold_too(tmp_path: Path) -> None:
    for condition in ("t_z ≤ t_x ∧ (l mod 2 = 1 ∧ t_x − t_z < w ∨ l mod 2 = 0)",
                      "t_z ≤ t_x ∧ (t_x − t_z < w ∨ l mod 2 ≠ 1)"):
        got = _attentions(_alternating(tmp_path, condition))
        assert [(a.get("window", 0), k) for a, k in got] == [(3, 3), (0, 3)] * 2, condition


def test_the_fused_layers_compute_the_masks_as_written(tmp_path: Path) -> None:
    model = load(_alternating(tmp_path, "t_z ≤ t_x ∧ (l mod 2 = 0 ∨ t_x − t_z < w)"),
                 include=[EXAMPLE.parents[1]], defines=["L=4", "w=3"])
    x = np.random.default_rng(0).integers(0, 50, (2, 11))
    got = run_both(model, x=x)["P"]  # the interpreter at -O0 (the masks as written) and ORT at -O2 agree
    everywhere = load(_alternating(tmp_path, "t_z ≤ t_x ∧ t_x − t_z < w"), include=[EXAMPLE.parents[1]],
                      defines=["L=4", "w=3"])
    everywhere.weights = model.weights
    assert np.abs(everywhere.run(x=x)["P"] - got).max() > 1e-4  # the global layers do see past the window
