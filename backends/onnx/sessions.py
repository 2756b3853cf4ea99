"""Every onnxruntime session is built here: the inference runner's (runner.py), generation's, and a training
step's, on the CPU or on CUDA, never silently on the wrong one.

    providers(ort, provider)     the one provider asked for, checked present: naming only it rules out a quiet
                                 fallback to the CPU
    session_options(...)         SessionOptions: threads, profiling, optimizations off, onnxruntime's log
    open_session(...)            an InferenceSession of a file or ModelProto, its load failures a BackendError
    step_session(...)            a training step's graph lowered, its frozen weights handed over as OrtValues
                                 (held once) and a session of the graph without their bytes
    release_pages(arrays)        a buffer's pages handed back to the system between steps (madvise)

onnxruntime is imported only when a session is made, so compiling to ONNX works in an environment without it;
onnxruntime (CPU) and onnxruntime-gpu install the same module, which is why the two extras are alternatives.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pseudoformer.backends.onnx.providers import require, session_providers
from pseudoformer.base.atomic_write import OutputError, describe
from pseudoformer.base.errors import BackendError


def onnxruntime() -> Any:
    """The onnxruntime module, or a BackendError that says how to install it."""
    try:
        import onnxruntime
    except ImportError as e:
        raise BackendError(
            "running a model needs onnxruntime, which is not installed: "
            "pip install 'pseudoformer[cpu]' (or 'pseudoformer[gpu]' for CUDA, never both)"
        ) from e
    return onnxruntime


def providers(ort: Any, provider: str, cuda: Mapping[str, str] | None = None) -> list[Any]:
    """The execution providers of a session on `provider` ("cpu", "cuda"): that one alone, checked installed,
    with its options (CUDA's TF32 off: providers.py, and `cuda`'s)."""
    require(ort, provider)
    return session_providers(provider, cuda)


def session_options(ort: Any, *, threads: int | None = None, profile: bool = False, optimize: bool = True,
                    log_severity: int | None = 3) -> Any:
    """SessionOptions with `threads` intra-op threads (None: onnxruntime's choice), profiling (its trace in a new
    directory under the system's temp dir, named by the session's end_profiling(), never the current one), graph
    optimizations (off: the ONNX nodes run as lowered), and onnxruntime's own log at `log_severity` and above
    (3: errors; 4: fatal only, for a foreign file whose names would reach the terminal raw; None: its default)."""
    options = ort.SessionOptions()
    if threads is not None:
        if threads < 1:
            raise BackendError(f"threads must be at least 1, got {threads}")
        options.intra_op_num_threads = threads
    if log_severity is not None:
        options.log_severity_level = log_severity
    options.enable_profiling = profile
    if profile:
        # onnxruntime writes its trace at end_profiling(), by default into the current directory, which no user
        # asked for: into a directory of its own in the system's temp dir instead (end_profiling() names the file)
        options.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="pseudoformer-profile-")) / "onnxruntime")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def open_session(ort: Any, model: onnx.ModelProto | str | os.PathLike, options: Any, provider: str = "cpu", *,
                 disabled_optimizers: list[str] | None = None, cuda: Mapping[str, str] | None = None) -> Any:
    """An InferenceSession of `model` (a path, or a ModelProto under protobuf's 2 GiB) on `provider` alone (with
    `cuda`'s provider options on CUDA)."""
    names = providers(ort, provider, cuda)
    if isinstance(model, onnx.ModelProto):
        try:
            source: bytes | str = model.SerializeToString()
        except Exception as e:  # protobuf's EncodeError, or ValueError, past 2 GiB
            raise BackendError(
                f"the model is too big to hand to onnxruntime in memory ({e}); save it with save_model and pass "
                "the path"
            ) from e
    else:
        if not Path(model).is_file():
            raise BackendError(f"no model file at {model}")
        source = str(model)
    try:
        return ort.InferenceSession(source, sess_options=options, providers=names,
                                    disabled_optimizers=disabled_optimizers)
    except Exception as e:  # onnxruntime raises its own exception types for load failures
        raise BackendError(f"onnxruntime could not load the model: {e}") from e


def step_session(graph: Any, frozen: Mapping[str, np.ndarray], *, threads: int | None = None,
                 opset: int | None = None, profile: bool = False, session: Mapping[str, Any] | None = None,
                 optimize: bool = True, provider: str = "cpu") -> tuple[Any, dict[str, Any], onnx.ModelProto]:
    """A session of a training step's `graph` (or one half of it), the OrtValues of the frozen weights it reads,
    and its proto without weights (a few hundred KB). `optimize=False` runs the ONNX nodes as lowered (the
    in-place update); `session` sets SessionOptions attributes by name."""
    from pseudoformer.backends.onnx.compile import lower_model

    ort = onnxruntime()
    lowered = lower_model(graph, frozen, **({"opset": opset} if opset is not None else {}))
    options = session_options(ort, threads=threads or None, profile=profile, optimize=optimize)
    # A training step's memory pattern (one block planned for every intermediate) held GPT-2's step at
    # batch 8 above 3.9 GB where the arena alone peaks at 2.9 GB (benchmarks/README.md, training).
    options.enable_mem_pattern = False
    # onnxruntime's CPU arena stays on: since the loss's backward holds two vocabulary-sized tensors, not four,
    # the arena's peak is the freed step's (GPT-2, batch 8, quiet: 1767 against 1709–1773 MiB; LoRA on SmolLM2
    # lower, 2510 against 2624), and without it each step takes those tensors from the system afresh, page
    # faults included: 22–34 % slower (benchmarks/README.md, training). `enable_cpu_mem_arena=False` frees
    # each tensor after its last reader.
    options.enable_cpu_mem_arena = True
    # The frozen weights are handed to onnxruntime as OrtValues over our own arrays, so they exist once:
    # inline initializers were held by the proto, its serialised bytes and onnxruntime's own copy, and
    # prepacking a MatMul's constant B keeps a packed copy next to an initializer it may not free.
    options.add_session_config_entry("session.disable_prepacking", "1")
    values = {name: ort.OrtValue.ortvalue_from_numpy(np.asarray(arr))
              for name, arr in lowered.weights.items() if arr.nbytes > _INLINE_BYTES}
    for name, value in values.items():
        options.add_initializer(name, value)
    for key, value in (session or {}).items():  # onnxruntime.SessionOptions attributes
        setattr(options, key, value)
    return _session_without_weights(ort, lowered, options, values, provider), values, lowered.skeleton


# Weights up to this size stay inline: onnxruntime's graph optimizers read an initializer's own bytes (constant
# folding, fusions checking a constant's value), not the OrtValue add_initializer gave for it.
_INLINE_BYTES = 1 << 16


def _session_without_weights(ort: Any, lowered: Any, options: Any, outside: Mapping[str, Any],
                             provider: str) -> Any:
    """An InferenceSession of `lowered` in which the initializers named in `outside` (given to `options` with
    add_initializer) hold no bytes: each is declared as external data of an empty file, so an optimizer that
    tried to read one would fail rather than see wrong values. (A model given as bytes cannot name external
    data; an initializer with no data fails validation.)"""
    from onnx import numpy_helper

    from pseudoformer.backends.onnx.lower import initializer_header

    model = onnx.ModelProto()
    model.CopyFrom(lowered.skeleton)
    for name, arr in lowered.weights.items():
        if name not in outside:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
            continue
        t = initializer_header(name, arr)
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", "frozen.bin"), ("offset", "0"), ("length", str(arr.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        model.graph.initializer.append(t)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "frozen.bin").touch()
        try:
            onnx.save_model(model, str(Path(tmp) / "step.onnx"))
        except OSError as e:  # a full temporary disk: said as every writer says it (the directory goes with `with`)
            raise OutputError(f"cannot write {Path(tmp) / 'step.onnx'}, the step's model for onnxruntime to load: "
                              f"{describe(e)} (set TMPDIR to a directory on a larger disk)") from None
        # Constant folding would read the frozen weights' (absent) bytes, and what it folded from them (a
        # transposed or sliced weight) it would keep as a second copy; unfolded, each step recomputes it.
        return open_session(ort, Path(tmp) / "step.onnx", options, provider,
                            disabled_optimizers=["ConstantFolding"] if outside else None)


def release_pages(arrays: list[np.ndarray]) -> None:
    """madvise(MADV_DONTNEED) the whole pages inside each array (Linux): they read as zeros when next touched,
    which is harmless for a buffer that is written before it is read. Elsewhere, nothing."""
    libc = _libc()
    if libc is None:
        return
    page = 4096
    for a in arrays:
        start = -(-a.ctypes.data // page) * page
        stop = (a.ctypes.data + a.nbytes) // page * page
        if stop - start >= 1 << 20:  # small ones share pages with the heap's bookkeeping: not worth it
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), 4)  # MADV_DONTNEED


@functools.cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
