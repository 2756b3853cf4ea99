"""Running a lowered model on onnxruntime, on the CPU or on CUDA, never silently on the wrong one.

onnxruntime is imported only here and only when a runner is made, so compiling to ONNX works in
an environment without it; onnxruntime (CPU) and onnxruntime-gpu install the same module, which
is why the two extras are alternatives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pseudoformer.backends.onnx.providers import device as provider_device
from pseudoformer.backends.onnx.providers import require, session_providers
from pseudoformer.base.errors import BackendError

_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as e:
        raise BackendError(
            "running a model needs onnxruntime, which is not installed: "
            "pip install 'pseudoformer[cpu]' (or 'pseudoformer[gpu]' for CUDA, never both)"
        ) from e
    return onnxruntime


_LIMITED: list[int] = []  # the limit of the process-wide allocator registered last


def _limit_cpu_memory(ort: Any, limit: int) -> None:
    """Register a CPU arena of at most `limit` bytes in onnxruntime's environment, for the sessions made
    next that ask for the environment's allocators. onnxruntime holds one such arena per process and a
    registration replaces it for later sessions (earlier ones keep theirs), so a new limit registers anew."""
    if _LIMITED and _LIMITED[-1] == int(limit):
        return
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(int(limit), -1, -1, -1))
    _LIMITED.append(int(limit))


class OnnxRunner:
    """An onnxruntime session over a model (a ModelProto or a path), on provider "cpu" or "cuda"."""

    def __init__(
        self, model: onnx.ModelProto | str | os.PathLike, *, provider: str = "cpu", threads: int | None = None,
        memory_limit: int | None = None,
    ) -> None:
        """memory_limit: the most bytes onnxruntime's CPU allocator may hold for this process (weights it
        copies and every intermediate); an allocation past it fails the run instead of being made."""
        ort = _onnxruntime()
        require(ort, provider)
        options = ort.SessionOptions()
        if threads is not None:
            if threads < 1:
                raise BackendError(f"threads must be at least 1, got {threads}")
            options.intra_op_num_threads = threads
        if memory_limit is not None and provider == "cpu":
            _limit_cpu_memory(ort, memory_limit)
            options.add_session_config_entry("session.use_env_allocators", "1")
            # A foreign file's names reach onnxruntime's own log, printed raw (and in colour) on stderr:
            # only its errors, which arrive as exceptions and are printed escaped, are wanted.
            options.log_severity_level = 4
        if isinstance(model, onnx.ModelProto):
            try:
                source: bytes | str = model.SerializeToString()
            except Exception as e:  # protobuf's EncodeError, or ValueError, past 2 GiB
                raise BackendError(
                    f"the model is too big to hand to onnxruntime in memory ({e}); "
                    "save it with save_model and pass the path"
                ) from e
        else:
            if not Path(model).is_file():
                raise BackendError(f"no model file at {model}")
            source = str(model)
        self._ort = ort
        self.provider = provider
        self.device = provider_device(provider)
        try:
            # Naming only the asked provider is what rules out a quiet fallback to the CPU.
            self.session = ort.InferenceSession(source, sess_options=options, providers=session_providers(provider))
        except Exception as e:  # onnxruntime raises its own exception types for load failures
            raise BackendError(f"onnxruntime could not load the model: {e}") from e
        try:  # a file's names and metadata are its own bytes: onnxruntime hands back invalid UTF-8 as an error
            self._inputs = {i.name: i for i in self.session.get_inputs()}
            self.output_names = [o.name for o in self.session.get_outputs()]
            self.metadata: dict[str, str] = dict(self.session.get_modelmeta().custom_metadata_map)
        except UnicodeDecodeError as e:
            raise BackendError(f"the model's names or metadata are not UTF-8 text ({e})") from None
        self.input_names = list(self._inputs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on `inputs` (by input name); return every output by name, as numpy arrays."""
        feed = self._feed(inputs)
        # A failed run raises, and callers turn that into their own one-line message; onnxruntime
        # would also print it to stderr first, in colour, so its own log is silenced for runs.
        quiet = self._ort.RunOptions()
        quiet.log_severity_level = 4
        if self.device == "cpu":
            values = self.session.run(self.output_names, feed, quiet)
        else:
            # IO binding keeps the outputs on the GPU until the one copy back, instead of
            # onnxruntime choosing where they live.
            binding = self.session.io_binding()
            for name, value in feed.items():
                binding.bind_cpu_input(name, value)
            for name in self.output_names:
                binding.bind_output(name, "cuda")
            self.session.run_with_iobinding(binding, quiet)
            values = binding.copy_outputs_to_cpu()
        return dict(zip(self.output_names, values, strict=True))

    def _feed(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in inputs]
        extra = [n for n in inputs if n not in self._inputs]
        if missing or extra:
            raise BackendError(
                f"inputs do not match the model's ({', '.join(self.input_names)}): "
                f"missing {missing or 'none'}, unexpected {extra or 'none'}"
            )
        feed = {}
        for name, value in inputs.items():
            value = np.asarray(value)
            want = _NUMPY.get(self._inputs[name].type)
            if want is not None and value.dtype != want:
                # Widening within a kind (int32 tokens to int64) is safe; float to int is not.
                if np.dtype(want).kind != value.dtype.kind:
                    raise BackendError(f"input {name} is {value.dtype}, the model wants {np.dtype(want)}")
                value = value.astype(want)
            feed[name] = np.ascontiguousarray(value)
        return feed
