"""Every ```python block of README.md and docs/*.md runs, so the documented API cannot drift from the code.

The blocks of one file run in order in one namespace (a page builds on its earlier blocks), in an
empty directory where `models/` is the repository's. A checkpoint is written `path/to/hf-FAMILY`
(gpt2, bert, bart, llama); the test makes a tiny HF checkpoint of that family, with random weights,
and puts its path in place of the string. Nothing else in a block is changed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CHECKPOINT = re.compile(r"path/to/hf-(\w+)")
# Big enough for the token ids the pages use (GPT-2's and BERT's real ones) and for 32 generated tokens.
N_V, ELL_MAX = 8000, 64


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def _tiny_checkpoint(family: str, directory: Path) -> None:
    import torch
    import transformers

    sizes = {
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=32, n_head=4, n_layer=2, n_positions=ELL_MAX, vocab_size=N_V, bos_token_id=0, eos_token_id=0)),
        "bert": lambda: transformers.BertForMaskedLM(transformers.BertConfig(
            hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=N_V,
            max_position_embeddings=ELL_MAX)),
        "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=N_V, max_position_embeddings=ELL_MAX)),
        "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=N_V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=ELL_MAX, bos_token_id=0, eos_token_id=1)),
    }
    if family not in sizes:
        pytest.fail(f"the docs name a checkpoint path/to/hf-{family}; the test makes only {', '.join(sizes)}")
    torch.manual_seed(0)
    sizes[family]().save_pretrained(directory)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    families = {f for page in DOCS for block in _blocks(page) for f in CHECKPOINT.findall(block)}
    out = {}
    for family in sorted(families):
        out[family] = tmp_path_factory.mktemp(f"hf-{family}")
        _tiny_checkpoint(family, out[family])
    return out


def test_the_pages_have_blocks_to_run() -> None:
    """The pages this test is for do hold blocks, and the README's and api.md's use a checkpoint."""
    assert len(_blocks(ROOT / "docs" / "api.md")) >= 6
    for page in (ROOT / "README.md", ROOT / "docs" / "api.md"):
        assert any(CHECKPOINT.search(b) for b in _blocks(page)), page


@pytest.mark.parametrize("page", [p for p in DOCS if _blocks(p)], ids=lambda p: p.name)
def test_every_python_block_runs(page: Path, checkpoints: dict[str, Path], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").symlink_to(ROOT / "models", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"doc:{page.name}"}
    for number, block in enumerate(_blocks(page), 1):
        code = CHECKPOINT.sub(lambda m: str(checkpoints[m.group(1)]), block)
        try:
            exec(compile(code, f"{page.name} python block {number}", "exec"), namespace)  # noqa: S102
        except Exception as e:
            raise AssertionError(f"{page.relative_to(ROOT)}: python block {number} fails: {e!r}\n{block}") from e
