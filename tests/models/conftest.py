"""The checkpoint and model of a family module that names its family in KIND (test_gemma2_vs_hf.py,
test_gemma3_vs_hf.py, test_qwen3_vs_hf.py): HF's model with random weights, its checkpoint, and ours loaded
from it. A module that defines its own `checkpoint` or `model` fixture uses that one."""

from __future__ import annotations

import pytest

from pseudoformer.model import Model
from tests.models import gemma_qwen3_cases as cases


@pytest.fixture(scope="module")
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    kind = request.module.KIND
    return cases.checkpoint(kind, tmp_path_factory.mktemp(kind))


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest, checkpoint: tuple) -> Model:
    return cases.ours(request.module.KIND, checkpoint[1])
