#!/usr/bin/env python3
"""CPU benchmark: pseudoformer's GPT-2 / BERT on ONNX Runtime against torch.onnx exports and eager PyTorch.

For each model (random HuggingFace weights, fixed seed) it builds, in one process on one machine:

  ours                      `pseudoformer.compile(models/<m>.alg, weights=<checkpoint>)` on ORT CPU
  torch-legacy[attn]        torch.onnx.export(dynamo=False) of the same HF model on ORT CPU
  torch-dynamo[attn]        torch.onnx.export(dynamo=True)
  ...+ortopt                onnxruntime.transformers.optimizer.optimize_model applied to an export
  eager                     PyTorch eager under torch.inference_mode()

and times them on batch 1 at each sequence length with interleaved repetitions (round-robin over the
variants, after warm-up), reporting medians. It also times compilation (ours: compile + save; torch:
export + save), counts the ONNX ops of every graph, checks every variant's logits against eager, and
checks the project's targets. `--profile` adds ORT's per-op-type time for ours and the best export.

    python benchmarks/bench_cpu.py                      # full run: gpt2 + bert, seq 128 and 512
    python benchmarks/bench_cpu.py --quick              # tiny configs, smoke test
    python benchmarks/bench_cpu.py --models gpt2 --seqs 128 --reps 20 --profile --json out.json
    python benchmarks/bench_cpu.py --compile-only --compile-reps 5 --exporters legacy   # compile time, by stage
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import io
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# Targets of the project (docs: benchmarks/README.md).
TARGET_VS_TORCH_ORT = 0.95  # ours / best torch-export ORT, at every measured sequence length
TARGET_VS_EAGER = 2.6  # eager / ours
TARGET_COMPILE = 0.1  # ours compile+save / torch.onnx.export
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"}


@dataclass(frozen=True)
class Spec:
    """One model: how to build its HF twin, and what its compiled graph must contain."""

    name: str
    alg: str
    ort_type: str  # model_type for onnxruntime.transformers.optimizer
    full: dict[str, Any]
    quick: dict[str, Any]
    causal: bool

    def config(self, quick: bool) -> dict[str, Any]:
        return self.quick if quick else self.full

    def layers(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_layer", c.get("num_hidden_layers", 12)))

    def heads(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_head", c.get("num_attention_heads", 12)))

    def hidden(self, quick: bool) -> int:
        c = self.config(quick)
        return int(c.get("n_embd", c.get("hidden_size", 768)))

    def vocab(self, quick: bool) -> int:
        return int(self.config(quick).get("vocab_size", 50257 if self.name == "gpt2" else 30522))

    def layer_norms(self, quick: bool) -> int:
        # GPT-2: two per layer and the final one; BERT: two per layer, the embedding's and the MLM head's.
        return 2 * self.layers(quick) + (1 if self.name == "gpt2" else 2)


SPECS = {
    "gpt2": Spec(
        "gpt2", "gpt2.alg", "gpt2",
        full={},  # GPT2Config() is GPT-2 small
        # bos/eos default to 50256, outside the tiny vocabulary, which transformers warns about.
        quick=dict(n_embd=64, n_head=4, n_layer=2, n_positions=128, vocab_size=512, bos_token_id=0, eos_token_id=0),
        causal=True,
    ),
    "bert": Spec(
        "bert", "bert.alg", "bert",
        full={},  # BertConfig() is BERT-base
        quick=dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                   vocab_size=512, max_position_embeddings=128),
        causal=False,
    ),
}


# ----------------------------------------------------------------------------------------------- utilities


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The exporters print progress and warnings by the screenful; keep the bench's own output readable."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def op_histogram(path: Path) -> Counter[str]:
    """Op types in a graph, counting nodes inside subgraphs and local functions too."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    hist: Counter[str] = Counter()

    def visit(nodes: Sequence[Any]) -> None:
        for n in nodes:
            hist[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"] += 1
            for a in n.attribute:
                if a.g is not None and len(a.g.node):
                    visit(a.g.node)
                for g in a.graphs:
                    visit(g.node)

    visit(model.graph.node)
    for f in model.functions:
        visit(f.node)
    return hist


def bare(op: str) -> str:
    return op.rsplit(".", 1)[-1]


def machine_facts() -> dict[str, Any]:
    import onnxruntime
    import torch
    import transformers

    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    flags = ""
    with contextlib.suppress(OSError):
        flags = Path("/proc/cpuinfo").read_text()
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "avx512f": "avx512f" in flags,
        "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnxruntime": onnxruntime.__version__,
        "pseudoformer_commit": commit,
    }


# --------------------------------------------------------------------------------------------- the models


def build_hf(spec: Spec, quick: bool, seed: int, attn: str | None = None) -> Any:
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    kw = dict(spec.config(quick))
    if attn is not None:
        kw["attn_implementation"] = attn
    if spec.name == "gpt2":
        return GPT2LMHeadModel(GPT2Config(use_cache=False, **kw)).eval()
    return BertForMaskedLM(BertConfig(**kw)).eval()


def load_hf(spec: Spec, ckpt: Path, attn: str) -> Any:
    """The checkpoint again with another attention implementation: the same weights, bit for bit."""
    from transformers import BertForMaskedLM, GPT2LMHeadModel

    cls = GPT2LMHeadModel if spec.name == "gpt2" else BertForMaskedLM
    with quiet():
        return cls.from_pretrained(ckpt, attn_implementation=attn).eval()


def logits_module(hf: Any, *, explicit_mask: bool) -> Any:
    import torch

    class Logits(torch.nn.Module):
        """token ids → logits, the one input and output every variant shares."""

        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            if explicit_mask:
                # An all-ones mask is HF's default meaning; passing it skips transformers 5's packed-
                # sequence detection, whose aten::diff the legacy exporter cannot translate.
                return self.hf(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
            return self.hf(input_ids=input_ids).logits

    # The legacy exporter restores the module's training flag afterwards: an un-eval'd wrapper would
    # leave the HF model in training mode (dropout on) for the eager baseline.
    return Logits().eval()


def compile_ours(spec: Spec, ckpt: Path, out: Path, opt_level: int | None) -> tuple[float, str]:
    """pseudoformer.compile + save, timed in-process. Returns (seconds, the opt level it ran at)."""
    import pseudoformer

    alg = ROOT / "models" / spec.alg
    source: str | Path = alg if alg.is_file() else spec.name  # installed package without the checkout
    kwargs: dict[str, Any] = {"weights": ckpt}
    # Checked, not assumed: the script must work with a pseudoformer from before opt_level existed.
    param = inspect.signature(pseudoformer.compile).parameters.get("opt_level")
    if param is None:
        used = "none (this pseudoformer.compile takes no opt_level)"
    elif opt_level is None:
        used = f"{param.default} (default)"
    else:
        kwargs["opt_level"] = opt_level
        used = str(opt_level)
    t = time.perf_counter()
    pseudoformer.compile(source, **kwargs).save(out)
    return time.perf_counter() - t, used


def torch_export(spec: Spec, hf: Any, exporter: str, out: Path, opset: int, trace: Any) -> float:
    """torch.onnx.export with batch and sequence dynamic (as ours is), timed including the save."""
    import torch

    dynamo = exporter == "dynamo"
    module = logits_module(hf, explicit_mask=not dynamo and spec.name == "gpt2")
    kwargs: dict[str, Any]
    if dynamo:
        kwargs = dict(dynamic_shapes={"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", min=2)}})
    else:
        kwargs = dict(dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    t = time.perf_counter()
    with quiet(), torch.no_grad():
        torch.onnx.export(module, (trace,), str(out), input_names=["input_ids"], output_names=["logits"],
                          opset_version=opset, dynamo=dynamo, **kwargs)
    return time.perf_counter() - t


def ort_optimize(spec: Spec, src: Path, out: Path, quick: bool) -> tuple[float, dict[str, int], str]:
    from onnxruntime.transformers.optimizer import optimize_model

    t = time.perf_counter()
    with quiet():
        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        try:
            opt = optimize_model(str(src), model_type=spec.ort_type, num_heads=spec.heads(quick),
                                 hidden_size=spec.hidden(quick))
            model_type = spec.ort_type
        except IndexError:
            # ORT's GPT-2 post-processing assumes every Gemm has a bias, and the dynamo export's tied
            # lm_head has none; the "bert" optimizer runs the same fusions without that step.
            opt = optimize_model(str(src), model_type="bert", num_heads=spec.heads(quick),
                                 hidden_size=spec.hidden(quick))
            model_type = "bert"
        big = opt.model.ByteSize() > 2**31 - 2**26
        opt.save_model_to_file(str(out), use_external_data_format=big)
    fused = {k: int(v) for k, v in (opt.get_fused_operator_statistics() or {}).items() if v}
    return time.perf_counter() - t, fused, model_type


def ort_session(path: Path, threads: int, profile_prefix: Path | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def ort_runner(sess: Any) -> Callable[[np.ndarray], np.ndarray]:
    name = sess.get_inputs()[0].name
    out = sess.get_outputs()[0].name
    return lambda x: sess.run([out], {name: x})[0]


def eager_runner(hf: Any) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return hf(input_ids=torch.from_numpy(x)).logits.numpy()

    return run


# ------------------------------------------------------------------------------------------- measurement


def measure(runners: dict[str, Callable[[np.ndarray], np.ndarray]], x: np.ndarray, warmup: int, reps: int,
            gap_s: float) -> dict[str, list[float]]:
    """Milliseconds per call, interleaved: each repetition runs every variant once, in a rotating order.

    Interleaving spreads a shared machine's load changes over all variants instead of one; the
    rotation keeps any variant from always following the same neighbour; the gap lets the last
    variant's spinning worker threads (ORT's and OpenMP's) go to sleep before the next one starts.
    """
    names = list(runners)
    for _ in range(warmup):
        for n in names:
            runners[n](x)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            time.sleep(gap_s)
            t = time.perf_counter()
            runners[n](x)
            times[n].append((time.perf_counter() - t) * 1e3)
    return times


def profile_ops(path: Path, x: np.ndarray, threads: int, runs: int, prefix: Path) -> dict[str, Any]:
    """ORT's own per-node timings, summed per op type per run (the first, warm-up run left out)."""
    sess = ort_session(path, threads, prefix)
    run = ort_runner(sess)
    for _ in range(runs + 1):
        run(x)
    trace_path = Path(sess.end_profiling())
    events = json.loads(trace_path.read_text())
    model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    cutoff = model_runs[0]["ts"] + model_runs[0]["dur"] if model_runs else 0
    per_op: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time") and e["ts"] >= cutoff:
            op = e.get("args", {}).get("op_name", "?")
            per_op[op] += e["dur"]
            nodes[op] += 1
    n = max(1, len(model_runs) - 1)
    total = sum(per_op.values()) / n / 1e3
    run_ms = statistics.median(e["dur"] for e in model_runs[1:]) / 1e3 if len(model_runs) > 1 else None
    top = [{"op": op, "ms": us / n / 1e3, "share": us / n / 1e3 / total if total else 0.0,
            "nodes": nodes[op] // n} for op, us in per_op.most_common()]
    return {"trace": str(trace_path), "runs": n, "kernel_ms": total, "run_ms": run_ms, "ops": top}


# ------------------------------------------------------------------------------------ compile time by stage

# Where ours spends its compile time: (module, attribute, stage). Each is wrapped while ours compiles
# and its exclusive time (without the wrapped calls inside it) is added to its stage; what no wrapper
# covers is "other". Attributes a pseudoformer does not have are skipped, so the same table can be
# taken of an older commit (ours before the fast path: to_onnx, _fill_tensor, _byte_size).
STAGES = [
    ("pseudoformer.model", "load_program", "parse .alg"),
    ("pseudoformer.model", "elaborate", "elaborate"),
    ("pseudoformer.weights.hf_checkpoint", "read_hf_tensors", "read safetensors"),
    ("pseudoformer.weights.loader", "fit", "fit (transposes, copies)"),
    ("pseudoformer.model", "model_metadata", "metadata (source sha256)"),
    ("pseudoformer.optimize", "optimize", "passes (-O2)"),
    ("pseudoformer.backends.onnx", "to_onnx", "lower to ONNX"),
    ("pseudoformer.backends.onnx.lower", "lower_model", "lower to ONNX"),
    ("pseudoformer.backends.onnx.lower", "_fill_tensor", "initializers into protobuf"),
    ("pseudoformer.backends.onnx.lower", "check_structure", "onnx.checker"),
    ("onnx.checker", "check_model", "onnx.checker"),
    ("pseudoformer.backends.onnx.save", "_byte_size", "ByteSize (serialises)"),
    ("onnx", "save_model", "serialise + write"),
    ("pseudoformer.backends.onnx.save", "_write_inline", "serialise + write"),
    ("os", "fsync", "fsync"),
]


class StageClock:
    """Exclusive wall time per stage of wrapped functions (time in nested wrapped calls is theirs)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []

    def wrap(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._inner.append(0.0)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                inner = self._inner.pop()
                self.seconds[stage] = self.seconds.get(stage, 0.0) + dt - inner
                if self._inner:
                    self._inner[-1] += dt

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import importlib

        undo: list[Callable[[], None]] = []
        try:
            for module_name, attr, stage in STAGES:
                try:
                    module = importlib.import_module(module_name)
                except ImportError:
                    continue
                if hasattr(module, attr):
                    old = getattr(module, attr)
                    setattr(module, attr, self.wrap(old, stage))
                    undo.append(lambda m=module, a=attr, o=old: setattr(m, a, o))
            with contextlib.suppress(ImportError):  # the HF name mappings, called through this table
                from pseudoformer.weights import hf_checkpoint

                for key, old in list(hf_checkpoint.MAPPERS.items()):
                    hf_checkpoint.MAPPERS[key] = self.wrap(old, "map HF names")
                    undo.append(lambda k=key, o=old: hf_checkpoint.MAPPERS.__setitem__(k, o))
            yield
        finally:
            for u in reversed(undo):
                u()


def compile_rounds(spec: Spec, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """--compile-only: ours (compile with weights + save, by stage) and each torch export, interleaved.

    Each measurement runs in a process of its own (unless --compile-in-process), after imports and an
    untimed compile or export of the tiny model there: in one process, what ran before changes the
    next tool's time, since both spend much of it faulting in fresh memory. (GPT-2's legacy export
    took 7 s after the old pseudoformer compile had left 1 GB of freed heap behind, 10 s after the
    new one, and 12 s with neither before it.)
    """
    d = work / spec.name
    d.mkdir(exist_ok=True)
    log(f"{spec.name}: building the HF model and its checkpoint")
    hf = build_hf(spec, args.quick, args.seed)
    ckpt = d / "hf"
    with quiet():
        hf.save_pretrained(ckpt)
    tiny = work / "warmup" / spec.name
    if not tiny.exists():
        with quiet():
            build_hf(spec, True, args.seed).save_pretrained(tiny)
    import torch

    trace = torch.randint(0, spec.vocab(args.quick), (2, 16), generator=torch.Generator().manual_seed(1))
    rounds: list[dict[str, Any]] = []
    for rep in range(args.compile_reps):
        row: dict[str, Any] = {}
        if args.compile_in_process:
            clock = StageClock()
            with clock.installed():
                row["ours"], _ = compile_ours(spec, ckpt, d / "ours.onnx", args.opt_level)
            row["stages"] = dict(clock.seconds, other=row["ours"] - sum(clock.seconds.values()))
            for ex in args.exporters:
                row[f"torch-{ex}"] = torch_export(spec, hf, ex, d / f"{ex}.onnx", args.opset, trace)
        else:
            job = {"model": spec.name, "ckpt": str(ckpt), "tiny": str(tiny), "dir": str(d), "quick": args.quick,
                   "opt_level": args.opt_level, "opset": args.opset, "threads": args.threads}
            ours = _in_child(dict(job, tool="ours"))
            row["ours"], row["stages"] = ours["seconds"], ours["stages"]
            for ex in args.exporters:
                row[f"torch-{ex}"] = _in_child(dict(job, tool=ex))["seconds"]
        log(f"{spec.name} round {rep + 1}/{args.compile_reps}: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in row.items() if k != "stages"))
        rounds.append(row)
    (d / "ours.onnx").unlink(missing_ok=True)
    return {"model": spec.name, "weights_bytes": (ckpt / "model.safetensors").stat().st_size,
            "fresh_processes": not args.compile_in_process, "rounds": rounds}


def _in_child(job: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--compile-child", json.dumps(job)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{job['tool']} compile of {job['model']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compile_child(job: dict[str, Any]) -> dict[str, Any]:
    """One timed compile (ours) or export (torch), in this fresh process, after an untimed tiny one."""
    spec = SPECS[job["model"]]
    d = Path(job["dir"])
    if job["tool"] == "ours":
        compile_ours(spec, Path(job["tiny"]), d / "warmup-ours.onnx", job["opt_level"])
        clock = StageClock()
        with clock.installed():
            seconds, _ = compile_ours(spec, Path(job["ckpt"]), d / "ours.onnx", job["opt_level"])
        return {"seconds": seconds, "stages": dict(clock.seconds, other=seconds - sum(clock.seconds.values()))}
    import torch

    torch.set_num_threads(job["threads"])
    trace = torch.randint(0, spec.vocab(job["quick"]), (2, 16), generator=torch.Generator().manual_seed(1))
    small = torch.randint(0, spec.vocab(True), (2, 8), generator=torch.Generator().manual_seed(1))
    torch_export(spec, load_hf(spec, Path(job["tiny"]), "eager"), job["tool"], d / f"warmup-{job['tool']}.onnx",
                 job["opset"], small)
    hf = load_hf(spec, Path(job["ckpt"]), "eager")  # untimed, as in the in-process rounds
    return {"seconds": torch_export(spec, hf, job["tool"], d / f"{job['tool']}.onnx", job["opset"], trace)}


def render_compile(results: list[dict[str, Any]], args: argparse.Namespace, facts: dict[str, Any]) -> str:
    out = [f"Machine: {facts['cpu']}, {facts['logical_cpus']} logical CPUs; torch {facts['torch']}; pseudoformer "
           f"{facts['pseudoformer_commit'] or '?'}; load average at start "
           f"{', '.join(f'{v:.2f}' for v in facts['loadavg_at_start'] or [])}. Medians (min) of "
           f"{args.compile_reps} interleaved rounds, each tool "
           f"{'in this process' if args.compile_in_process else 'in a fresh process per measurement'}, after an "
           "untimed warm-up of it; ours = compile with weights + save, torch = torch.onnx.export incl. save.", ""]
    for r in results:
        rounds = r["rounds"]
        stages = list(dict.fromkeys(k for row in rounds for k in row["stages"]))
        out += [f"{r['model']} ({r['weights_bytes'] / 1e6:.0f} MB of weights):", "",
                "| stage | median s | min s |", "|---|---:|---:|"]
        for st in stages:
            xs = [row["stages"].get(st, 0.0) for row in rounds]
            out.append(f"| {st} | {median(xs):.3f} | {min(xs):.3f} |")
        for name in ["ours"] + [f"torch-{ex}" for ex in args.exporters]:
            xs = [row[name] for row in rounds]
            out.append(f"| **{name} total** | {median(xs):.3f} | {min(xs):.3f} |")
        for ex in args.exporters:
            paired = [row["ours"] / row[f"torch-{ex}"] for row in rounds]
            q = median([row["ours"] for row in rounds]) / median([row[f"torch-{ex}"] for row in rounds])
            out.append(f"| ours / torch-{ex} (of medians; median of per-round ratios) | {q:.3f} | "
                       f"{median(paired):.3f} |")
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ driver


@dataclass
class ModelResult:
    name: str
    compile_s: dict[str, float] = field(default_factory=dict)
    opt_level: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    fused: dict[str, dict[str, int]] = field(default_factory=dict)
    ortopt_type: dict[str, str] = field(default_factory=dict)  # the optimizer's model_type that worked
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    timings: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    max_abs_diff: dict[int, dict[str, float]] = field(default_factory=dict)
    profile: dict[int, dict[str, Any]] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)


def warm_up_tools(work: Path, args: argparse.Namespace, exporters: list[str]) -> None:
    """One untimed tiny compile and export of each kind, so imports and first-call setup are not timed."""
    spec = SPECS["gpt2"]
    d = work / "warmup"
    d.mkdir(exist_ok=True)
    hf = build_hf(spec, True, args.seed)
    with quiet():
        hf.save_pretrained(d / "ckpt")
    compile_ours(spec, d / "ckpt", d / "ours.onnx", args.opt_level)
    import torch

    trace = torch.zeros((2, 8), dtype=torch.int64)
    for ex in exporters:
        with contextlib.suppress(Exception):  # a failing exporter fails again, timed, where it is reported
            torch_export(spec, hf, ex, d / f"{ex}.onnx", args.opset, trace)


def bench_model(spec: Spec, args: argparse.Namespace, work: Path) -> ModelResult:
    import torch

    res = ModelResult(spec.name)
    d = work / spec.name
    d.mkdir(exist_ok=True)
    quick = args.quick

    log(f"{spec.name}: building the HF model and its checkpoint")
    hf = build_hf(spec, quick, args.seed)
    ckpt = d / "hf"
    with quiet():
        hf.save_pretrained(ckpt)

    log(f"{spec.name}: pseudoformer compile")
    ours = d / "ours.onnx"
    res.compile_s["ours"], res.opt_level = compile_ours(spec, ckpt, ours, args.opt_level)
    paths: dict[str, Path] = {"ours": ours}

    # Batch 2 so the exporters cannot specialise the batch axis to 1; 16 tokens fits every config.
    trace = torch.randint(0, spec.vocab(quick), (2, 16), generator=torch.Generator().manual_seed(1))
    for attn in args.attn:
        model = hf if attn == hf.config._attn_implementation else load_hf(spec, ckpt, attn)
        for ex in args.exporters:
            name = f"torch-{ex}[{attn}]"
            out = d / f"{ex}-{attn}.onnx"
            log(f"{spec.name}: {name} export")
            try:
                res.compile_s[name] = torch_export(spec, model, ex, out, args.opset, trace)
                paths[name] = out
            except Exception as e:  # every exporter failure is a result to report, not a crash
                res.errors[name] = first_line(e)
                log(f"{spec.name}: {name} failed: {res.errors[name]}")
                continue
            if args.ort_optimizer:
                opt_name = f"{name}+ortopt"
                log(f"{spec.name}: {opt_name}")
                try:
                    res.compile_s[opt_name], res.fused[opt_name], res.ortopt_type[opt_name] = ort_optimize(
                        spec, out, d / f"{ex}-{attn}-ortopt.onnx", quick)
                    paths[opt_name] = d / f"{ex}-{attn}-ortopt.onnx"
                except Exception as e:
                    res.errors[opt_name] = first_line(e)
                    log(f"{spec.name}: {opt_name} failed: {res.errors[opt_name]}")
        if model is not hf:
            del model

    for name, p in paths.items():
        hist = op_histogram(p)
        res.ops[name] = dict(hist.most_common())
    ours_ops = Counter(res.ops["ours"])
    res.structure = {
        "layers": spec.layers(quick),
        "attention_ops": sum(v for k, v in ours_ops.items() if bare(k) in ATTENTION_OPS),
        "softmax_outside_attention": sum(v for k, v in ours_ops.items() if bare(k) == "Softmax"),
        "layer_norm_ops": ours_ops.get("LayerNormalization", 0),
        "layer_norms_in_model": spec.layer_norms(quick),
    }

    log(f"{spec.name}: creating {len(paths)} ORT sessions")
    sessions = {name: ort_session(p, args.threads) for name, p in paths.items()}
    runners = {name: ort_runner(s) for name, s in sessions.items()}
    runners["eager"] = eager_runner(hf)

    rng = np.random.default_rng(args.seed)
    for seq in args.seqs:
        x = rng.integers(0, spec.vocab(quick), size=(1, seq), dtype=np.int64)
        ref = runners["eager"](x)
        diffs = {}
        for name, run in runners.items():
            try:
                diffs[name] = float(np.abs(run(x) - ref).max())
            except Exception as e:  # e.g. an export that baked in the traced length
                res.errors[f"{name}@{seq}"] = first_line(e)
        res.max_abs_diff[seq] = diffs
        live = {n: r for n, r in runners.items() if n in diffs}
        log(f"{spec.name} seq {seq}: {args.warmup} warm-up + {args.reps} interleaved reps of {len(live)} variants")
        res.timings[seq] = measure(live, x, args.warmup, args.reps, args.gap_ms / 1e3)
        if args.profile:
            best = best_torch(res, seq)
            for name in ["ours"] + ([best] if best else []):
                log(f"{spec.name} seq {seq}: profiling {name}")
                prefix = d / f"profile-{name.replace('[', '-').replace(']', '').replace('+', '-')}-{seq}"
                res.profile.setdefault(seq, {})[name] = profile_ops(paths[name], x, args.threads,
                                                                    args.profile_reps, prefix)
    del sessions, runners, hf
    gc.collect()
    return res


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def best_torch(res: ModelResult, seq: int) -> str | None:
    cands = {n: median(t) for n, t in res.timings.get(seq, {}).items() if n.startswith("torch-")
             and res.max_abs_diff[seq].get(n, np.inf) <= 1e-2}
    return min(cands, key=lambda n: cands[n]) if cands else None


# --------------------------------------------------------------------------------------------- reporting


def render(results: list[ModelResult], args: argparse.Namespace, facts: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    w(f"Machine: {facts['cpu']}, {facts['logical_cpus']} logical CPUs, threads={args.threads}; "
      f"torch {facts['torch']}, transformers {facts['transformers']}, onnxruntime {facts['onnxruntime']}; "
      f"pseudoformer {facts['pseudoformer_commit'] or '?'}; load average at start "
      f"{', '.join(f'{v:.2f}' for v in facts['loadavg_at_start'] or [])}.")
    w(f"Batch 1, medians of {args.reps} interleaved repetitions after {args.warmup} warm-up"
      f"{' (--quick: tiny configs)' if args.quick else ''}. "
      "'vs best torch-ORT' = time / the fastest correct torch.onnx export on ORT (lower is better); "
      "'vs eager' = eager time / time (higher is better).")
    w("")
    w("| model | seq | variant | median ms | min ms | vs best torch-ORT | vs eager | max abs Δ vs eager |")
    w("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        for seq, times in r.timings.items():
            best = best_torch(r, seq)
            best_ms = median(times[best]) if best else None
            eager_ms = median(times["eager"])
            for name, t in sorted(times.items(), key=lambda kv: median(kv[1])):
                m = median(t)
                label = f"**{name}**" if name == "ours" else (f"{name} (best)" if name == best else name)
                vs_best = f"{m / best_ms:.2f}×" if best_ms else "—"
                w(f"| {r.name} | {seq} | {label} | {m:.1f} | {min(t):.1f} | {vs_best} | {eager_ms / m:.2f}× | "
                  f"{r.max_abs_diff[seq].get(name, float('nan')):.1e} |")
    w("")
    w("Compile / export time (seconds, in-process, after an untimed warm-up of each tool; ours = compile "
      "with weights + save; torch = torch.onnx.export incl. save; +ortopt = optimize_model + save on top):")
    w("")
    w("| model | ours opt level | variant | seconds | ours / this |")
    w("|---|---|---|---:|---:|")
    for r in results:
        ours_s = r.compile_s["ours"]
        for name, s in r.compile_s.items():
            ratio = f"{ours_s / s:.3f}" if name != "ours" and "+ortopt" not in name else ""
            w(f"| {r.name} | {r.opt_level} | {name} | {s:.2f} | {ratio} |")
    w("")
    w("ONNX ops per graph (as saved, before ORT's own graph optimisations):")
    w("")
    w("| model | variant | total | op types |")
    w("|---|---|---:|---|")
    for r in results:
        for name, hist in r.ops.items():
            w(f"| {r.name} | {name} | {sum(hist.values())} | {', '.join(f'{k} {v}' for k, v in hist.items())} |")
    fused = [(r, n, f) for r in results for n, f in r.fused.items()]
    if fused:
        w("")
        w("onnxruntime.transformers.optimizer fusions:")
        w("")
        for r, n, f in fused:
            how = f" (model_type={r.ortopt_type[n]}: the {SPECS[r.name].ort_type} optimizer failed)" \
                if r.ortopt_type[n] != SPECS[r.name].ort_type else ""
            w(f"- {r.name} {n}{how}: {', '.join(f'{k} {v}' for k, v in f.items()) or 'none'}")
    errors = [(r.name, n, e) for r in results for n, e in r.errors.items()]
    if errors:
        w("")
        w("Failures:")
        w("")
        for m, n, e in errors:
            w(f"- {m} {n}: {e}")
    w("")
    w(render_targets(results))
    for r in results:
        for seq, profs in r.profile.items():
            for name, p in profs.items():
                w("")
                w(f"ORT profile, {r.name} seq {seq}, {name}: {p['kernel_ms']:.1f} ms in kernels per run "
                  f"(run {p['run_ms']:.1f} ms with profiling on), top 10 op types:")
                w("")
                w("| op type | ms/run | share | nodes |")
                w("|---|---:|---:|---:|")
                for o in p["ops"][:10]:
                    w(f"| {o['op']} | {o['ms']:.2f} | {o['share'] * 100:.1f}% | {o['nodes']} |")
    return "\n".join(out)


def render_targets(results: list[ModelResult]) -> str:
    lines = ["Targets:", "", "| model | target | measured | met |", "|---|---|---|---|"]

    def row(model: str, target: str, measured: str, ok: bool | None) -> None:
        lines.append(f"| {model} | {target} | {measured} | {'—' if ok is None else ('yes' if ok else 'NO')} |")

    for r in results:
        for seq, times in r.timings.items():
            best = best_torch(r, seq)
            ours = median(times["ours"])
            if best:
                q = ours / median(times[best])
                row(r.name, f"seq {seq}: ours ≤ {TARGET_VS_TORCH_ORT}× best torch-export ORT", f"{q:.2f}× ({best})",
                    q <= TARGET_VS_TORCH_ORT)
            else:
                row(r.name, f"seq {seq}: ours ≤ {TARGET_VS_TORCH_ORT}× best torch-export ORT", "no export worked", None)
            s = median(times["eager"]) / ours
            row(r.name, f"seq {seq}: ours ≥ {TARGET_VS_EAGER}× faster than eager", f"{s:.2f}×", s >= TARGET_VS_EAGER)
        exports = {n: s for n, s in r.compile_s.items() if n.startswith("torch-") and "+ortopt" not in n}
        if exports:
            fastest = min(exports, key=lambda n: exports[n])
            q = r.compile_s["ours"] / exports[fastest]
            row(r.name, f"compile with weights ≤ {TARGET_COMPILE}× torch.onnx.export", f"{q:.3f}× ({fastest})",
                q <= TARGET_COMPILE)
        st = r.structure
        row(r.name, "one fused attention op per layer", f"{st['attention_ops']} for {st['layers']} layers",
            st["attention_ops"] == st["layers"])
        row(r.name, "no Softmax outside attention", str(st["softmax_outside_attention"]),
            st["softmax_outside_attention"] == 0)
        row(r.name, "LayerNormalization for every layer norm",
            f"{st['layer_norm_ops']} of {st['layer_norms_in_model']}",
            st["layer_norm_ops"] == st["layer_norms_in_model"])
    return "\n".join(lines)


def to_json(results: list[ModelResult], args: argparse.Namespace, facts: dict[str, Any],
            wall_s: float) -> dict[str, Any]:
    return {
        "machine": facts,
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "wall_s": wall_s,
        "models": {
            r.name: {
                "opt_level": r.opt_level,
                "compile_s": r.compile_s,
                "errors": r.errors,
                "ort_optimizer_fusions": r.fused,
                "ort_optimizer_model_type": r.ortopt_type,
                "ops": {n: {"total": sum(h.values()), "histogram": h} for n, h in r.ops.items()},
                "structure": r.structure,
                "seqs": {
                    str(seq): {
                        "best_torch": best_torch(r, seq),
                        "variants": {n: {"median_ms": median(t), "min_ms": min(t), "samples_ms": t,
                                         "max_abs_diff_vs_eager": r.max_abs_diff[seq].get(n)}
                                     for n, t in times.items()},
                    }
                    for seq, times in r.timings.items()
                },
                "profile": {str(s): p for s, p in r.profile.items()},
            }
            for r in results
        },
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    def csv(s: str) -> list[str]:
        return [p.strip() for p in s.split(",") if p.strip()]

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=csv, default=["gpt2", "bert"], help="comma-separated: gpt2,bert")
    ap.add_argument("--seqs", type=lambda s: [int(v) for v in csv(s)], default=None,
                    help="sequence lengths (default 128,512; --quick: 16,32)")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions per variant (default 15; --quick: 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs per variant first (default 3; --quick: 1)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads and ORT intra-op threads (default 2)")
    ap.add_argument("--opt-level", type=int, default=None,
                    help="passed to pseudoformer.compile(opt_level=...) if it takes one; default: its own")
    ap.add_argument("--exporters", type=csv, default=["legacy", "dynamo"],
                    help="torch.onnx.export paths to try: legacy (dynamo=False), dynamo")
    ap.add_argument("--attn", type=csv, default=["eager"],
                    help="HF attn_implementation(s) to export: eager, sdpa (default eager)")
    ap.add_argument("--opset", type=int, default=20, help="opset of the torch exports (default 20)")
    ap.add_argument("--no-ort-optimizer", dest="ort_optimizer", action="store_false",
                    help="skip onnxruntime.transformers.optimizer on the exports")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="idle time before each timed call (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny configs and few reps: a smoke run in seconds")
    ap.add_argument("--profile", action="store_true",
                    help="ORT profiling of ours and of the best export: time per op type, top 10")
    ap.add_argument("--profile-reps", type=int, default=None, help="profiled runs (default 5; --quick: 2)")
    ap.add_argument("--no-warmup-tools", dest="warm_tools", action="store_false",
                    help="do not warm the compilers up before timing them (default: on, except --quick)")
    ap.add_argument("--compile-only", action="store_true",
                    help="time only compilation: ours by stage against the exports, interleaved rounds")
    ap.add_argument("--compile-reps", type=int, default=5, help="rounds for --compile-only (default 5)")
    ap.add_argument("--compile-in-process", action="store_true",
                    help="--compile-only in this one process (default: a fresh process per measurement)")
    ap.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, default=None, help="keep checkpoints and .onnx files here")
    ap.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args(argv)
    args.seqs = args.seqs or ([16, 32] if args.quick else [128, 512])
    args.reps = args.reps if args.reps is not None else (3 if args.quick else 15)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.profile_reps = args.profile_reps if args.profile_reps is not None else (2 if args.quick else 5)
    if args.quick:
        args.warm_tools = False
        args.gap_ms = min(args.gap_ms, 2.0)
    for m in args.models:
        if m not in SPECS:
            ap.error(f"unknown model {m!r} (choose from {', '.join(SPECS)})")
    for ex in args.exporters:
        if ex not in ("legacy", "dynamo"):
            ap.error(f"unknown exporter {ex!r} (legacy, dynamo)")
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compile_child is not None:
        print(json.dumps(compile_child(json.loads(args.compile_child))))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    with contextlib.suppress(RuntimeError):  # only settable before torch's first parallel work
        torch.set_num_interop_threads(1)
    facts = machine_facts()
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            work = args.workdir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-bench-")))
        if args.warm_tools and not (args.compile_only and not args.compile_in_process):
            log("warming up the compilers (untimed)")
            warm_up_tools(work, args, args.exporters)
        if args.compile_only:
            compiled = [compile_rounds(SPECS[m], args, work) for m in args.models]
            text = render_compile(compiled, args, facts)
            print(text)
            if args.markdown is not None:
                args.markdown.write_text(text)
            if args.json is not None:
                args.json.write_text(json.dumps({"machine": facts, "compile": compiled}, indent=1, default=str))
            return 0
        results = [bench_model(SPECS[m], args, work) for m in args.models]
        wall = time.perf_counter() - t0
        text = render(results, args, facts)
        text += f"\n\nWall time of this run: {wall:.0f} s.\n"
        print(text)
        if args.markdown is not None:
            args.markdown.write_text(text)
        if args.json is not None:
            args.json.write_text(json.dumps(to_json(results, args, facts, wall), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
