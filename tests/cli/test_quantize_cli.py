"""`compile --quantize` and `generate --quantize` as a user types them, the Python API's `quantize=`,
and the mistakes: one message, exit code 1, nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import pseudoformer
from pseudoformer.base.errors import UsageError
from tests.cli.conftest import Cli
from tests.cli.test_cli import GPT2, SMALL_GPT2, assert_user_error

WIDER = [*SMALL_GPT2, "-D", "d_e=64", "-D", "d_mlp=128", "-D", "d_attn=16", "-D", "d_mid=16"]


def test_compile_int4_writes_matmulnbits_and_runs(cli: Cli, out_dir: Path) -> None:
    plain, quantized = out_dir / "fp32.onnx", out_dir / "int4.onnx"
    assert cli("compile", GPT2, *WIDER, "-o", plain)[0] == 0
    code, _, err = cli("compile", GPT2, *WIDER, "-o", quantized, "--quantize", "int4", "--block-size", "16",
                       "--symmetric", "--quantize-embeddings")
    assert code == 0, err
    assert "weights int4, blocks of 16, symmetric, balanced, accuracy level 4" in err  # level 4 by default
    model = onnx.load(str(quantized))
    types = {n.op_type for n in model.graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= types and "MatMul" not in types
    assert {(o.domain, o.version) for o in model.opset_import} >= {("com.microsoft", 1)}
    props = {p.key: p.value for p in model.metadata_props}
    assert props["quantization"].startswith("int4, blocks of 16, symmetric")
    assert quantized.stat().st_size < plain.stat().st_size / 2  # biases, norms and positions stay fp32
    tokens = out_dir / "x.npy"
    np.save(tokens, np.array([[1, 2, 3]]))
    assert cli("run", quantized, "--input", f"x={tokens}", "-o", out_dir / "y.npz")[0] == 0


@pytest.mark.parametrize(("args", "fragment"), [
    (["--block-size", "32"], "add --quantize int4|int8"),
    (["--quantize-embeddings"], "add --quantize int4|int8"),
    (["--quantize", "int4", "--block-size", "48"], "block size 48 is not supported"),
    (["--quantize", "int4", "--accuracy-level", "5"], "accuracy level 5"),
    (["--quantize", "int3"], "invalid choice: 'int3'"),
    (["--keep-output-fp32"], "add --quantize int4|int8"),
    (["--quantize", "int4", "--keep-output-fp32", "--quantize-embeddings"], "contradict"),
])
def test_bad_quantization_options(cli: Cli, out_dir: Path, args: list[str], fragment: str) -> None:
    assert_user_error(cli("compile", GPT2, *SMALL_GPT2, "-o", out_dir / "m.onnx", *args), fragment,
                      left_empty=out_dir)


def test_int4_quantizes_the_output_projection_unless_kept_fp32(cli: Cli, out_dir: Path) -> None:
    """GPT-2 ties W_u = W_eᵀ: by default the unembedding and the embedding are one quantized table
    (GatherBlockQuantized reads it); --keep-output-fp32 leaves both products of W_e in fp32."""
    default, kept = out_dir / "int4.onnx", out_dir / "kept.onnx"
    code, _, err = cli("compile", GPT2, *WIDER, "-o", default, "--quantize", "int4")
    assert code == 0, err
    code, _, err = cli("compile", GPT2, *WIDER, "-o", kept, "--quantize", "int4", "--keep-output-fp32")
    assert code == 0, err
    assert "output projection fp32" in err
    ops = {p: {n.op_type for n in onnx.load(str(p)).graph.node} for p in (default, kept)}
    assert "GatherBlockQuantized" in ops[default] and "MatMul" not in ops[default]
    assert "GatherBlockQuantized" not in ops[kept] and "MatMul" in ops[kept]
    assert default.stat().st_size < kept.stat().st_size


def test_generate_quantized(cli: Cli) -> None:
    base = ["generate", GPT2, *WIDER, "--prompt-ids", "4 5 6", "--max-new-tokens", "5", "--temperature", "0"]
    runs = {}
    for extra in ([], ["--no-cache"], ["--backend", "numpy"], ["--backend", "tvm"]):
        code, out, err = cli(*base, "--quantize", "int8", *extra)
        assert code == 0, err
        runs[" ".join(extra)] = out
    assert len(set(runs.values())) == 1


def test_compile_int4_for_tvm_writes_packed_weights_and_runs(cli: Cli, out_dir: Path) -> None:
    """`compile --backend tvm --quantize int4`: our kernels in the .so, the int4 weights beside it,
    the outputs those of the same model on onnxruntime at accuracy level 0 (float32, as TVM computes)."""
    pytest.importorskip("tvm.relax", reason="the TVM backend needs apache-tvm: pip install pseudoformer[tvm]")
    from safetensors.numpy import load_file

    quant = ["--quantize", "int4", "--quantize-embeddings", "--accuracy-level", "0"]
    code, _, err = cli("compile", GPT2, *WIDER, "-o", out_dir / "int4.so", "--backend", "tvm", *quant)
    assert code == 0, err
    assert cli("compile", GPT2, *WIDER, "-o", out_dir / "int4.onnx", *quant)[0] == 0
    weights = load_file(str(out_dir / "int4.weights.safetensors"))
    assert any(v.dtype == np.uint8 for v in weights.values())
    assert not any(v.dtype == np.float32 and v.ndim == 2 and min(v.shape) >= 64 for v in weights.values())
    tokens = out_dir / "x.npy"
    np.save(tokens, np.array([[1, 2, 3]]))
    for name in ("int4.so", "int4.onnx"):
        assert cli("run", out_dir / name, "--input", f"x={tokens}", "-o", out_dir / f"{name}.npz")[0] == 0
    tvm_y, ort_y = (np.load(out_dir / f"{n}.npz")["Y"] for n in ("int4.so", "int4.onnx"))
    assert np.abs(tvm_y - ort_y).max() <= 1e-4 * np.abs(ort_y).max()


def test_accuracy_level_4_on_tvm_takes_int8_activations(cli: Cli, out_dir: Path) -> None:
    """`--backend tvm --quantize int4 --accuracy-level 4`: the int8-activation kernels (nbits_int8.py) in
    the .so, their re-laid weights beside it; the outputs near onnxruntime's level 4 (the same rounding of
    the activations) and not level 0's exact ones, which TVM gives without the flag. `generate` takes it too."""
    pytest.importorskip("tvm.relax", reason="the TVM backend needs apache-tvm: pip install pseudoformer[tvm]")
    from safetensors.numpy import load_file

    quant = ["--quantize", "int4", "--quantize-embeddings"]
    outs = {}
    tokens = out_dir / "x.npy"
    np.save(tokens, np.array([[1, 2, 3, 4, 5]]))
    for name, extra in (("int8.so", ["--accuracy-level", "4"]), ("exact.so", []), ("level4.onnx", [])):
        backend = ["--backend", "tvm"] if name.endswith(".so") else []
        code, _, err = cli("compile", GPT2, *WIDER, "-o", out_dir / name, *backend, *quant, *extra)
        assert code == 0, err
        assert cli("run", out_dir / name, "--input", f"x={tokens}", "-o", out_dir / f"{name}.npz")[0] == 0
        outs[name] = np.load(out_dir / f"{name}.npz")["Y"]
    assert any(k.endswith("#rows16") for k in load_file(str(out_dir / "int8.weights.safetensors")))
    assert not any(k.endswith("#rows16") for k in load_file(str(out_dir / "exact.weights.safetensors")))
    scale = np.abs(outs["level4.onnx"]).max()
    assert np.abs(outs["int8.so"] - outs["level4.onnx"]).max() <= 1e-2 * scale
    assert np.abs(outs["int8.so"] - outs["exact.so"]).max() > 1e-6 * scale  # it did round the activations
    base = ["generate", GPT2, *WIDER, "--prompt-ids", "4 5 6", "--max-new-tokens", "4", "--temperature", "0"]
    code, out, err = cli(*base, "--backend", "tvm", *quant, "--accuracy-level", "4")
    assert code == 0, err
    assert len(out.split()) == 4, out


def test_python_api(tmp_path: Path) -> None:
    defines = [d for d in WIDER if d != "-D"][2:]
    compiled = pseudoformer.compile(GPT2, config=WIDER[1], defines=defines, quantize="int8", accuracy_level=0)
    assert compiled.quantize is not None and compiled.quantize.accuracy_level == 0
    levels = {a.i for n in compiled.onnx.graph.node if n.op_type == "MatMulNBits" for a in n.attribute
              if a.name == "accuracy_level"}
    assert levels == {0}
    assert compiled.run(x=np.array([[1, 2]]))["Y"].shape == (1, 2, 11)
    opts = pseudoformer.QuantizeOptions(bits=4, block_size=64, method="rtn")
    assert pseudoformer.compile(GPT2, config=WIDER[1], defines=defines, quantize=opts).quantize == opts
    with pytest.raises(UsageError, match="set these in the QuantizeOptions"):
        pseudoformer.compile(GPT2, config=WIDER[1], defines=defines, quantize=opts, symmetric=True)
    tokens = pseudoformer.generate(GPT2, [1, 2], config=WIDER[1], defines=defines, max_new_tokens=3,
                                   temperature=0, quantize="int4")
    assert len(tokens) == 3
