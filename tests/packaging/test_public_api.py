"""The public Python API: listed, documented, lazy, and quantize options spelled one way everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec

import numpy as np
import pytest

import pseudoformer
from pseudoformer.base.errors import UsageError

API = {"load", "check", "compile", "generate", "Model", "CompiledModel", "QuantizeOptions"}
HEAVY = ("numpy", "onnx", "onnxruntime", "tvm", "torch", "transformers", "lark")
SIZES = ["L=2", "H=2", "d_e=64", "d_mlp=128", "d_attn=32", "d_mid=32", "N_V=97", "ell_max=32"]


def test_import_reads_nothing_heavy_and_lists_the_api() -> None:
    # A fresh interpreter: this one has long imported numpy.
    code = ("import json, sys, pseudoformer; print(json.dumps({'heavy': sorted({m.split('.')[0] for m in sys.modules} "
            f"& set({list(HEAVY)!r})), 'all': pseudoformer.__all__, 'dir': dir(pseudoformer)}}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(done.stdout)
    assert got["heavy"] == []
    assert API <= set(got["all"]) and API <= set(got["dir"])
    assert "__version__" in got["all"]


def test_version_reads_nothing_heavy() -> None:
    """`pseudoformer --version` builds the whole parser (every subcommand's flags) and imports none of the
    compiler: it took 2.4 s when the generate parser pulled in the generator."""
    code = ("import json, sys\nfrom pseudoformer.cli import main\ntry:\n    main(['--version'])\n"
            "except SystemExit:\n    pass\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    version, heavy = done.stdout.splitlines()
    assert version == f"pseudoformer {pseudoformer.__version__}" and json.loads(heavy) == []


def test_train_is_listed_exactly_when_the_training_package_is_there() -> None:
    assert ("train" in pseudoformer.__all__) == (find_spec("pseudoformer.training") is not None)


@pytest.mark.parametrize("name", sorted(set(pseudoformer.__all__) - {"__version__"}))
def test_each_name_resolves_with_a_docstring(name: str) -> None:
    value = getattr(pseudoformer, name)
    assert (value.__doc__ or "").strip(), name
    assert name in dir(pseudoformer)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        _ = pseudoformer.nonesuch  # type: ignore[attr-defined]


def test_quantize_spellings_are_read_by_one_parser() -> None:
    from pseudoformer.quantization import options

    opts = pseudoformer.QuantizeOptions(bits=4)
    assert options("int4") == opts and options(opts) is opts and options(None) is None
    assert options("int8", block_size=64, symmetric=True) == pseudoformer.QuantizeOptions(8, 64, True)
    with pytest.raises(UsageError, match="choose int4 or int8"):
        options("int3")


@pytest.fixture(scope="module")
def model() -> pseudoformer.Model:
    return pseudoformer.load("gpt2", seed=0, defines=SIZES)


def test_generator_and_lower_take_the_string_as_compile_does(model: pseudoformer.Model) -> None:
    from pseudoformer.deploy import lower
    from pseudoformer.generation.generator import Generator

    by_string = Generator(model, quantize="int4", cache=False)
    by_options = Generator(model, quantize=pseudoformer.QuantizeOptions(bits=4), cache=False)
    assert by_string.weights.keys() == by_options.weights.keys()
    assert all(np.array_equal(by_string.weights[k], by_options.weights[k]) for k in by_string.weights)
    proto = lower(model, quantize="int8")
    assert any(n.op_type == "MatMulNBits" for n in proto.graph.node)
    quantization = {p.key: p.value for p in proto.metadata_props}["quantization"]
    assert quantization == pseudoformer.QuantizeOptions(bits=8).describe()
    with pytest.raises(UsageError, match="choose int4 or int8"):
        Generator(model, quantize="int2")


def test_prepare_takes_the_string(model: pseudoformer.Model) -> None:
    from pseudoformer.generation.api import prepare

    by_string = prepare("gpt2", defines=SIZES, quantize="int4", cache=False).generator.weights
    by_options = prepare("gpt2", defines=SIZES, quantize=pseudoformer.QuantizeOptions(), cache=False).generator.weights
    assert by_string.keys() == by_options.keys() != model.weights.keys()  # quantized: other tensors
    assert all(np.array_equal(by_string[k], by_options[k]) for k in by_string)
