"""Which onnxruntime execution provider a run asks for, with which options, and where its values live.

    provider   execution provider                      OrtValue device
    "cpu"      CPUExecutionProvider                     "cpu"
    "cuda"     CUDAExecutionProvider, TF32 off          "cuda"

onnxruntime's CUDA provider computes fp32 MatMul and Conv in TF32 by default: GPT-2 small then differs
from torch by 2.4e-3 (3.5e-6 with TF32 off on both sides, seen on an H200, shared/gpu/README.md). A
compiler whose fp32 is checked against references to 1e-5 asks for fp32, so `use_tf32` is 0.

Only the provider asked for is named to onnxruntime: a session then cannot run quietly on the CPU
(onnxruntime 1.31 still lists CPUExecutionProvider after CUDA, as the fallback for the few ops such as
shape arithmetic that the CUDA provider places on the host by design).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pseudoformer.base.errors import BackendError

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
CUDA_OPTIONS = {"use_tf32": "0"}
GPU_EXTRA = "pseudoformer[gpu]"


def check_name(provider: object) -> str:
    """`provider` if it names one we run on, else a BackendError listing them."""
    if provider not in PROVIDERS:
        raise BackendError(f"unknown provider {provider!r}: the valid ones are {', '.join(PROVIDERS)}")
    return str(provider)


def require(ort: Any, provider: str) -> None:
    """Refuse, in one line, a provider this onnxruntime lacks: the CPU package has no CUDA provider, and
    onnxruntime-gpu (pseudoformer[gpu]) has one, listed only where its CUDA libraries load."""
    check_name(provider)
    available = ort.get_available_providers()
    if PROVIDERS[provider] in available:
        return
    if provider == "cuda":
        raise BackendError(
            "CUDA was asked for, but this onnxruntime has no CUDAExecutionProvider "
            f"(installed: {', '.join(available)}); install {GPU_EXTRA} (onnxruntime-gpu) "
            "in an environment without the CPU onnxruntime, or use provider='cpu'"
        )
    raise BackendError(f"this onnxruntime has no {PROVIDERS[provider]} (installed: {', '.join(available)})")


def require_installed(provider: str) -> None:
    """`require` on the installed onnxruntime, before a model is compiled for a provider it lacks; a missing
    onnxruntime is the runner's to report (runner._onnxruntime)."""
    check_name(provider)
    if provider == "cpu":
        return
    try:
        import onnxruntime
    except ImportError:
        raise BackendError(f"running on {provider} needs onnxruntime-gpu: pip install '{GPU_EXTRA}'") from None
    require(onnxruntime, provider)


def session_providers(provider: str, cuda: Mapping[str, str] | None = None) -> list[Any]:
    """InferenceSession's `providers` argument for `provider`: its name alone, with CUDA's options (and `cuda`'s)."""
    name = PROVIDERS[check_name(provider)]
    return [(name, {**CUDA_OPTIONS, **(cuda or {})})] if provider == "cuda" else [name]


def device(provider: str) -> str:
    """The device name OrtValues and IO binding take for `provider`'s memory."""
    return "cuda" if check_name(provider) == "cuda" else "cpu"
