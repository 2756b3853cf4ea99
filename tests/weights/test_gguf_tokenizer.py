"""A GGUF file's own vocabulary as the tokenizer: built with `tokenizers` from tokenizer.ggml.*, its ids equal
transformers' AutoTokenizer.from_pretrained(dir, gguf_file=…) on text with spaces, digits, accents, a control
token and a character only byte fallback spells; and `generate --weights FILE.gguf --prompt TEXT` prints the
greedy text HF generates from the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from pseudoformer.base.terminal import escape
from pseudoformer.cli import main
from pseudoformer.weights.gguf_tokenizer import gguf_tokenizer, write_gguf_tokenizer
from tests.models.llama_cases import MODELS, hf_model
from tests.weights import test_gguf_families as families
from tests.weights.gguf_testlib import trained_vocab, write_gguf

TEXTS = ["The lazy fox's box: 12345 quartz jugs!  Héllo\nwörld <s> end ☃",
         "  leading spaces, <|endoftext|> and trailing ", "it's 2024; we'll see"]
# (family, tokenizer model, tokenizer.ggml.pre)
CASES = [("llama", "llama", None), ("qwen2", "gpt2", "qwen2"), ("llama", "gpt2", "llama-bpe")]


def _file(tmp: Path, kind: str, tokenizer_model: str, pre: str | None) -> Path:
    vocab, merges = trained_vocab(tokenizer_model)
    bos, eos = (1, 2) if tokenizer_model == "llama" else (0, 0)
    model = hf_model(kind, hidden_size=64, intermediate_size=96, head_dim=16, vocab_size=len(vocab[0]),
                     bos_token_id=bos, eos_token_id=eos)
    path = tmp / f"{kind}-{tokenizer_model}.gguf"
    write_gguf(path, model, kind, lambda name, shape: Q.Q8_0, vocab=vocab, merges=merges,
               tokenizer_model=tokenizer_model, pre=pre)
    return path


@pytest.mark.parametrize(("kind", "tokenizer_model", "pre"), CASES)
def test_ids_equal_transformers(tmp_path: Path, kind: str, tokenizer_model: str, pre: str | None) -> None:
    path = _file(tmp_path, kind, tokenizer_model, pre)
    ref = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    ours = gguf_tokenizer(path)
    from tokenizers import Tokenizer

    written = Tokenizer.from_file(str(write_gguf_tokenizer(path, tmp_path / "tokenizer.json")))
    for text in TEXTS:
        want = ref(text)["input_ids"]
        assert ours.encode(text).ids == want
        assert written.encode(text).ids == want
        assert ours.decode(want) == ref.decode(want, skip_special_tokens=True)


@pytest.mark.parametrize(("kind", "tokenizer_model", "pre"), [
    ("qwen3", "gpt2", "qwen2"), ("phi3", "llama", None), ("gemma2", "llama", None), ("mixtral", "llama", None)])
def test_ids_equal_transformers_for_issue_28s_families(tmp_path: Path, kind: str, tokenizer_model: str,
                                                       pre: str | None) -> None:
    """The same vocabularies in files of the families llama.cpp writes with them (Gemma's: its own rules)."""
    vocab, merges = trained_vocab(tokenizer_model)
    bos, eos = (1, 2) if tokenizer_model == "llama" else (0, 0)
    path = tmp_path / f"{kind}.gguf"
    model = families.hf_model(kind, vocab_size=len(vocab[0]), bos_token_id=bos, eos_token_id=eos, pad_token_id=0)
    write_gguf(path, model, kind, lambda name, shape: Q.F16, vocab=vocab, merges=merges,
               tokenizer_model=tokenizer_model, pre=pre)
    ref = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    ours = gguf_tokenizer(path)
    for text in TEXTS:
        want = ref(text)["input_ids"]
        assert ours.encode(text).ids == want, text
        assert ours.decode(want) == ref.decode(want, skip_special_tokens=True)


@pytest.mark.parametrize(("kind", "tokenizer_model", "pre"), CASES[:2])
def test_generate_prints_the_greedy_text_of_transformers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         kind: str, tokenizer_model: str, pre: str | None) -> None:
    path = _file(tmp_path, kind, tokenizer_model, pre)
    tok = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    ref = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)).eval()
    ref.load_state_dict(load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=ref)["tensors"],
                        strict=False)
    prompt = "The quick brown fox"
    x = torch.tensor([tok(prompt)["input_ids"]])
    with torch.no_grad():
        new = ref.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=12,
                           min_new_tokens=12, eos_token_id=None, pad_token_id=0)[0, x.shape[1]:].tolist()
    capsys.readouterr()
    # numpy: the interpreter computes with the dequantized Q8_0 blocks, as transformers does
    assert main(["generate", str(MODELS / f"{kind}.alg"), "--weights", str(path), "--prompt", prompt,
                 "--max-new-tokens", "12", "--temperature", "0", "--backend", "numpy"]) == 0
    ids, text = capsys.readouterr().out.split("\n", 1)
    assert [int(t) for t in ids.split()] == new
    # the text as printed: control characters a random model's byte tokens spell are escaped
    assert text == escape(tok.decode(new, skip_special_tokens=True), keep="\n\t") + "\n"
