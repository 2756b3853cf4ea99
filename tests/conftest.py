"""Shared fixtures: the repository's model files and a builder of elaborated graphs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS
