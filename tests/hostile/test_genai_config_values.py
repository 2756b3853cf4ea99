"""Kind: generation_config.json's fields, copied into a genai folder's genai_config.json, are typed and bounded.

genai indexes its logits by the token ids and reads the search fields as numbers and flags: a bos_token_id of 10¹²,
an empty or string eos_token_id, do_sample "true" (a string, true to bool()) and a string top_k (an internal error)
were written or crashed. Each is now refused by file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.hostile.conftest import MODELS, judge, run_cli
from tests.training import torch_cases


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("hf") / "hf"
    torch_cases.gpt2(directory)
    return directory


@pytest.mark.parametrize("field, value, said", [
    ("bos_token_id", 10**12, "is not a token id of this model"),
    ("eos_token_id", [], "is not a token id of this model"),
    ("eos_token_id", "2", "is not a token id of this model"),
    ("pad_token_id", -1, "is not a token id of this model"),
    ("do_sample", "true", "is not true or false"),
    ("top_k", "50", "is not a whole number ≥ 0"),
    ("top_p", 1.5, "is not a number in (0, 1]"),
    ("temperature", 0, "is not a finite number > 0"),
])
def test_a_generation_config_field_out_of_type_or_range_is_refused(
        field: str, value: object, said: str, checkpoint: Path, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    for f in checkpoint.iterdir():
        shutil.copyfile(f, ckpt / f.name)
    (ckpt / "generation_config.json").write_text(json.dumps({field: value}))
    r = run_cli(["compile", MODELS / "gpt2.alg", "--weights", ckpt, "--genai-folder", tmp_path / "g"], capfd)
    judge(r, f"generation_config.json: {field} = {value!r} {said}")
