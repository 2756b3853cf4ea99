"""load_weights: any supported source -> exactly the parameters the compiled model declares."""

from __future__ import annotations

import math
import mmap
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from pseudoformer.ir.lazy_tensor import LazyTensor

from .errors import Problem, WeightsError, fmt_shape
from .gguf_checkpoint import map_gguf, with_codes
from .hf_checkpoint import map_hf_checkpoint
from .hf_engine import Planned
from .random_init import random_weights
from .safetensors_io import PICKLE_SUFFIXES, open_safetensors, read_safetensors, refuse_pickle
from .tensor_ref import TensorRef

Expected = Mapping[str, tuple[tuple[int, ...], str]]


class _Tensor(Protocol):
    """What fit needs to judge a tensor before reading it: an array, or a planned HF tensor."""

    shape: tuple[int, ...]
    dtype: np.dtype


def _read(tensor: np.ndarray | Planned) -> np.ndarray:
    return tensor if isinstance(tensor, np.ndarray) else tensor.load()


def fit(
    tensors: Mapping[str, np.ndarray | Planned],
    expected: Expected,
    source: str | Path,
    *,
    origin: Mapping[str, str] | None = None,
    problems: list[Problem] | None = None,
    private: bool = False,
) -> dict[str, np.ndarray]:
    """Check ``tensors`` against ``expected`` and return them cast, or raise every problem at once.

    ``tensors`` are arrays, or planned HF tensors (hf_engine.Planned) that are judged by their
    shapes and dtypes and read only once every one of them fits, one after another in the plan's
    order. ``origin`` names the file tensor each of ours came from (for HF checkpoints), so a shape
    complaint points at something the user can find in their checkpoint. ``private``: the tensors
    are views of buffers that nothing else holds (what safetensors read into memory for a HF
    mapping), so one that is already contiguous is returned as it is instead of copied.
    """
    _misfits(tensors, expected, source, origin or {}, problems or [])
    # In the order of `tensors`: a plan lists the pieces of one HF tensor together, so each is read once.
    cast = {name: contiguous(_read(t), np.dtype(expected[name][1])) for name, t in tensors.items()}
    out = {name: cast[name] for name in expected}
    if private:
        return out
    # Own every buffer: callers may mutate or keep these after the source file is gone.
    return {name: arr if arr.flags.owndata else arr.copy() for name, arr in out.items()}


def _misfits(tensors: Mapping[str, _Tensor], expected: Expected, source: str | Path, origin: Mapping[str, str],
             problems: list[Problem]) -> None:
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
        raise WeightsError.misfit(source, found)


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
    path: str | Path | None, expected: Expected, *, seed: int | None = None, group: str | None = None
) -> dict[str, np.ndarray]:
    """The model's parameters, by our names, as contiguous arrays of the expected shapes and dtypes.

    ``path`` is one of
      * a ``.safetensors`` file whose tensor names are ours (e.g. written by ``save_weights``);
      * a HuggingFace checkpoint directory (config.json + model.safetensors, or a sharded
        model.safetensors.index.json) of model_type gpt2, bert, bart, llama, mistral or qwen2, mapped to our names;
      * a ``.gguf`` file (llama.cpp) of architecture llama, mistral or qwen2, read as that HF checkpoint
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
            f"seed={seed} given together with weights path '{path}'; seed only applies to random weights"
        )
    path = Path(path).expanduser()
    if path.is_dir():
        plan = map_hf_checkpoint(path, expected, group=group)
        # safetensors copies each tensor out of the file into memory of its own (open_safetensors),
        # and the mapping's views of those are disjoint: no second copy is needed to own them.
        try:
            return fit(plan.tensors, expected, path, origin=plan.origin, problems=plan.verify(), private=True)
        finally:
            plan.release()
    if not path.exists():
        raise WeightsError(f"weights '{path}': no such file or directory")
    if path.suffix == ".gguf":
        return _load_gguf(path, expected, group)
    if path.suffix in PICKLE_SUFFIXES:
        raise refuse_pickle(path)
    if path.suffix != ".safetensors":
        hint = "; pass the checkpoint directory instead" if path.name == "config.json" else ""
        raise WeightsError(
            f"weights '{path}': expected a .safetensors or .gguf file or a HuggingFace checkpoint directory{hint}"
        )
    tensors = read_safetensors(path)
    if group and not any(name.startswith(f"{group}.") for name in tensors):  # the model's own names
        tensors = {f"{group}.{name}": array for name, array in tensors.items()}
    try:
        return fit(tensors, expected, path)
    except WeightsError as e:
        if tensors and tensors.keys().isdisjoint(expected) and (path.parent / "config.json").is_file():
            # Probably a HF model.safetensors given directly: its names are HF's, not ours.
            e.summary += f" (no names in common; to map HF names, pass the directory '{path.parent}')"
            e.args = (e.summary, e.problems)
        raise


def _lazy(read: _Tensor, dtype: np.dtype) -> LazyTensor:
    return LazyTensor(tuple(int(d) for d in read.shape), dtype, lambda: contiguous(_read(read), dtype))


def open_weights(path: str | Path, expected: Expected, *, group: str | None = None,
                 ) -> tuple[dict[str, LazyTensor], dict[str, str]]:
    """``load_weights`` without reading: each parameter a LazyTensor that reads (and casts) its tensor
    from the checkpoint when a writer loads it, and {name: the name it is the transpose of} for the
    parameters the mapping itself ties (a HF embedding read again as the unembedding).

    Every check that needs no data (missing, unexpected, mis-shaped tensors) is made now; the checks
    that do (a tied copy equal to its source) read those tensors now, one pair at a time. A compile
    then holds one checkpoint tensor at a time instead of the whole model (issue 25).
    """
    _check_expected(expected)
    path = Path(path).expanduser()
    if path.is_dir():
        plan = map_hf_checkpoint(path, expected, group=group)
        problems = plan.verify()
        plan.release()
        _misfits(plan.tensors, expected, path, plan.origin, problems)
        tensors: Mapping[str, _Tensor] = plan.tensors
        # Kept is the one `expected` lists first, as tied_weights.transposed_twins keeps it from values.
        order = {name: i for i, name in enumerate(expected)}
        twins = dict(sorted(((a, b) if order[a] > order[b] else (b, a)) for a, b in plan.transposed_twins().items()
                            if a in order and b in order))
    else:
        if not path.exists():
            raise WeightsError(f"weights '{path}': no such file or directory")
        if path.suffix in PICKLE_SUFFIXES:
            raise refuse_pickle(path)
        if path.suffix != ".safetensors":
            return load_weights(path, expected, group=group), {}  # load_weights says what is wrong
        refs: dict[str, TensorRef] = open_safetensors(path)
        if group and not any(name.startswith(f"{group}.") for name in refs):
            refs = {f"{group}.{name}": ref for name, ref in refs.items()}
        if refs.keys() != expected.keys() or any(tuple(refs[n].shape) != tuple(s) for n, (s, _) in expected.items()):
            return load_weights(path, expected, group=group), {}  # the misfit, and its hints, as load_weights says
        _misfits(refs, expected, path, {}, [])
        tensors, twins = refs, {}
    return {name: _lazy(tensors[name], np.dtype(expected[name][1])) for name in expected}, twins


def _load_gguf(path: Path, expected: Expected, group: str | None) -> dict[str, np.ndarray]:
    plan, ckpt = map_gguf(path, expected, group=group)
    # A complaint names the GGUF tensor (blk.0.attn_q.weight), which is what the user's file holds.
    origin = {name: ckpt.infos[o].name if o in ckpt.infos else o for name, o in plan.origin.items()}
    try:
        # Every tensor read is a buffer of its own (dequantized, or copied out of the map), and the mapping's
        # views of one are disjoint: owned already, so the model is not held twice (as for a HF directory).
        params = fit(plan.tensors, expected, path, origin=origin, problems=plan.verify(), private=True)
    finally:
        plan.release()
    return with_codes(ckpt, plan, params)
