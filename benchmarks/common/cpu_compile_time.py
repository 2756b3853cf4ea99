"""bench_cpu.py --compile-only: ours (compile with weights + save) by stage, against each torch export.

Rounds interleave the tools; each measurement runs in a fresh process of bench_cpu.py (its hidden
`--compile-child` flag) unless --compile-in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# beside this script
from common.cpu_variants import SPECS, Spec, build_hf, compile_ours, load_hf, log, quiet, torch_export

SCRIPT = Path(__file__).resolve().parents[1] / "bench_cpu.py"  # what a child process runs

# Where ours spends its compile time: (module, attribute, stage). Each is wrapped while ours compiles
# and its exclusive time (without the wrapped calls inside it) is added to its stage; what no wrapper
# covers is "other". Attributes a pseudoformer does not have are skipped, so the same table can be
# taken of an older commit (ours before the fast path: to_onnx, _fill_tensor, _byte_size).
STAGES = [
    ("pseudoformer.model", "load_program", "parse .alg"),
    ("pseudoformer.model", "elaborate", "elaborate"),
    ("pseudoformer.weights.hf_checkpoint", "read_hf_tensors", "read safetensors"),
    ("pseudoformer.weights.safetensors_io", "_read_one", "read safetensors"),  # tensors read one at a time
    ("pseudoformer.weights.checkpoint", "map_hf_checkpoint", "map HF names"),  # the plan (headers, names, shapes)
    ("pseudoformer.weights.loader", "fit", "fit (transposes, copies)"),
    ("pseudoformer.model", "model_metadata", "metadata (source sha256)"),
    ("pseudoformer.optimize", "optimize", "passes (-O2)"),
    ("pseudoformer.backends.onnx.compile", "prepare", "passes (-O2)"),  # the compile's one pipeline, since
    ("pseudoformer.backends.onnx", "to_onnx", "lower to ONNX"),
    ("pseudoformer.backends.onnx.lower", "lower_model", "lower to ONNX"),  # before backends/onnx/compile.py
    ("pseudoformer.backends.onnx.compile", "lower_model", "lower to ONNX"),
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
            with contextlib.suppress(ImportError):  # older commits: the HF name mappings, called through a table
                from pseudoformer.weights import hf_checkpoint

                for key, old in list(getattr(hf_checkpoint, "MAPPERS", {}).items()):
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
    proc = subprocess.run([sys.executable, str(SCRIPT), "--compile-child", json.dumps(job)],
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
