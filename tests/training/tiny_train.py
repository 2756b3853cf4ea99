"""The smallest `train` run the CLI tests share: a loss over a one-layer GPT-2 (gpt2_loss.alg), its sizes as -D
flags, and a token stream to train on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

LOSS = str(Path(__file__).resolve().with_name("gpt2_loss.alg"))
TINY = ["-D", "L=1", "-D", "H=2", "-D", "d_e=16", "-D", "d_mlp=32", "-D", "d_attn=8", "-D", "d_mid=8",
        "-D", "N_V=50", "-D", "ell_max=32", "-D", "eps=1e-5"]


def token_stream(directory: Path) -> Path:
    """0 … 19 twenty times, as directory/ids.npy."""
    path = directory / "ids.npy"
    np.save(path, np.tile(np.arange(20, dtype=np.int64), 20))
    return path
