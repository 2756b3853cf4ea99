"""load_weights: any supported source -> exactly the parameters the compiled model declares."""

from __future__ import annotations

import dataclasses
import math
import mmap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.ir.block_coded import BlockCoded, Codes, LazyBlockCoded
from pseudoformer.ir.lazy_tensor import LazyTensor

from .checkpoint import Checkpoint, Tensor, open_checkpoint
from .errors import Problem, WeightsError, fmt_shape
from .random_init import random_weights

Expected = Mapping[str, tuple[tuple[int, ...], str]]


class _Tensor(Protocol):
    """What fit needs to judge a tensor before reading it: an array, or a checkpoint's unread tensor."""

    shape: tuple[int, ...]
    dtype: np.dtype


def _read(tensor: np.ndarray | Tensor) -> np.ndarray:
    return tensor if isinstance(tensor, np.ndarray) else tensor.load()


def fit(
    tensors: Mapping[str, np.ndarray | Tensor],
    expected: Expected,
    source: str | Path,
    *,
    origin: Mapping[str, str] | None = None,
    problems: list[Problem] | None = None,
    private: bool = False,
    hint: str = "",
) -> dict[str, np.ndarray]:
    """Check ``tensors`` against ``expected`` and return them cast, or raise every problem at once.

    ``tensors`` are arrays, or a checkpoint's unread tensors (checkpoint.Tensor) that are judged by their
    shapes and dtypes and read only once every one of them fits, one after another in the plan's
    order. ``origin`` names the file tensor each of ours came from (for HF checkpoints), so a shape
    complaint points at something the user can find in their checkpoint. ``private``: the tensors
    are views of buffers that nothing else holds (what safetensors read into memory for a HF
    mapping), so one that is already contiguous is returned as it is instead of copied. ``hint`` is
    added to a misfit's summary: what the user probably meant.
    """
    _misfits(tensors, expected, source, origin or {}, problems or [], hint)
    # In the order of `tensors`: a plan lists the pieces of one HF tensor together, so each is read once.
    cast = {name: contiguous(_read(t), np.dtype(expected[name][1])) for name, t in tensors.items()}
    out = {name: cast[name] for name in expected}
    if private:
        return out
    # Own every buffer: callers may mutate or keep these after the source file is gone.
    return {name: arr if arr.flags.owndata else arr.copy() for name, arr in out.items()}


def _misfits(tensors: Mapping[str, _Tensor], expected: Expected, source: str | Path, origin: Mapping[str, str],
             problems: list[Problem], hint: str = "") -> None:
    """Raise every missing, unexpected, mis-shaped or non-float tensor at once, judged by shapes and dtypes."""
    found = list(problems)

    def where(name: str) -> str:
        return f" (from {origin[name]})" if name in origin else ""

    for name, (shape, _) in expected.items():
        shape = tuple(int(d) for d in shape)
        if name not in tensors:
            found.append(Problem(name, "missing", f"expected shape {fmt_shape(shape)}"))
            continue
        tensor: _Tensor = tensors[name]
        if tuple(tensor.shape) != shape:
            found.append(
                Problem(
                    name,
                    "mis-shaped",
                    f"expected {fmt_shape(shape)}, got {fmt_shape(tensor.shape)}{where(name)}",
                )
            )
        elif not np.issubdtype(tensor.dtype, np.floating):
            # Casting integers to float would "work" and produce nonsense; this is a wrong tensor.
            found.append(Problem(name, "invalid", f"dtype {tensor.dtype} is not floating-point{where(name)}"))
    for name in tensors.keys() - expected.keys():
        found.append(Problem(name, "unexpected", f"shape {fmt_shape(tensors[name].shape)}{where(name)}"))
    if found:
        error = WeightsError.misfit(source, found)
        error.summary += hint
        error.args = (error.summary, error.problems)
        raise error


# Columns of a transposed matrix copied at a time (see contiguous): 64 float32 are 4 cache lines.
_BLOCK = 64
# From this size on numpy asks the kernel for huge pages (madvise), and so does not _empty.
_HUGE = 4 << 20


def contiguous(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as a C-contiguous array of ``dtype``: itself when it is one, else a copy.

    A transposed view (HF stores GPT-2's matrices [in, out], ours are [out, in]) is copied a
    block of columns at a time: numpy's own copy reads the source down its columns, a cache line
    per element, and is about 1.7× slower on GPT-2's matrices than this.
    """
    if array.flags.c_contiguous and array.dtype == dtype:
        return array
    out = _empty(array.shape, dtype)
    if array.ndim == 2 and array.strides[0] < array.strides[1]:
        for j in range(0, array.shape[1], _BLOCK):
            out[:, j:j + _BLOCK] = array[:, j:j + _BLOCK]
    else:
        out[...] = array
    return out


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """np.empty, but a large array is an anonymous mapping of its own, without numpy's huge-page hint.

    The hint makes the kernel assemble 2 MiB pages when the array is first written, compacting
    memory if it must (THP defrag "madvise", the default); on a busy machine that cost 1–2 s for
    GPT-2's 500 MB of weights, and left the page cache short of the large folios that writing
    the .onnx file then needed (benchmarks/README.md, "Compile time (fast path)"). The weights are
    written once and read once, where huge pages gain nothing.
    """
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _HUGE:
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dtype).reshape(shape)


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
    path: str | Path | Checkpoint | None, expected: Expected, *, seed: int | None = None, group: str | None = None
) -> dict[str, np.ndarray]:
    """The model's parameters, by our names, as contiguous arrays of the expected shapes and dtypes.

    ``path`` is a checkpoint (open_checkpoint, checkpoint.py), or the path of one:
      * a ``.safetensors`` file whose tensor names are ours (e.g. written by ``save_weights``);
      * a HuggingFace checkpoint directory (config.json + model.safetensors, or a sharded
        model.safetensors.index.json) of a supported model_type, mapped to our names;
      * a ``.gguf`` file (llama.cpp) of a supported architecture, read as that HF checkpoint
        (gguf_checkpoint.py); weights from Q4_0 and Q8_0 matrices carry their blocks (ir/block_coded.py);
      * ``None``: seeded random weights (``random_weights(expected, seed or 0)``).
    ``seed`` only means something without a path; giving both is refused rather than ignored.
    ``group``: the checkpoint fills the parameter group of that name (``theta`` for ``θ : GPT2``, whose
    parameters are ``theta.W_e``, ...): its names, HF's mapped or ours, are read under it.

    Raises WeightsError listing every missing, unexpected or mis-shaped tensor. Pickle formats
    (pytorch_model.bin, .pt, ...) are refused by name and never opened.
    """
    _check_expected(expected)
    if path is None:
        return random_weights(expected, 0 if seed is None else seed)
    if seed is not None:
        raise ValueError(
            f"seed={seed} given together with weights path '{_path_of(path)}'; seed only applies to random weights"
        )
    checkpoint = _checkpoint(path)
    plan = checkpoint.plan(expected, group=group)
    try:
        params = fit(plan.tensors, expected, checkpoint.path, origin=plan.origin, problems=plan.checks(),
                     private=plan.private, hint=plan.hint)
    finally:
        plan.release()
    return {name: BlockCoded(value, plan.codes[name]) if name in plan.codes else value
            for name, value in params.items()}


def _checkpoint(path: str | Path | Checkpoint) -> Checkpoint:
    return path if isinstance(path, Checkpoint) else open_checkpoint(path)


def _path_of(path: str | Path | Checkpoint) -> Path:
    return path.path if isinstance(path, Checkpoint) else Path(path)


def _lazy(read: Tensor, dtype: np.dtype, codes: Codes | None) -> LazyTensor:
    shape = tuple(int(d) for d in read.shape)
    compute = _as_usage_error(lambda: contiguous(_read(read), dtype))
    if codes is not None:  # the quantize pass keeps the file's blocks, as for a loaded BlockCoded weight
        return LazyBlockCoded(shape, dtype, compute, dataclasses.replace(codes, read=_as_usage_error(codes.read)))
    return LazyTensor(shape, dtype, compute)


def _as_usage_error(call: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
    """``call``, a file's complaint about a tensor (a damaged block) raised as the user's error it is: a streamed
    tensor is read as the model is written, long after model.load turned the checkpoint's errors into those."""
    def read() -> np.ndarray:
        try:
            return call()
        except WeightsError as e:
            raise UsageError(str(e)) from None

    return read


def open_weights(path: str | Path | Checkpoint, expected: Expected, *, group: str | None = None,
                 ) -> tuple[dict[str, LazyTensor], dict[str, str]]:
    """``load_weights`` without reading: each parameter a LazyTensor that reads (and casts) its tensor
    from the checkpoint when a writer loads it, and {name: the name it is the transpose of} for the
    parameters the mapping itself ties (a HF embedding read again as the unembedding).

    Every check that needs no data (missing, unexpected, mis-shaped tensors) is made now; the checks
    that do (a tied copy equal to its source) read those tensors now, one pair at a time. A compile
    then holds one checkpoint tensor at a time instead of the whole model (issue 25), whatever the
    checkpoint's kind: a GGUF file's tensors too are read (and dequantized) one at a time.
    """
    _check_expected(expected)
    checkpoint = _checkpoint(path)
    plan = checkpoint.plan(expected, group=group)
    problems = plan.checks()
    plan.release()
    _misfits(plan.tensors, expected, checkpoint.path, plan.origin, problems, plan.hint)
    # Kept is the one `expected` lists first, as tied_weights.transposed_twins keeps it from values.
    order = {name: i for i, name in enumerate(expected)}
    twins = dict(sorted(((a, b) if order[a] > order[b] else (b, a)) for a, b in plan.twins.items()
                        if a in order and b in order))
    return {name: _lazy(plan.tensors[name], np.dtype(expected[name][1]), plan.codes.get(name))
            for name in expected}, twins
