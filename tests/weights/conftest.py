"""Fixtures for the weights tests; the helpers themselves live in weights_testlib."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from weights_testlib import save_hf_model


@pytest.fixture
def save_hf(tmp_path: Path) -> Callable[..., tuple[Path, object]]:
    """save_hf(ModelClass, config, name="ckpt", seed=0, **save_kw) -> (directory, scrambled model)."""

    def make(cls, config, name: str = "ckpt", seed: int = 0, **save_kw):
        directory = tmp_path / name
        return directory, save_hf_model(directory, cls, config, seed, **save_kw)

    return make
