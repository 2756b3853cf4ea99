"""`use A as B from "f.alg"`: B defined in the using file as A itself (models/phi3.alg is Mistral so): an entry
there, exported by it, typed by a parameter group `θ : B`, with A's body, parameter names and callees."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.model import check, load

LIB = ("Algorithm: y ← Scale(x | θ)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  Parameters: θ consisting of:\n"
       "    γ ∈ ℝ^{d}\n"
       "  1 return y = Twice(γ ⊙ x)\n\n"
       "Algorithm: y ← Twice(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = x + x\n")
WRAP = ("Algorithm: y ← Wrapped(x | θ)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  Parameters: θ : Gain\n"
        "  1 return y = Gain(x | θ)\n")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    return _write(tmp_path / "lib.alg", LIB)


def test_the_alias_is_the_algorithm_under_its_new_name(tmp_path: Path, lib: Path) -> None:
    src = _write(tmp_path / "gain.alg", 'use Scale as Gain from "lib.alg"\n')
    assert check(src) == ["Gain"]  # an entry of the using file, and its default one
    gain, scale = load(src, defines=["d=3"]), load(lib, entry="Scale", defines=["d=3"])
    assert gain.entry == "Gain" and gain.graph.meta["entry"] == "Gain"
    assert gain.weights.keys() == scale.weights.keys() == {"gamma"}  # Scale's names: no group around them
    x = np.arange(3, dtype=np.float32)[None]
    np.testing.assert_array_equal(gain.run(x=x)["y"], scale.run(x=x)["y"])  # Twice resolved in lib.alg


def test_the_alias_is_exported_and_typed_as_any_definition(tmp_path: Path, lib: Path) -> None:
    _write(tmp_path / "gain.alg", 'use Scale as Gain from "lib.alg"\n')
    named = _write(tmp_path / "named.alg", 'use Gain from "gain.alg"\n' + WRAP)
    everything = _write(tmp_path / "all.alg", 'use "gain.alg"\n' + WRAP)
    for src in (named, everything):
        assert load(src, defines=["d=3"]).weights.keys() == {"theta.gamma"}


def test_the_old_name_is_not_imported_by_the_alias(tmp_path: Path, lib: Path) -> None:
    src = _write(tmp_path / "user.alg", 'use Scale as Gain from "lib.alg"\n'
                 "Algorithm: y ← F(x | γ)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  Parameters: γ ∈ ℝ^{d}\n"
                 "  1 return y = Scale(x | γ)\n")
    with pytest.raises(CompileError, match="unknown algorithm Scale"):
        load(src, entry="F", defines=["d=3"])


@pytest.mark.parametrize(("text", "message"), [
    ('use Scale as Gain from "lib.alg"\n' + WRAP.replace("Wrapped", "Gain"),
     r"Gain is defined twice in this file: at line 2, and here as Scale"),
    ('use Scale as Gain, Twice as Gain from "lib.alg"\n',
     r"Gain is defined twice in this file: by an earlier `use … as`, and here as Twice"),
    ('use Thrice as Gain from "lib.alg"\n', r"lib.alg has no algorithm Thrice \(it defines Scale, Twice\)"),
])
def test_a_name_defined_twice_or_not_there(tmp_path: Path, lib: Path, text: str, message: str) -> None:
    src = _write(tmp_path / "bad.alg", text)
    with pytest.raises(CompileError, match=message):
        check(src)


def test_phi3_is_mistral() -> None:
    """models/phi3.alg defines Phi3 as mistral.alg's Mistral: the same parameters by the same names, the same
    logits."""
    sizes = ["L=2", "H=4", "H_kv=2", "d_e=32", "d_attn=8", "d_mlp=48", "N_V=101", "w=5"]
    phi3, mistral = load("phi3", defines=sizes), load("mistral", defines=sizes)
    assert phi3.entry == "Phi3" and phi3.weights.keys() == mistral.weights.keys()
    for name, array in mistral.weights.items():
        phi3.weights[name] = array
    x = np.random.default_rng(0).integers(0, 101, size=(2, 9))
    np.testing.assert_array_equal(phi3.run(x=x)["Y"], mistral.run(x=x)["Y"])
