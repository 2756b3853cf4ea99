"""Running a training step graph (passes/training_step.py) again and again on one backend, the parameters
and optimizer state kept by the runtime between steps.

    interpreter   numpy arrays (the reference)
    onnxruntime   OrtValues bound with IOBinding: each step reads one set of buffers and writes the
                  other, and the two swap, so parameters and state never pass through numpy
    tvm           the Relax VM's tensors, each step's outputs handed back as the next step's arguments
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.errors import UsageError
from pseudoformer.ir import Graph
from pseudoformer.passes.training_step import LR, NEW, STEP, Optimizer
from pseudoformer.run_settings import TRAINING_BACKENDS

BACKENDS = TRAINING_BACKENDS


def initial_state(graph: Graph, params: Mapping[str, np.ndarray], optimizer: Optimizer) -> dict[str, np.ndarray]:
    """The trainable parameters and the optimizer state (zeros, t = 0) that the step's first call takes."""
    names = graph.meta["training"]["trainable"]
    state = {k: np.array(params[k], dtype=np.float32, order="C") for k in names}
    for k in names:
        for s in optimizer.state(k):
            state[s] = np.zeros_like(state[k])
    if optimizer.kind == "adamw":
        state[STEP] = np.zeros((), np.float32)
    return state


class StepRuntime:
    """One compiled training step and the values it carries from step to step."""

    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.carried = [name[len(NEW):] for name, _ in graph.outputs if name.startswith(NEW)]
        self.batch_names = [n.attrs["name"] for n in graph.inputs
                            if n.attrs["name"] not in self.carried and n.attrs["name"] != LR]
        self.frozen = dict(frozen)
        self._load({k: np.array(v, order="C") for k, v in state.items()})

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        """One step on `batch` at step size `lr`; returns the batch's loss, before the update."""
        raise NotImplementedError

    def values(self) -> dict[str, np.ndarray]:
        """The carried values (parameters and state) as numpy arrays, copied out."""
        raise NotImplementedError

    def _load(self, state: dict[str, np.ndarray]) -> None:
        raise NotImplementedError


class InterpreterStep(StepRuntime):
    def _load(self, state: dict[str, np.ndarray]) -> None:
        self.state = state

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        from pseudoformer.ir.interpreter import run

        feed = {**batch, LR: np.asarray(lr, np.float32), **self.state}
        out = run(self.graph, feed, self.frozen)
        self.state = {k: out[NEW + k] for k in self.carried}
        return float(out["loss"])

    def values(self) -> dict[str, np.ndarray]:
        return {k: np.array(v) for k, v in self.state.items()}


class OrtStep(StepRuntime):
    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray], *,
                 threads: int | None = None, opset: int | None = None, profile: bool = False,
                 session: Mapping[str, Any] | None = None) -> None:
        import onnxruntime as ort

        from pseudoformer.backends.onnx.compile import lower_model

        self.ort = ort
        lowered = lower_model(graph, frozen, **({"opset": opset} if opset is not None else {}))
        self.proto = lowered.skeleton  # the step without its weights (a few hundred KB)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        options.enable_profiling = profile
        # A training step's memory pattern (one block planned for every intermediate) held GPT-2's step at
        # batch 8 above 3.9 GB where the arena alone peaks at 2.9 GB (benchmarks/README.md, training).
        options.enable_mem_pattern = False
        # The frozen weights are handed to onnxruntime as OrtValues over our own arrays, so they exist once:
        # inline initializers were held by the proto, its serialised bytes and onnxruntime's own copy, and
        # prepacking a MatMul's constant B keeps a packed copy next to an initializer it may not free.
        options.add_session_config_entry("session.disable_prepacking", "1")
        self._frozen = {name: ort.OrtValue.ortvalue_from_numpy(np.asarray(arr))
                        for name, arr in lowered.weights.items() if arr.nbytes > _INLINE_BYTES}
        for name, value in self._frozen.items():
            options.add_initializer(name, value)
        for key, value in (session or {}).items():  # onnxruntime.SessionOptions attributes
            setattr(options, key, value)
        self.session = _session_without_weights(ort, lowered, options, self._frozen)
        del lowered
        super().__init__(graph, {}, state)  # onnxruntime reads the frozen weights from self._frozen

    def _load(self, state: dict[str, np.ndarray]) -> None:
        value = self.ort.OrtValue.ortvalue_from_numpy
        self.buffers = [{k: value(np.array(v)) for k, v in state.items()},
                        {k: value(np.empty_like(v)) for k, v in state.items()}]
        self.loss = value(np.zeros((), np.float32))
        self.binding = self.session.io_binding()

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        current, nxt = self.buffers
        b = self.binding
        b.clear_binding_inputs()
        b.clear_binding_outputs()
        for k in self.batch_names:
            b.bind_cpu_input(k, np.ascontiguousarray(batch[k]))
        b.bind_cpu_input(LR, np.asarray(lr, np.float32))
        for k in self.carried:
            b.bind_ortvalue_input(k, current[k])
            b.bind_ortvalue_output(NEW + k, nxt[k])
        b.bind_ortvalue_output("loss", self.loss)
        self.session.run_with_iobinding(b)
        self.buffers = [nxt, current]
        return float(self.loss.numpy())

    def values(self) -> dict[str, np.ndarray]:
        return {k: v.numpy().copy() for k, v in self.buffers[0].items()}


# Weights up to this size stay inline: onnxruntime's graph optimizers read an initializer's own bytes (constant
# folding, fusions checking a constant's value), not the OrtValue add_initializer gave for it.
_INLINE_BYTES = 1 << 16


def _session_without_weights(ort: Any, lowered: Any, options: Any, outside: Mapping[str, Any]) -> Any:
    """An InferenceSession of `lowered` in which the initializers named in `outside` (given to `options` with
    add_initializer) hold no bytes: each is declared as external data of an empty file, so an optimizer that
    tried to read one would fail rather than see wrong values. (A model given as bytes cannot name external
    data; an initializer with no data fails validation.)"""
    import tempfile
    from pathlib import Path

    import onnx
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
        onnx.save_model(model, str(Path(tmp) / "step.onnx"))
        # Constant folding would read the frozen weights' (absent) bytes, and what it folded from them (a
        # transposed or sliced weight) it would keep as a second copy; unfolded, each step recomputes it.
        return ort.InferenceSession(str(Path(tmp) / "step.onnx"), options, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=["ConstantFolding"] if outside else None)


class TvmStep(StepRuntime):
    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        from pseudoformer.backends.tvm.build import compile_graph

        self.model = compile_graph(graph, frozen)
        super().__init__(graph, frozen, state)

    def _load(self, state: dict[str, np.ndarray]) -> None:
        import tvm

        self.tvm = tvm
        self.dev = tvm.cpu()
        self.state = {k: tvm.runtime.tensor(np.array(v, order="C"), self.dev) for k, v in state.items()}
        self.outputs = self.model.output_names

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        tensor = self.tvm.runtime.tensor
        args = []
        for name, dtype, _ in self.model.meta["inputs"]:
            if name in self.state:
                args.append(self.state[name])
            elif name == LR:
                args.append(tensor(np.asarray(lr, np.float32), self.dev))
            else:
                args.append(tensor(np.ascontiguousarray(batch[name], dtype=np.dtype(dtype)), self.dev))
        out = self.model.vm()["main"](*args, *self.model._param_args())
        got = {name: out[i] for i, name in enumerate(self.outputs)}
        self.state = {k: got[NEW + k] for k in self.carried}
        return float(got["loss"].numpy())

    def values(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in self.state.items()}


def make_runtime(backend: str, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
                 **options: Any) -> StepRuntime:
    if backend == "interpreter":
        return InterpreterStep(graph, frozen, state)
    if backend == "onnxruntime":
        return OrtStep(graph, frozen, state, **options)
    if backend == "tvm":
        return TvmStep(graph, frozen, state)
    raise UsageError(f"unknown backend {backend!r}: the backends are {', '.join(BACKENDS)}")
