"""`generate --contrib-ops` says once, as `compile` does, how many attention ops stay standard ONNX Attention and
why: BART's decoder attentions are not GroupQueryAttention's, and the note was silent before (issue 28 item 4)."""

from __future__ import annotations

import pytest

from pseudoformer.cli import main


def test_generate_says_once_which_attention_stays_standard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "models/bart.alg", "--encoder-ids", "5 6 7", "--prompt-ids", "2", "--contrib-ops",
                 "--max-new-tokens", "2"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: --contrib-ops")]
    assert len(notes) == 1 and "stay standard ONNX Attention" in notes[0], notes
