"""`pseudoformer generate`: ids on one line of stdout, progress on stderr, user mistakes exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import pseudoformer
from pseudoformer.cli import main

TINY = ["-D", "L=2", "-D", "H=2", "-D", "d_e=16", "-D", "d_mlp=32", "-D", "d_attn=8", "-D", "d_mid=8",
        "-D", "ell_max=64", "-D", "N_V=50", "-D", "eps=1e-5"]
ED = ["-D", "L_enc=1", "-D", "L_dec=1", "-D", "H=2", "-D", "d_e=8", "-D", "d_mlp=16", "-D", "d_attn=4",
      "-D", "d_mid=4", "-D", "ell_max=32", "-D", "N_V=11", "-D", "tau=1", "-D", "ell_gen=6", "-D", "bos_token=0",
      "-D", "eos_token=10"]


def _ids(capsys: pytest.CaptureFixture, argv: list[str]) -> list[int]:
    assert main(argv) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 1, out.out
    assert "tokens" in out.err  # the progress bar
    return [int(t) for t in lines[0].split()]


def test_gpt2_with_config_defaults_and_seed(capsys: pytest.CaptureFixture) -> None:
    argv = ["generate", "models/gpt2.alg", *TINY, "--prompt-ids", "1 2 3", "--seed", "5"]
    a = _ids(capsys, argv)
    assert len(a) == 32  # ℓ_gen in gpt2.toml
    assert all(0 <= t < 50 for t in a)
    assert _ids(capsys, argv) == a
    assert _ids(capsys, [*argv[:-1], "6"]) != a


def test_greedy_is_the_same_on_every_backend_and_without_the_cache(capsys: pytest.CaptureFixture) -> None:
    base = ["generate", "models/gpt2.alg", *TINY, "--prompt-ids", "[4, 5, 6]", "--max-new-tokens", "6",
            "--temperature", "0"]
    want = _ids(capsys, base)
    assert len(want) == 6
    assert _ids(capsys, [*base, "--backend", "numpy"]) == want
    assert _ids(capsys, [*base, "--no-cache"]) == want
    api = pseudoformer.generate("models/gpt2.alg", [4, 5, 6], max_new_tokens=6, temperature=0, defines=TINY[1::2])
    assert api == want


def test_hf_checkpoint_greedy_matches_hf(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101,
                                    bos_token_id=0, eos_token_id=0)).eval()
    hf.save_pretrained(tmp_path)
    got = _ids(capsys, ["generate", "models/gpt2.alg", "--weights", str(tmp_path), "--prompt-ids", "7 8 9",
                        "--max-new-tokens", "8", "--temperature", "0"])
    with torch.no_grad():
        out = hf.generate(torch.tensor([[7, 8, 9]]), do_sample=False, max_new_tokens=8, min_new_tokens=8,
                          eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(1, 3, dtype=torch.long))
    assert got == out[0, 3:].tolist()


def test_encoder_decoder_takes_encoder_ids(capsys: pytest.CaptureFixture) -> None:
    ids = _ids(capsys, ["generate", "models/paper/edinference.alg", *ED, "--encoder-ids", "1 2 3", "--seed", "3"])
    assert 1 <= len(ids) <= 6
    assert 10 not in ids[:-1]  # sampling stops at the end token


def test_end_token_flag_stops_early(capsys: pytest.CaptureFixture) -> None:
    base = ["generate", "models/gpt2.alg", *TINY, "--prompt-ids", "1 2", "--max-new-tokens", "10", "--temperature", "0"]
    free = _ids(capsys, base)
    stopped = _ids(capsys, [*base, "--eos-token-id", str(free[2])])
    assert stopped == free[:free.index(free[2]) + 1]


def test_tokenizer_prints_the_text(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="--tokenizer uses the tokenizers package")
    vocab = {f"w{i}": i for i in range(50)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    assert main(["generate", "models/gpt2.alg", *TINY, "--prompt-ids", "1 2", "--max-new-tokens", "3",
                 "--temperature", "0", "--tokenizer", str(path)]) == 0
    ids_line, text = capsys.readouterr().out.splitlines()
    assert text.split() == [f"w{i}" for i in ids_line.split()]


def test_prompt_text_is_encoded_with_the_checkpoints_tokenizer(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="--prompt uses the tokenizers package")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=50,
                               bos_token_id=0, eos_token_id=0)).eval().save_pretrained(tmp_path)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(50)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    base = ["generate", "models/gpt2.alg", "--weights", str(tmp_path), "--max-new-tokens", "4", "--temperature", "0"]
    assert main([*base, "--prompt", "w7 w8 w9"]) == 0
    ids_line, text = capsys.readouterr().out.splitlines()
    assert ids_line.split() == [str(i) for i in _ids(capsys, [*base, "--prompt-ids", "7 8 9"])]
    assert text.split() == [f"w{i}" for i in ids_line.split()]


@pytest.mark.parametrize("argv,message", [
    (["--prompt", "hello"], "--prompt needs a tokenizer"),
    (["--prompt", "hello", "--prompt-ids", "1"], "give the prompt once"),
    (["--prompt-ids", "1 two 3"], "--prompt-ids takes token ids"),
    (["--prompt-ids", "1 2", "--temperature", "-1"], "temperature must be ≥ 0"),
    (["--prompt-ids", "1 2", "--max-new-tokens", "0"], "at least 1"),
    (["--prompt-ids", "1 2", "--max-new-tokens", "80"], "positions"),
    (["--prompt-ids", "1 2", "--top-p", "1.5"], "top_p"),
    (["--prompt-ids", "1 2", "--encoder-ids", "3"], "decoder only"),
    (["--prompt-ids", "1 2", "--tokenizer", "/nonexistent/tokenizer.json"], "no such tokenizer file"),
])
def test_user_mistakes_exit_1_with_one_message(capsys: pytest.CaptureFixture, argv: list[str], message: str) -> None:
    assert main(["generate", "models/gpt2.alg", *TINY, *argv]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_encoder_decoder_without_encoder_ids_is_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["generate", "models/paper/edinference.alg", *ED]) == 1
    assert "--encoder-ids" in capsys.readouterr().err


def test_file_without_inference_algorithm_is_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["generate", "models/bert.alg", "--prompt-ids", "1 2"]) == 1
    err = capsys.readouterr().err
    assert "inference" in err and "Traceback" not in err


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_token_ids_past_the_vocabulary_are_a_user_error(capsys: pytest.CaptureFixture, backend: str) -> None:
    assert main(["generate", "models/gpt2.alg", *TINY, "--prompt-ids", "1 2 60", "--backend", backend]) == 1
    err = capsys.readouterr().err
    assert "token id 60 in x is out of range" in err and "vocabulary has 50 tokens" in err
    assert main(["generate", "models/paper/edinference.alg", *ED, "--encoder-ids", "1 11"]) == 1
    assert "token id 11 in z is out of range" in capsys.readouterr().err
