"""onnxruntime-genai's own interpreter, for the tests that run genai on our folders.

genai brings its own onnxruntime, so it lives in an environment of its own (`.ci/run` makes one:
`pip install onnxruntime-genai`) and runs as a subprocess of that environment's Python, named by
PSEUDOFORMER_GENAI_PYTHON. Without it, the tests that need genai skip and say why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ENV = "PSEUDOFORMER_GENAI_PYTHON"
RUNNER = Path(__file__).with_name("genai_greedy.py")


def genai_python() -> str:
    python = os.environ.get(ENV)
    if not python:
        pytest.skip(f"{ENV} is not set: it names the Python of an environment with onnxruntime-genai "
                    "(.ci/run makes one), which these tests run genai in")
    if not Path(python).is_file():
        pytest.fail(f"{ENV}={python} is not a file")
    return python


def ask_genai(request: dict) -> dict:
    """One request to genai_greedy.py, in genai's environment."""
    done = subprocess.run([genai_python(), str(RUNNER)], input=json.dumps(request), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def genai_greedy(folder: Path, prompts: list[list[int]], new: int) -> list[list[int]]:
    """genai's greedy tokens after each prompt (a batch, padded on the right), from the folder."""
    return ask_genai({"folder": str(folder), "prompts": prompts, "new": new})["tokens"]
