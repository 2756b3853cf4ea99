"""Running a training step graph (passes/training_step.py) again and again on one backend, the parameters
and optimizer state kept by the runtime between steps.

    interpreter   numpy arrays (the reference)
    onnxruntime   OrtValues bound with IOBinding, so parameters and state never pass through numpy: the
                  step as a gradient graph and an update graph that writes θ and the state over their own
                  buffers (OrtSplitStep, passes/split_step.py), or as one graph that reads one set of
                  buffers and writes the other, the two swapping (OrtStep); the sessions are built by
                  backends/onnx/sessions.py. On provider "cuda" every one of those OrtValues is on the GPU and
                  the update runs there: per step only the batch goes to the device and the loss comes back
    tvm           the Relax VM's tensors, each step's outputs handed back as the next step's arguments
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.ir import Graph
from pseudoformer.passes.autodiff import GRAD
from pseudoformer.passes.manager import named_pipeline, run_passes
from pseudoformer.passes.split_step import SplitStep
from pseudoformer.passes.training_step import ACC, LR, NEW, STEP, WEIGHT, Optimizer
from pseudoformer.passes.update_chunks import CHUNK, CHUNK_META, PIECES_META
from pseudoformer.run_settings import TRAINING_BACKENDS

BACKENDS = TRAINING_BACKENDS


def initial_state(graph: Graph, params: Mapping[str, np.ndarray], optimizer: Optimizer) -> dict[str, np.ndarray]:
    """The trainable parameters and the optimizer state (zeros, t = 0) that the step's first call takes.
    θ is `params`' own arrays where they are float32 and contiguous, not copies: every runtime copies what it
    is given (StepRuntime), and nothing writes into these, so the parameters are held once until then."""
    names = graph.meta["training"]["trainable"]
    state = {k: np.ascontiguousarray(params[k], dtype=np.float32) for k in names}
    for k in names:
        for s in optimizer.state(k):
            state[s] = np.zeros_like(state[k])
    if optimizer.kind == "adamw":
        state[STEP] = np.zeros((), np.float32)
    return state


def is_step_input(name: str, carried: list[str]) -> bool:
    """Whether a step graph's input is the runtime's own (θ, state, η, accumulation's), not the batch's."""
    return name in carried or name in (LR, WEIGHT) or name.startswith(ACC)


class StepRuntime:
    """One compiled training step and the values it carries from step to step."""

    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.carried = [name[len(NEW):] for name, _ in graph.outputs if name.startswith(NEW)]
        self.batch_names = [n.attrs["name"] for n in graph.inputs if not is_step_input(n.attrs["name"], self.carried)]
        self.frozen = dict(frozen)
        # One copy, which the runtime owns (onnxruntime's split step writes over it in place); `_load` keeps it.
        self._load({k: np.array(v, order="C") for k, v in state.items()})

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        """One step on `batch` at step size `lr`; returns the batch's loss, before the update."""
        raise NotImplementedError

    def values(self) -> dict[str, np.ndarray]:
        """The carried values (parameters and state) as numpy arrays, copied out."""
        raise NotImplementedError

    def current(self) -> dict[str, np.ndarray]:
        """The carried values as numpy arrays, without a copy where the runtime keeps them as such: read them
        before the next step, which may write over them (a checkpoint's writers stream from them)."""
        return self.values()

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

    def current(self) -> dict[str, np.ndarray]:
        return dict(self.state)  # each step makes new arrays: these are not written over


class OrtStep(StepRuntime):
    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray], *,
                 threads: int | None = None, opset: int | None = None, profile: bool = False,
                 session: Mapping[str, Any] | None = None, provider: str = "cpu") -> None:
        from pseudoformer.backends.onnx.sessions import step_session

        ort = _onnxruntime(provider)
        self.ort, self.memory = ort, DeviceValues(ort, provider)
        self.session, self._frozen, self.proto = step_session(graph, frozen, threads=threads, opset=opset,
                                                              profile=profile, session=session, provider=provider)
        super().__init__(graph, {}, state)  # onnxruntime reads the frozen weights from self._frozen

    def _load(self, state: dict[str, np.ndarray]) -> None:
        on = self.memory
        self.buffers = [{k: on.copy(v) for k, v in state.items()},
                        {k: on.empty(v.shape, v.dtype) for k, v in state.items()}]
        self.loss = on.empty((), np.float32)
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


class OrtSplitStep(StepRuntime):
    """The step as two onnxruntime sessions (passes/split_step.py): the gradient graph writes the loss and
    the gradients into buffers kept between steps, then the update graph writes θ and the optimizer state
    over their own buffers (each output bound to its input's OrtValue): θ, g, m, v held once, not θ, m, v
    twice. The update graph is checked safe to run so before it is used (backends/onnx/in_place.py).

    Each buffer is a numpy array that its OrtValue wraps without a copy, so the update graph can be cut
    into cache-sized pieces (the pass update_pieces, `update_chunk` elements; 0: whole tensors) whose
    inputs and outputs are OrtValues over slices of the same arrays. Every OrtValue is bound once, when
    the buffers are made; a step binds only its batch and writes η into the bound scalar.

    A step of gradient accumulation (step_graph's `accumulate`) has a gradient graph that reads the sum so far,
    acc.<name>, bound to the very OrtValue its grad.<name> is written to: `step_many` runs it once per
    micro-batch and the update once (training/accumulate.py). On a step's first micro-batch acc is bound to
    zeros: on the host an np.zeros array never written, whose pages the kernel maps to its one zero page when
    read (no memory), so the gradients' released pages stay released until the backward writes them; on a
    device the gradients are overwritten with zeros."""

    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
                 split: SplitStep, *, threads: int | None = None, opset: int | None = None, profile: bool = False,
                 session: Mapping[str, Any] | None = None, update_chunk: int = CHUNK, provider: str = "cpu") -> None:
        from pseudoformer.backends.onnx.in_place import InPlaceError, in_place_problems
        from pseudoformer.backends.onnx.sessions import step_session

        ort = _onnxruntime(provider)
        self.ort, self.memory = ort, DeviceValues(ort, provider)
        if not self.memory.host_arrays:
            # The pieces are views of host arrays (and sized for a CPU's cache): on a GPU the update's
            # elementwise kernels take whole tensors.
            update_chunk = 0
        carried = [name[len(NEW):] for name, _ in graph.outputs if name.startswith(NEW)]
        asked = Graph(list(split.update.inputs), list(split.update.outputs), {**split.update.meta,
                                                                               CHUNK_META: update_chunk})
        update = run_passes(asked, named_pipeline("training-update-pieces"))
        self.pieces = update.meta.get(PIECES_META, [])
        # Each session keeps its own arena. One arena shared through onnxruntime's environment peaked 168 MiB
        # lower (GPT-2, batch 8), but onnxruntime registers that arena once a process and ignores any later
        # one: it silently replaced the memory limit `run` puts on a foreign file (backends/onnx/runner.py).
        self.update, _, update_proto = step_session(update, {}, threads=threads, opset=opset, optimize=False,
                                                    provider=provider)
        self.update_outputs = [o.name for o in self.update.get_outputs()]
        problems = in_place_problems(update_proto, {o: self._target(o) for o in self.update_outputs})
        if problems:
            raise InPlaceError("; ".join(problems[:5]))
        self.session, self._frozen, self.proto = step_session(split.gradient, frozen, threads=threads,
                                                              opset=opset, profile=profile, session=session,
                                                              provider=provider)
        self.theta = [n.attrs["name"] for n in split.gradient.inputs if n.attrs["name"] in carried]
        self.accumulates = any(n.attrs["name"] == WEIGHT for n in split.gradient.inputs)
        if self.accumulates:  # the sum's Add reads acc.<name> before it writes grad.<name> over it
            problems = in_place_problems(self.proto, {GRAD + k: ACC + k for k in self.theta})
            if problems:
                raise InPlaceError("; ".join(problems[:5]))
        self.update_inputs = [i.name for i in self.update.get_inputs()]
        super().__init__(graph, {}, state)

    def _target(self, output: str) -> str:
        """The update input whose buffer an update output is written over (new.X → X, new.X@j → X@j)."""
        whole, _, piece = output.partition("@")
        return whole[len(NEW):] + (f"@{piece}" if piece else "")

    def _load(self, state: dict[str, np.ndarray]) -> None:
        on = self.memory
        value = self.ort.OrtValue.ortvalue_from_numpy
        if on.host_arrays:
            arrays = dict(state)
            arrays.update({GRAD + k: np.empty_like(arrays[k]) for k in self.theta})
            self.arrays = arrays  # the memory every OrtValue below is a view of
            self.buffers = [{k: value(arrays[k]) for k in state}]  # one set, updated in place
            self.grads = {GRAD + k: value(arrays[GRAD + k]) for k in self.theta}
        else:  # θ, the state and the gradients on the device, each copied there once
            self.arrays = {}
            self.buffers = [{k: on.copy(v) for k, v in state.items()}]
            self.grads = {GRAD + k: on.empty(state[k].shape, state[k].dtype) for k in self.theta}
        self.loss = on.empty((), np.float32)
        self.lr = on.copy(np.zeros((), np.float32))  # rewritten in place each step (update_inplace)
        views = {**self.buffers[0], **self.grads, LR: self.lr}
        for p in self.pieces:  # an output piece is bound to the input piece it overwrites
            name, whole = (self._target(p.name), self._target(p.whole)) if p.whole.startswith(NEW) else (p.name, p.whole)
            views.setdefault(name, value(arrays[whole].reshape(-1)[p.start:p.stop]))
        b = self.binding = self.session.io_binding()
        for k in self.theta:
            b.bind_ortvalue_input(k, self.buffers[0][k])
        for k, g in self.grads.items():
            b.bind_ortvalue_output(k, g)
        b.bind_ortvalue_output("loss", self.loss)
        if self.accumulates:
            self.weight = on.copy(np.ones((), np.float32))
            b.bind_ortvalue_input(WEIGHT, self.weight)
            # the first micro-batch's sum so far (host: zero pages never written, see the class's docstring)
            self.zero_arrays = {k: np.zeros(state[k].shape, state[k].dtype) for k in self.theta} \
                if on.host_arrays else {}
            self.zeros = {k: value(a) for k, a in self.zero_arrays.items()}
        u = self.update_binding = self.update.io_binding()
        for k in self.update_inputs:
            u.bind_ortvalue_input(k, views[k])
        for k in self.update_outputs:
            u.bind_ortvalue_output(k, views[self._target(k)])

    def step(self, batch: Mapping[str, np.ndarray], lr: float) -> float:
        loss = self._gradient(batch)
        self._update(lr)
        return loss

    def step_many(self, micro: list[tuple[dict[str, np.ndarray], float]], lr: float) -> float:
        """One optimizer step over micro-batches, each (its feeds, its weight in the step's objective): the
        gradient graph once per micro-batch, adding into the gradients' buffers, then the update once."""
        loss = 0.0
        for i, (feeds, weight) in enumerate(micro):
            if i < 2:
                self._sum_so_far(first=i == 0)
            self.weight.update_inplace(np.asarray(weight, np.float32))
            loss += weight * self._gradient(feeds)
        self._update(lr)
        return loss

    def _sum_so_far(self, first: bool) -> None:
        """Binds each acc.<name>: zeros for a step's first micro-batch, then the gradients' own buffers."""
        for k in self.theta:
            g = self.grads[GRAD + k]
            if first and not self.zeros:  # on a device: the gradients themselves, overwritten with zeros
                g.update_inplace(np.zeros(g.shape(), np.float32))
            self.binding.bind_ortvalue_input(ACC + k, self.zeros[k] if first and self.zeros else g)

    def _gradient(self, batch: Mapping[str, np.ndarray]) -> float:
        for k in self.batch_names:  # binding a name again replaces its value
            self.binding.bind_cpu_input(k, np.ascontiguousarray(batch[k]))
        self.session.run_with_iobinding(self.binding)
        return float(self.loss.numpy())

    def _update(self, lr: float) -> None:
        from pseudoformer.backends.onnx.sessions import release_pages

        self.lr.update_inplace(np.asarray(lr, np.float32))
        self.update.run_with_iobinding(self.update_binding)
        # The gradients are rewritten in full by the next step: their pages go back to the system until then, as
        # torch's zero_grad(set_to_none=True) drops them, so at the step's peak (the loss's backward, where no
        # layer's gradient exists yet) they are not all resident (GPT-2: 148 MiB). Host memory only.
        release_pages([self.arrays[k] for k in self.grads if k in self.arrays])

    def values(self) -> dict[str, np.ndarray]:
        return {k: v.numpy().copy() for k, v in self.buffers[0].items()}

    def current(self) -> dict[str, np.ndarray]:
        if not self.arrays:  # on a device: copied to the host
            return self.values()
        return {k: self.arrays[k] for k in self.buffers[0]}  # the very buffers the update writes in place


class DeviceValues:
    """OrtValues in the memory of one onnxruntime provider ("cpu" or "cuda"): a training step's parameters,
    state, gradients, loss and step size are made here, so the one code path serves both."""

    def __init__(self, ort: Any, provider: str) -> None:
        from pseudoformer.backends.onnx.providers import device

        self.ort, self.device = ort, device(provider)
        # On the CPU the values are views of numpy arrays the runtime keeps (cut into pieces, their pages
        # released); elsewhere OrtValues the device allocates. Tests turn this off to run the device's path on
        # the CPU.
        self.host_arrays = self.device == "cpu"

    def copy(self, array: np.ndarray) -> Any:
        """`array` as an OrtValue on the device: on the CPU a view of the array itself, on a GPU a copy."""
        return self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self.device, 0)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised OrtValue of `shape` on the device, for an output that is written before it is read."""
        return self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.dtype(dtype), self.device, 0)


def _onnxruntime(provider: str) -> Any:
    """onnxruntime, checked to have `provider` (a missing CUDA provider is one line naming pseudoformer[gpu])."""
    import onnxruntime as ort

    from pseudoformer.backends.onnx.providers import require
    from pseudoformer.base.errors import BackendError

    try:
        require(ort, provider)
    except BackendError as e:
        raise UsageError(str(e)) from None
    return ort


class TvmStep(StepRuntime):
    def __init__(self, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        from pseudoformer.backends.tvm.build import compile_graph

        self.model = compile_graph(graph, frozen)
        super().__init__(graph, frozen, state)

    def _load(self, state: dict[str, np.ndarray]) -> None:
        import tvm

        self.tvm = tvm
        self.dev = tvm.cpu()
        self.state = {k: tvm.runtime.tensor(v, self.dev) for k, v in state.items()}
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


def check_provider(backend: str, options: Mapping[str, Any]) -> None:
    """A GPU provider is onnxruntime's: the other backends' steps run on the CPU."""
    provider = options.get("provider", "cpu")
    if backend != "onnxruntime" and provider != "cpu":
        raise UsageError(f"--provider {provider} is for the onnxruntime backend; {backend} runs on the CPU")


def make_runtime(backend: str, graph: Graph, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
                 *, split: SplitStep | None = None, **options: Any) -> StepRuntime:
    """`split` (CompiledStep.split): onnxruntime runs the step as its two graphs, updating in place, unless
    the update graph fails the in-place check; the other backends run the one graph."""
    check_provider(backend, options)
    if backend == "interpreter":
        return InterpreterStep(graph, frozen, state)
    if backend == "onnxruntime":
        from pseudoformer.backends.onnx.in_place import InPlaceError

        if split is not None:
            try:
                return OrtSplitStep(graph, frozen, state, split, **options)
            except InPlaceError:
                pass  # the one graph, double-buffered
        options.pop("update_chunk", None)
        return OrtStep(graph, frozen, state, **options)
    if backend == "tvm":
        return TvmStep(graph, frozen, state)
    raise UsageError(f"unknown backend {backend!r}: the backends are {', '.join(BACKENDS)}")
