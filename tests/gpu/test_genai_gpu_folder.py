"""`compile --genai-folder OUT --dtype float16 --provider cuda` (and int4): a folder onnxruntime-genai-cuda loads.

On the CPU: the config names genai's CUDA provider with the options genai's builder writes (and TF32 off), the
graph's cache and logits are float16 (genai reads the types from the graph), and genai's CPU package
(PSEUDOFORMER_GENAI_PYTHON) runs an fp16 folder built for the CPU, its greedy tokens ours in fp16, int4 too.
On CUDA with genai-cuda (`pytest -m cuda`, PSEUDOFORMER_GENAI_PYTHON naming a Python that has it): the
CUDA folder's greedy tokens equal `generate --provider cuda --dtype float16`'s."""

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
