"""Small GPT-2 and BART models for the viewer's tests: real structure, tiny sizes."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from pseudoformer.model import Model, load

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2 = dict(L=2, H=2, d_e=16, d_mlp=32, d_attn=8, d_mid=8, ell_max=16, N_V=11, eps=1e-5)
BART = dict(L_enc=2, L_dec=2, H=2, d_e=16, d_mlp=32, d_attn=8, d_mid=8, ell_max=24, N_V=29, eps=1e-5)


def defines(sizes: dict[str, object]) -> list[str]:
    return [f"{k}={v}" for k, v in sizes.items()]


def cli_args(name: str) -> list[str]:
    sizes = GPT2 if name == "gpt2" else BART
    # --config /dev/null: the packaged .toml files are the full-size models.
    return [str(MODELS / f"{name}.alg"), "--config", os.devnull, *(a for d in defines(sizes) for a in ("-D", d))]


@cache
def small(name: str) -> Model:
    sizes = GPT2 if name == "gpt2" else BART
    return load(MODELS / f"{name}.alg", config=os.devnull, defines=defines(sizes))
