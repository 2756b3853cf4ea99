"""`compile --genai-folder OUT --dtype float16 --provider cuda` (and int4, --contrib-ops, --cuda-graph): a folder
onnxruntime-genai-cuda loads.

On the CPU: the config names genai's CUDA provider with the options genai's builder writes (and TF32 off), the
graph's cache and logits are float16 (genai reads the types from the graph), and genai's CPU package
(PSEUDOFORMER_GENAI_PYTHON) runs an fp16 folder built for the CPU, its greedy tokens ours in fp16, int4 too; with
--contrib-ops at SmolLM2's widths the step is GroupQueryAttention in fp16 over one buffer per layer, and genai gives
`generate --dtype float16 --contrib-ops`'s tokens; --cuda-graph asks genai-cuda to capture it, on a step that reads
only constants on the host at genai's fixed sizes. On CUDA with genai-cuda (`pytest -m cuda`, PSEUDOFORMER_GENAI_PYTHON
naming a Python that has it): each CUDA folder's greedy tokens equal `generate --provider cuda`'s."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from pseudoformer.cli import main
from pseudoformer.generation import Generator, Sampling
from pseudoformer.model import load
from tests.cli.test_cli import assert_user_error
from tests.genai.genai_env import genai_greedy, genai_python
from tests.genai.test_genai_folder import NEW, PROMPT, SHORT, SOURCES, _checkpoint, _eos, _until_eos
from tests.gpu.cuda import cuda

FLOAT16 = onnx.TensorProto.FLOAT16


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _checkpoint("llama", "tiny", tmp_path_factory.mktemp("llama"))


def _folder(weights: Path, out: Path, *flags: str) -> Path:
    assert main(["compile", SOURCES["llama"], "--weights", str(weights), "--genai-folder", str(out), *flags]) == 0
    return out


def _types(folder: Path) -> dict[str, int]:
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return {v.name: v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]}


def test_a_cuda_float16_folder_names_genai_s_cuda_provider(llama: Path, tmp_path: Path) -> None:
    folder = _folder(llama, tmp_path / "cuda", "--dtype", "float16", "--provider", "cuda")
    config = json.loads((folder / "genai_config.json").read_text())
    options = config["model"]["decoder"]["session_options"]["provider_options"]
    assert options == [{"cuda": {"enable_cuda_graph": "0", "use_tf32": "0"}}]
    types = _types(folder)
    cache = [k for k in types if k.startswith(("past_key_values.", "present."))]
    assert cache and all(types[k] == FLOAT16 for k in cache)
    assert types["logits"] == FLOAT16 and types["input_ids"] == onnx.TensorProto.INT64
    cpu = json.loads((_folder(llama, tmp_path / "cpu") / "genai_config.json").read_text())
    assert cpu["model"]["decoder"]["session_options"]["provider_options"] == []
    assert all(t != FLOAT16 for t in _types(tmp_path / "cpu").values())


def test_int4_in_float16_for_cuda(llama: Path, tmp_path: Path) -> None:
    folder = _folder(llama, tmp_path / "int4", "--dtype", "float16", "--provider", "cuda", "--quantize", "int4")
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    assert "MatMulNBits" in {n.op_type for n in model.graph.node}
    assert _types(folder)["logits"] == FLOAT16


@pytest.mark.parametrize(("flags", "message"), [
    (["--genai-folder", "OUT", "--provider", "tpu"], "unknown provider 'tpu'"),
    (["-o", "OUT/m.onnx", "--provider", "cuda"], "--provider cuda is for --genai-folder"),
])
def test_a_provider_a_folder_cannot_name(cli, tmp_path: Path, flags: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    out.mkdir()
    flags = [f.replace("OUT", str(out)) for f in flags]
    assert_user_error(cli("compile", SOURCES["llama"], "-D", "L=1", *flags), message, left_empty=out)


def _ours(weights: Path, prompts: list[list[int]], provider: str = "cpu", quantize: str | None = None) -> list:
    gen = Generator(load(SOURCES["llama"], weights=weights), dtype="float16", provider=provider, quantize=quantize)
    return [gen.generate(p, max_new_tokens=NEW, sampling=Sampling(temperature=0)).tokens[0] for p in prompts]


@pytest.mark.parametrize("quantize", [None, "int4"], ids=["float16", "int4"])
def test_genai_runs_a_float16_folder_with_our_float16_tokens(llama: Path, tmp_path: Path, quantize: str | None) -> None:
    genai_python()
    flags = ["--quantize", quantize] if quantize else []
    folder = _folder(llama, tmp_path / "fp16", "--dtype", "float16", *flags)
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in _ours(llama, [PROMPT, SHORT], quantize=quantize)]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT], NEW)] == want[:1]


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's widths (heads of 64: the rotation inside GroupQueryAttention), 4 layers."""
    return _checkpoint("llama", "smol", tmp_path_factory.mktemp("smol"))


def _ours_in_place(weights: Path, prompts: list[list[int]], provider: str = "cpu", quantize: str | None = None) -> list:
    """generate --dtype float16 --contrib-ops: GroupQueryAttention in fp16 over a cache in buffers, as the folder's."""
    gen = Generator(load(SOURCES["llama"], weights=weights), dtype="float16", contrib_ops=True, provider=provider,
                    quantize=quantize)
    return [gen.generate(p, max_new_tokens=NEW, sampling=Sampling(temperature=0)).tokens[0] for p in prompts]


@pytest.mark.parametrize("quantize", [None, "int4"], ids=["float16", "int4"])
def test_a_float16_contrib_folder_appends_in_place_with_our_tokens(smol: Path, tmp_path: Path,
                                                                   quantize: str | None) -> None:
    """--dtype float16 --contrib-ops: GroupQueryAttention in fp16 reading its lengths from the mask, past and present
    one buffer (past_present_share_buffer), as genai's builder writes `-p fp16 -e cuda`; genai's CPU package runs it
    with our fp16 tokens."""
    flags = ["--quantize", quantize] if quantize else []
    folder = _folder(smol, tmp_path / "gqa", "--dtype", "float16", "--contrib-ops", *flags)
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is True
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    kernels = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(kernels) == config["model"]["decoder"]["num_hidden_layers"]
    assert not [n for n in model.graph.node if n.op_type == "Attention"]
    assert _types(folder)["past_key_values.0.key"] == FLOAT16
    genai_python()
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in _ours_in_place(smol, [PROMPT, SHORT], quantize=quantize)]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT], NEW)] == want[:1]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT, SHORT], NEW)] == want


def test_a_cuda_graph_folder_asks_genai_to_capture_its_step(smol: Path, llama: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """--cuda-graph: genai's CUDA provider captures the step (enable_cuda_graph 1), which genai does only where past
    and present are one buffer; the step at genai's fixed sizes (one token, the mask and the cache max_length wide)
    reads only constants on the host (tests/gpu/test_decode_graph.py's check). Refused where the cache would grow."""
    from tests.gpu.test_decode_graph import _host_reads

    flags = ["--dtype", "float16", "--provider", "cuda", "--contrib-ops", "--cuda-graph"]
    folder = _folder(smol, tmp_path / "graph", *flags)
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["model"]["decoder"]["session_options"]["provider_options"] == [
        {"cuda": {"enable_cuda_graph": "1", "use_tf32": "0"}}]
    assert config["search"]["past_present_share_buffer"] is True
    sizes = {"batch": 2, "seq": 1, "past": 64, "past+seq": 64}
    assert _host_reads(folder / "model.onnx", sizes, tmp_path) == []
    out = tmp_path / "refused"
    out.mkdir()
    base = ["compile", SOURCES["llama"], "--genai-folder", str(out)]
    assert_user_error(cli(*base, "--weights", str(llama), *flags), "--cuda-graph needs the folder's cache in one "
                      "buffer", left_empty=out)  # heads of 8: the rotation stays outside the kernel
    assert_user_error(cli(*base, "--weights", str(smol), "--cuda-graph"), "it needs --provider cuda --dtype float16 "
                      "--contrib-ops", left_empty=out)
    assert_user_error(cli("compile", SOURCES["llama"], "-o", str(out / "m.onnx"), "--cuda-graph"),
                      "--cuda-graph is generate's and --genai-folder's", left_empty=out)


@cuda
@pytest.mark.parametrize("graph", [[], ["--cuda-graph"]], ids=["contrib", "cuda-graph"])
@pytest.mark.parametrize("quantize", [None, "int4"], ids=["float16", "int4"])
def test_genai_cuda_runs_the_contrib_folder_with_generate_s_tokens(smol: Path, tmp_path: Path, quantize: str | None,
                                                                   graph: list[str]) -> None:
    """The fp16 GroupQueryAttention folder on genai-cuda, and with --cuda-graph the step genai captures."""
    genai_python()
    flags = ["--quantize", quantize] if quantize else []
    folder = _folder(smol, tmp_path / "cuda", "--dtype", "float16", "--provider", "cuda", "--contrib-ops", *graph,
                     *flags)
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in _ours_in_place(smol, [PROMPT, SHORT], provider="cuda", quantize=quantize)]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT, SHORT], NEW)] == want


@cuda
@pytest.mark.parametrize("quantize", [None, "int4"], ids=["float16", "int4"])
def test_genai_cuda_runs_the_cuda_folder_with_generate_s_tokens(llama: Path, tmp_path: Path,
                                                                quantize: str | None) -> None:
    genai_python()
    flags = ["--quantize", quantize] if quantize else []
    folder = _folder(llama, tmp_path / "cuda", "--dtype", "float16", "--provider", "cuda", *flags)
    eos = _eos(folder)
    want = [_until_eos(t, eos) for t in _ours(llama, [PROMPT, SHORT], provider="cuda", quantize=quantize)]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT], NEW)] == want[:1]
    assert [_until_eos(t, eos) for t in genai_greedy(folder, [PROMPT, SHORT], NEW)] == want
