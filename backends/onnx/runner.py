"""Running a lowered model on onnxruntime, on the CPU or on CUDA, never silently on the wrong one (its session
is built by sessions.py, where every onnxruntime session is)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from pseudoformer.backends.onnx.providers import PROVIDERS
from pseudoformer.backends.onnx.providers import device as provider_device
from pseudoformer.backends.onnx.sessions import (
    onnxruntime,
    open_session,
    providers,
    session_options,
)
from pseudoformer.base.errors import BackendError

__all__ = ["PROVIDERS", "OnnxRunner"]

_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


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
        memory_limit: int | None = None, sizes: Mapping[str, int] | None = None, cuda_graph: bool = False,
    ) -> None:
        """memory_limit: the most bytes onnxruntime's CPU allocator may hold for this process (weights it
        copies and every intermediate); an allocation past it fails the run instead of being made. sizes: named
        dims fixed for this session (onnxruntime's free dimension overrides: the shapes they make fold to
        constants). cuda_graph: onnxruntime's CUDA graphs on the CUDA provider (every run with one IO binding
        whose values stay put; generation/step_values.py)."""
        ort = onnxruntime()
        cuda = {"enable_cuda_graph": "1"} if cuda_graph else None
        providers(ort, provider, cuda)
        options = session_options(ort, threads=threads, log_severity=None)
        for dim, size in (sizes or {}).items():
            options.add_free_dimension_override_by_name(dim, int(size))
        if memory_limit is not None and provider == "cpu":
            _limit_cpu_memory(ort, memory_limit)
            options.add_session_config_entry("session.use_env_allocators", "1")
            # A foreign file's names reach onnxruntime's own log, printed raw (and in colour) on stderr:
            # only its errors, which arrive as exceptions and are printed escaped, are wanted.
            options.log_severity_level = 4
        self._ort = ort
        self.provider = provider
        self.device = provider_device(provider)
        self.session = open_session(ort, model, options, provider, cuda=cuda)
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
            feed[name] = np.require(value, requirements="C")  # a scalar stays one (ascontiguousarray: [1])
        return feed
