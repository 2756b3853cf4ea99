"""Compiling a lowered graph with TVM, running it on the Relax VM, and saving it as a shared library.

A compiled model is a `.so` (TVMModel.save) that loads in a fresh process (load_model): the Relax
VM executable with its kernels, plus a `pseudoformer_meta` function that returns the names and
types the positional arguments and results stand for. Weights are passed at run time
(params="args", the default) and saved beside the library as `model.weights.safetensors`, in the
form the compiled code takes them (folded, passes/fold_constants.py, and packed, packing.py); or bound into the library as
constants (params="bind"): one file, but slower to compile and to save.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from pseudoformer.backends.options import CompileOptions
from pseudoformer.backends.pipeline import compile_pipeline, run
from pseudoformer.backends.tvm.dedup import dedup_prim_funcs
from pseudoformer.backends.tvm.export_child import export_in_child
from pseudoformer.backends.tvm.fastmath import fast_math
from pseudoformer.backends.tvm.fusion import reshapes_injective
from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.lower import Lowered, to_relax
from pseudoformer.backends.tvm.lowerings import accepts
from pseudoformer.backends.tvm.lowerings.attention import CPU_ONLY
from pseudoformer.backends.tvm.nbits import split_params, split_weights
from pseudoformer.backends.tvm.nbits_int8 import int8_weights
from pseudoformer.backends.tvm.packing import pack_matmul_weights
from pseudoformer.backends.tvm.schedule import schedule_passes
from pseudoformer.backends.tvm.specialise import bind_specialised, choose, probes, with_specialised
from pseudoformer.backends.tvm.weight_values import stream, to_device
from pseudoformer.base.atomic_write import MAIN, OutputError, Part, atomic_set, check_output
from pseudoformer.base.errors import BackendError, UsageError
from pseudoformer.base.manifest import check_file, verified_copy, write_manifest
from pseudoformer.base.model_files import manifest_path, weights_path
from pseudoformer.base.terminal import quiet_native_stderr
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.lazy_tensor import LazyTensor
from pseudoformer.ir.token_bounds import out_of_range, token_bounds
from pseudoformer.ir.types import TensorType
from pseudoformer.weights.errors import WeightsError
from pseudoformer.weights.safetensors_io import read_safetensors, write_safetensors

tvm = require_tvm()
from tvm import relax  # noqa: E402

# TVM sizes its thread pool, on first use, to the physical cores it guesses: half the logical
# CPUs, so one thread on a 2-vCPU machine. Kernels here scale to every CPU this process may use.
os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                             else os.cpu_count() or 1))

TARGETS = ("llvm", "cuda")
PARAM_MODES = ("bind", "args")
META = "pseudoformer_meta"


def make_target(target: str = "llvm") -> Any:
    """A tvm Target: "llvm" is this host's CPU as LLVM names it (AVX2 or AVX-512 as the CPU has them)."""
    if target not in TARGETS:
        raise BackendError(f"unknown TVM target {target!r} (choose {', '.join(TARGETS)})")
    if target == "cuda":
        if not tvm.cuda().exist:
            raise BackendError("--target cuda needs an NVIDIA GPU, and this machine has none; use --target llvm")
        return tvm.target.Target({"kind": "cuda", "arch": _cuda_arch()}, host=make_target("llvm"))
    # The host's own CPU name: a fixed one (znver4) would use instructions a VM may hide (AVX-512
    # here), and die on SIGILL; a .so is for machines like the one that built it.
    cpu = str(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": os.cpu_count() or 1})


def _cuda_arch() -> str:
    major, minor = str(tvm.cuda().compute_version).split(".")
    return f"sm_{major}{minor}"


def pipeline(target: Any, *, schedule: bool = True) -> Any:
    """The default Relax pipeline for CPU or GPU, with our schedules between fusion and memory planning."""
    gpu = target.kind.name == "cuda"
    pre = [fast_math] if schedule else []
    legalize = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        reshapes_injective,
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
        relax.transform.RewriteDataflowReshape(),
        dedup_prim_funcs,
        bind_specialised,
    ]
    lower = [
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        relax.transform.StaticPlanBlockMemory(),
        relax.transform.LowerAllocTensor(),
        relax.transform.KillAfterLastUse(),
        relax.transform.LowerRuntimeBuiltin(),
        relax.transform.ComputePrimValue(),
        relax.transform.VMShapeLower(),
        relax.transform.AttachGlobalSymbol(),
    ]
    passes = pre + legalize + (schedule_passes(target) if schedule or gpu else []) + lower

    @tvm.transform.module_pass(opt_level=0, name="PseudoformerPipeline")
    def _run(mod: Any, _ctx: Any) -> Any:
        with target:
            return tvm.transform.Sequential(passes)(mod)

    return _run


@dataclass
class TVMModel:
    """A compiled model: its VM executable, what its arguments are, and (params="args") its weights."""

    executable: Any  # tvm.runtime.Executable or a loaded library Module
    meta: dict[str, Any]
    # arrays, or LazyTensors computed when the model first runs or is saved (weight_values.stream); once
    # it has run on the CPU, views of the tensors TVM holds: the weights are in memory once
    weights: dict[str, np.ndarray | LazyTensor] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _vm: Any = None
    _params: list[Any] | None = None
    _functions: dict[str, Any] = field(default_factory=dict)

    @property
    def input_names(self) -> list[str]:
        return [name for name, _, _ in self.meta["inputs"]]

    @property
    def output_names(self) -> list[str]:
        return list(self.meta["outputs"])

    def _device(self) -> Any:
        return tvm.cuda() if self.meta["target"] == "cuda" else tvm.cpu()

    @cached_property
    def _probes(self) -> list[tuple[int, int, int]]:
        return probes(self.meta)

    def _function(self, name: str) -> Any:
        if name not in self._functions:
            self._functions[name] = self.vm()[name]
        return self._functions[name]

    @cached_property
    def _input_set(self) -> frozenset[str]:  # once: a decode step checks its ~60 inputs by name every token
        return frozenset(self.input_names)

    def vm(self) -> Any:
        if self._vm is None:
            t = time.perf_counter()
            # LLVM's machine code is made here: the VM's set-up JIT-compiles every kernel (a loaded library's are made)
            self._vm = relax.VirtualMachine(self.executable, self._device())
            self.timings["vm_s"] = time.perf_counter() - t
        return self._vm

    def _param_args(self) -> list[Any]:
        """The weights as TVM tensors, made once, a tensor at a time (lazy ones computed then)."""
        if self._params is None:
            dev = self._device()
            names = self.meta["params"]
            missing = [n for n in names if n not in self.weights]
            if missing:
                raise BackendError(f"no weights for parameters: {', '.join(missing)}")
            cpu = dev.dlpack_device_type() == tvm.cpu().dlpack_device_type()
            params = []
            for name, a in stream(self.weights, names):
                t = to_device(a, dev)
                if cpu:  # numpy's weights become views of TVM's: not a second copy of the model
                    self.weights[name] = np.from_dlpack(t)
                params.append(t)
            self._params = params
        return self._params

    def load_weights(self) -> None:
        """Make the weights TVM runs with now (quantizing lazy ones), not at the first run."""
        self._param_args()

    def run(self, inputs: Mapping[str, Any], *, keep: frozenset[str] = frozenset(),
            function: str | None = None) -> dict[str, Any]:
        """Run on `inputs` by name (dtypes as the graph declares them); the outputs by name.

        An input may also be a tvm Tensor, and the outputs named in `keep` stay tvm Tensors: a generator's
        key/value cache goes from one step to the next without two copies through numpy a token. `function`:
        "main" or SPECIALISED (specialise.py); by default the one that the inputs' sizes fit."""
        names = self._input_set
        if len(inputs) != len(names) or not names.issuperset(inputs):
            missing = [n for n in self.input_names if n not in inputs]
            extra = [n for n in inputs if n not in names]
            raise BackendError(f"inputs do not match the model's ({', '.join(self.input_names)}): "
                               f"missing {missing or 'none'}, unexpected {extra or 'none'}")
        dev = self._device()
        bounds = self.meta.get("index_bounds", {})
        args = []
        for name, dtype, rank in self.meta["inputs"]:
            given = inputs[name]
            bound = bounds.get(name)
            if isinstance(given, tvm.runtime.Tensor) and bound is None:
                if given.ndim != rank or str(given.dtype) != dtype:
                    raise BackendError(f"input {name} is {given.dtype} of rank {given.ndim}, "
                                       f"the model wants {dtype} of rank {rank}")
                args.append(given)
                continue
            # np.require, not ascontiguousarray, which makes a scalar (a cache's length) an array of one
            value = np.require(given.numpy() if isinstance(given, tvm.runtime.Tensor) else given,
                               dtype=np.dtype(dtype), requirements="C")
            if value.ndim != rank:
                raise BackendError(f"input {name} has rank {value.ndim}, the model wants {rank}")
            problem = None if bound is None else out_of_range(name, value, bound)
            if problem is not None:
                raise BackendError(problem)
            args.append(tvm.runtime.tensor(value, dev))
        params = self._param_args()
        fn = self._function(function or choose(self._probes, lambda i: args[i].shape))
        try:
            out = fn(*args, *params)
        except Exception as e:  # a shape check of the VM: sizes that contradict the model's types
            raise BackendError(f"the TVM model rejected the inputs: {str(e).strip().splitlines()[-1]}") from e
        return {name: out[i] if name in keep else out[i].numpy() for i, name in enumerate(self.output_names)}

    def profile(self, inputs: Mapping[str, Any], reps: int = 3, *,
                function: str | None = None) -> dict[str, float]:
        """Seconds per run spent in each kernel (and VM builtin) on `inputs`, summed over its calls."""
        totals, _ = self._instrumented(inputs, reps, function)
        return {k: v / reps for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}

    def call_counts(self, inputs: Mapping[str, Any], *, function: str | None = None) -> dict[str, int]:
        """How many times one run on `inputs` calls each kernel and VM builtin ("vm.builtin.*"): the VM's
        per-call overhead, in numbers that do not depend on the machine's load."""
        _, counts = self._instrumented(inputs, 1, function)
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def _instrumented(self, inputs: Mapping[str, Any], reps: int,
                      function: str | None) -> tuple[dict[str, float], dict[str, int]]:
        totals: dict[str, float] = {}
        counts: dict[str, int] = {}
        started: list[float] = []

        def instrument(_func: Any, symbol: str, before: bool, _ret: Any, *_args: Any) -> int:
            if before:
                started.append(time.perf_counter())
                counts[symbol] = counts.get(symbol, 0) + 1
            else:
                totals[symbol] = totals.get(symbol, 0.0) + time.perf_counter() - started.pop()
            return 0  # VMInstrumentReturnKind.NO_OP

        self.run(inputs, function=function)
        self.vm().set_instrument(tvm.runtime.convert(instrument))
        try:
            for _ in range(reps):
                self.run(inputs, function=function)
        finally:
            self.vm().set_instrument(None)
        return totals, {k: v // reps for k, v in counts.items()}

    def save(self, path: str | Path) -> Path:
        """Write the shared library, with params="args" its weights beside it (weights_path), and last the
        manifest that lists both with their hashes (pseudoformer/base/manifest.py): one set (atomic_set), which
        `run` checks before it loads the library."""
        path = Path(path)
        args = self.meta["param_mode"] == "args"
        # TVM's objects go to a directory of the set, not to its own in /tmp: removed with the set however
        # the write ends (a full disk, a signal, a kill: atomic_write's sweep), and on the output's disk.
        parts = [Part("so", MAIN.place, ".so"), *([Part("weights", weights_path)] if args else []),
                 Part("manifest", manifest_path), Part("objects", lambda t: t.with_name(t.name + ".objects"),
                                                       scratch=True)]
        try:
            with atomic_set(path, parts) as tmps:
                export_in_child(self.executable, tmps["so"], tmps["objects"], path)
                target = check_output(path)
                files = {target.name: tmps["so"]}
                if args:
                    write_safetensors(dict(stream(self.weights, self.meta["params"])), tmps["weights"])
                    files[weights_path(target).name] = tmps["weights"]
                write_manifest(tmps["manifest"], files, tvm.__version__, self.meta)
        except OutputError as e:
            raise BackendError(e.message) from None
        return path


def _quiet_stderr() -> contextlib.AbstractContextManager[None]:
    """Silence TVM 0.27's C++ "Scope Saving/Loaded" warnings, printed for every VM function saved or
    loaded; errors still arrive as Python exceptions."""
    return quiet_native_stderr()


def compile_graph(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions | None = None, *,
                  schedule: bool = True, verify: bool = False, specialise: Mapping[str, int] | None = None,
                  **fields: Any) -> TVMModel:
    """Lower `graph`, compile it for options.target ("llvm" or "cuda"), and return a runnable TVMModel.
    `options` (a CompileOptions; its opt_level 0 by default: the graph as given), or its fields as keywords.

    tvm_params="args" (the default) passes the weights at run time and saves them beside the
    library; "bind" puts them into the library as constants, which for GPT-2 small doubles the
    compile time and makes saving five times slower, for no gain at run time (benchmarks/TVM.md).
    schedule=False leaves TVM's default code, for comparison. dtype="float16" computes in half
    precision (passes/float16.py), the weights stored as float16. int8_activations: the 4-bit products round
    their activations to int8 per block and multiply in integers (VNNI where the CPU has it), as onnxruntime's
    accuracy level 4 does: faster, no longer exact (nbits_int8.py); a CPU option. specialise (IR dim name ->
    size, e.g. {"batch": 1, "seq": 1} for a decode step) adds a second VM function, `SPECIALISED`, with those
    sizes fixed: its shapes are constants, not built at run time (TVMModel.run picks it where the inputs fit).
    metadata: the model's, kept in the library.
    """
    options = (options or CompileOptions(backend="tvm")).with_fields(fields)
    target, params, metadata = options.target, options.tvm_params or "args", options.metadata
    if params not in PARAM_MODES:
        raise BackendError(f"params must be one of {', '.join(PARAM_MODES)}, got {params!r}")
    if specialise and params == "bind":
        raise BackendError("specialise takes its weights as arguments (params='args'), as main does")
    tgt = make_target(target)
    t0 = time.perf_counter()
    missing = [p.attrs["name"] for p in graph.params() if p.attrs["name"] not in weights]
    if missing:
        raise BackendError(f"no weights given for parameters: {', '.join(missing)}")
    _check_shapes(graph, weights)
    graph, folded = prepare(graph, weights, options, verify=verify, target_kind=tgt.kind.name)
    t_prepared = time.perf_counter()
    int8 = options.int8_activations and tgt.kind.name == "llvm"
    lowered = to_relax(graph, target_kind=tgt.kind.name, int8=int8)
    if int8:
        folded = {**folded, **int8_weights(graph, split_params(graph), folded)}
    mod = lowered.mod
    names = [n for n, _ in lowered.params]
    if schedule and tgt.kind.name == "llvm":
        mod, names, folded = pack_matmul_weights(mod, names, folded)
    meta = _meta(lowered, target, params, names, metadata)
    # gather wraps an index out of range: the VM checks these inputs first (TVMModel.run)
    meta["index_bounds"] = token_bounds(graph)
    if specialise:
        mod = with_specialised(mod, specialise)
        meta["specialised"] = dict(specialise)
    mod = _with_meta(mod, meta)
    if params == "bind":
        main = mod["main"]
        n_in = len(lowered.inputs)
        values = dict(stream(folded, names))
        binding = {var: values[name] for var, name in zip(list(main.params)[n_in:], names, strict=True)}
        mod = relax.transform.BindParams("main", binding)(mod)
    t1 = time.perf_counter()
    # LLVM's codegen logs "Unknown pragma pragma_scope" (TVM's own topi scatter kernels open a seq_scope, which
    # the CPU codegen ignores: harmless) straight to fd 2, once per kernel; a failure still raises
    with _quiet_stderr():
        with tgt:  # tvm.compile's two stages, timed apart: the Relax passes, then TIR's and LLVM's codegen
            mod = pipeline(tgt, schedule=schedule)(mod)
        t_relax = time.perf_counter()
        ex = relax.build(mod, target=tgt, relax_pipeline=None)
    t2 = time.perf_counter()
    kept = {n: folded[n] for n in names} if params == "args" else {}
    timings = {"prepare_s": t_prepared - t0, "lower_s": t1 - t0, "compile_s": t2 - t1,
               "relax_passes_s": t_relax - t1, "codegen_s": t2 - t_relax}
    return TVMModel(ex, meta, kept, timings=timings)


def prepare(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions | None = None, *,
            verify: bool = False, target_kind: str = "llvm") -> tuple[Graph, dict[str, np.ndarray]]:
    """`graph` optimised at options.opt_level (0, the default: as given), quantized if asked, and as this backend
    lowers it for `target_kind` ("llvm", "cuda"), and the weights it then takes (4-bit weights in the nibble order
    of our kernels, nbits.py): one run of the passes backends/pipeline.py assembles. `verify` checks the IR after
    each."""
    options = options or CompileOptions(backend="tvm")
    if options.dtype not in ("float32", "float16"):
        raise BackendError(f"dtype must be 'float32' or 'float16', got {options.dtype!r}")
    # quantizing: each matrix when its codes are first loaded (passes/quantized_params.py), so that the
    # weights TVM takes are made a tensor at a time (weight_values.stream), never all in float32 at once
    options = replace(options, lazy_weights=options.quantize is not None)
    given = {k: v if isinstance(v, LazyTensor) else np.asarray(v) for k, v in weights.items()}
    cpu = target_kind == "llvm"
    graph, folded = run(graph, compile_pipeline(options, "tvm"), weights=given, options=options,
                        accepts=lambda n: accepts(n) and (cpu or n.op not in CPU_ONLY), check=verify)
    return graph, split_weights(graph, folded)


def _check_shapes(graph: Graph, weights: Mapping[str, np.ndarray]) -> None:
    for p in graph.params():
        name, t = p.attrs["name"], p.type
        shape = tuple(np.shape(weights[name]))
        if shape != tuple(t.shape):
            raise BackendError(f"parameter {name} has shape {shape}, the graph wants {t}")


def _meta(lowered: Lowered, target: str, params: str, names: list[str],
          extra: Mapping[str, str] | None) -> dict[str, Any]:
    def entry(name: str, t: TensorType) -> list[Any]:
        return [name, t.dtype.value, t.rank]

    return {
        "format": 1,
        "target": target,
        "param_mode": params,
        "inputs": [entry(n, t) for n, t in lowered.inputs],
        "input_dims": [list(t.shape) for _, t in lowered.inputs],
        "outputs": [n for n, _ in lowered.outputs],
        "params": names if params == "args" else [],
        **{str(k): str(v) for k, v in (extra or {}).items()},
    }


def _with_meta(mod: Any, meta: dict[str, Any]) -> Any:
    """The module plus a function returning `meta` as JSON, so that the .so describes itself."""
    bb = relax.BlockBuilder(mod)
    with bb.function(META, []):
        bb.emit_func_output(tvm.ir.StringImm(json.dumps(meta, sort_keys=True)))
    return bb.get()


def load_model(path: str | Path) -> TVMModel:
    """Load a library written by TVMModel.save (in this process or any other), after its manifest shows
    that the library and its weights are the files pseudoformer wrote (manifest.verified_copy): loading a
    library runs its native code, so nothing is loaded before that check."""
    path = Path(path)
    if not path.is_file():
        raise BackendError(f"no compiled model at {path}")
    try:
        with verified_copy(path, tvm.__version__) as (copy, doc):
            weights: dict[str, np.ndarray] = {}
            if doc.get("param_mode") == "args":
                wpath = weights_path(copy.with_name(Path(os.path.realpath(path)).name))
                real = weights_path(Path(os.path.realpath(path)))
                if not real.is_file():
                    raise BackendError(f"{path} takes its weights from {real}, which is missing")
                with open(wpath, "wb") as out:
                    check_file(path, doc, real.name, real, out)
                try:
                    weights = read_safetensors(wpath)
                except WeightsError as e:
                    raise BackendError(str(e)) from None
            try:
                with _quiet_stderr():
                    lib = tvm.runtime.load_module(str(copy))
            except Exception as e:
                raise BackendError(f"{path} is not a TVM library this TVM can load: {e}") from e
    except UsageError as e:
        raise BackendError(e.message) from None
    try:
        meta = json.loads(str(relax.VirtualMachine(lib, tvm.cpu())[META]()))
    except Exception as e:
        raise BackendError(f"{path} was not written by pseudoformer's TVM backend ({e})") from e
    return TVMModel(lib, meta, weights)
