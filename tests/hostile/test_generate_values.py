"""Kind: `generate`'s values are checked where they enter, never run on silently.

An end token no token has (−1, 10³⁰, past the vocabulary) never ended a row; "1,000" was read as the ids 1 and
0; a prompt past the context a RoPE checkpoint was trained for (config.json's max_position_embeddings) ran.
Each is one message now."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.errors import UsageError
from pseudoformer.generation.api import generate
from tests.hostile.conftest import GPT2, LLAMA, SMALL_GPT2, judge, run_cli
from tests.models.llama_cases import hf_model


@pytest.mark.parametrize("eos", ["-1", "11", "1000000000000"])
def test_an_end_token_that_is_no_token_is_refused(eos: str, capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli(["generate", GPT2, *SMALL_GPT2, "--prompt-ids", "1 2", "--eos-token-id", eos,
                 "--max-new-tokens", "2"], capfd)
    judge(r, "is no token id of this model: its ids are 0 to 10")


@pytest.mark.parametrize("eos", [10**30, -1, 1e30])
def test_the_api_refuses_such_an_end_token_too(eos: object) -> None:
    defines = SMALL_GPT2[3::2]  # SMALL_GPT2 is --config /dev/null, then -D NAME=VALUE pairs
    with pytest.raises(UsageError, match="is no token id"):
        generate(GPT2, [1, 2], config="/dev/null", defines=defines, max_new_tokens=2, eos_token=eos)


@pytest.mark.parametrize("ids", ["1,000", "1, 2", "[1, -2]", "1 2e3", "[]"])
def test_prompt_ids_are_read_one_way_only(ids: str, capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli(["generate", GPT2, *SMALL_GPT2, "--prompt-ids", ids, "--max-new-tokens", "1"], capfd)
    judge(r, "--prompt-ids takes token ids")


def test_a_prompt_past_the_checkpoints_context_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    hf_model("llama", hidden_size=32, intermediate_size=64, head_dim=8, num_hidden_layers=1,
             max_position_embeddings=16).save_pretrained(tmp_path / "hf")
    prompt = " ".join(str(i % 50 + 3) for i in range(14))
    ok = run_cli(["generate", LLAMA, "--weights", tmp_path / "hf", "--prompt-ids", prompt, "--max-new-tokens", "3"],
                 capfd)
    assert ok.code == 0, ok.err  # 14 + 3 − 1 = 16 positions: the whole context
    r = run_cli(["generate", LLAMA, "--weights", tmp_path / "hf", "--prompt-ids", prompt, "--max-new-tokens", "4"],
                capfd)
    judge(r, "the model takes at most 16 (the context of its checkpoint")
