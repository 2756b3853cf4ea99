"""load_weights: any supported source -> exactly the parameters the compiled model declares."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .errors import Problem, WeightsError, fmt_shape
from .hf_checkpoint import map_hf_checkpoint
from .random_init import random_weights
from .safetensors_io import PICKLE_SUFFIXES, read_safetensors, refuse_pickle

Expected = Mapping[str, tuple[tuple[int, ...], str]]


def fit(
    tensors: Mapping[str, np.ndarray],
    expected: Expected,
    source: str | Path,
    *,
    origin: Mapping[str, str] | None = None,
    problems: list[Problem] | None = None,
) -> dict[str, np.ndarray]:
    """Check ``tensors`` against ``expected`` and return them cast, or raise every problem at once.

    ``origin`` names the file tensor each of ours came from (for HF checkpoints), so a shape
    complaint points at something the user can find in their checkpoint.
    """
    origin = origin or {}
    found = list(problems or [])

    def where(name: str) -> str:
        return f" (from {origin[name]})" if name in origin else ""

    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in expected.items():
        shape = tuple(int(d) for d in shape)
        if name not in tensors:
            found.append(Problem(name, "missing", f"expected shape {fmt_shape(shape)}"))
            continue
        array = tensors[name]
        if tuple(array.shape) != shape:
            found.append(
                Problem(
                    name,
                    "mis-shaped",
                    f"expected {fmt_shape(shape)}, got {fmt_shape(array.shape)}{where(name)}",
                )
            )
        elif not np.issubdtype(array.dtype, np.floating):
            # Casting integers to float would "work" and produce nonsense; this is a wrong tensor.
            found.append(Problem(name, "invalid", f"dtype {array.dtype} is not floating-point{where(name)}"))
        else:
            out[name] = np.ascontiguousarray(array, dtype=np.dtype(dtype))
    for name in tensors.keys() - expected.keys():
        found.append(Problem(name, "unexpected", f"shape {fmt_shape(tensors[name].shape)}{where(name)}"))
    if found:
        raise WeightsError.misfit(source, found)
    # Own every buffer: callers may mutate or keep these after the source file is gone.
    return {name: arr if arr.flags.owndata else arr.copy() for name, arr in out.items()}


def _check_expected(expected: Expected) -> None:
    for name, spec in expected.items():
        try:
            shape, dtype = spec
            ok = all(isinstance(d, int | np.integer) and d >= 0 for d in shape)
            kind = np.dtype(dtype).kind
        except (TypeError, ValueError) as e:
            raise TypeError(f"expected[{name!r}] = {spec!r} is not ((dims...), 'dtype')") from e
        if not ok or kind != "f":
            raise TypeError(f"expected[{name!r}] = {spec!r}: need non-negative int dims and a float dtype")


def load_weights(
    path: str | Path | None, expected: Expected, *, seed: int | None = None
) -> dict[str, np.ndarray]:
    """The model's parameters, by our names, as contiguous arrays of the expected shapes and dtypes.

    ``path`` is one of
      * a ``.safetensors`` file whose tensor names are ours (e.g. written by ``save_weights``);
      * a HuggingFace checkpoint directory (config.json + model.safetensors, or a sharded
        model.safetensors.index.json) of model_type gpt2, bert or bart, mapped to our names;
      * ``None``: seeded random weights (``random_weights(expected, seed or 0)``).
    ``seed`` only means something without a path; giving both is refused rather than ignored.

    Raises WeightsError listing every missing, unexpected or mis-shaped tensor. Pickle formats
    (pytorch_model.bin, .pt, ...) are refused by name and never opened.
    """
    _check_expected(expected)
    if path is None:
        return random_weights(expected, 0 if seed is None else seed)
    if seed is not None:
        raise ValueError(
            f"seed={seed} given together with weights path '{path}'; seed only applies to random weights"
        )
    path = Path(path).expanduser()
    if path.is_dir():
        col = map_hf_checkpoint(path, expected.keys())
        return fit(col.tensors, expected, path, origin=col.origin, problems=col.problems)
    if not path.exists():
        raise WeightsError(f"weights '{path}': no such file or directory")
    if path.suffix in PICKLE_SUFFIXES:
        raise refuse_pickle(path)
    if path.suffix != ".safetensors":
        hint = "; pass the checkpoint directory instead" if path.name == "config.json" else ""
        raise WeightsError(
            f"weights '{path}': expected a .safetensors file or a HuggingFace checkpoint directory{hint}"
        )
    tensors = read_safetensors(path)
    try:
        return fit(tensors, expected, path)
    except WeightsError as e:
        if tensors and tensors.keys().isdisjoint(expected) and (path.parent / "config.json").is_file():
            # Probably a HF model.safetensors given directly: its names are HF's, not ours.
            e.summary += f" (no names in common; to map HF names, pass the directory '{path.parent}')"
            e.args = (e.summary, e.problems)
        raise
