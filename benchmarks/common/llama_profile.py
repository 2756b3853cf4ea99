"""ORT profiles for bench_llama.py: where a prefill and a decode step spend their time, per op type.

`profile_ours` runs our step model (the one session that prefills with an empty cache and then decodes)
once on the prompt and then token by token, with ORT's profiler on; `summarize` reads any ORT trace
whose first model run is the prefill and the rest are decode steps (genai's too, profiled by
llama_genai.py) into milliseconds per op type: the prefill's, and the median step's.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def summarize(trace: Path) -> dict[str, Any]:
    events = json.loads(Path(trace).read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    per_run: list[Counter[str]] = [Counter() for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        i = next((k for k, r in enumerate(runs) if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]), None)
        if i is not None:
            per_run[i][e.get("args", {}).get("op_name", "?")] += e["dur"] / 1e3
    steps: dict[str, list[float]] = defaultdict(list)
    for c in per_run[1:]:
        for op in set().union(*per_run[1:]):
            steps[op].append(c.get(op, 0.0))
    return {"prefill_ms": runs[0]["dur"] / 1e3 if runs else 0.0, "prefill": per_run[0] if runs else Counter(),
            "step_ms": statistics.median(r["dur"] for r in runs[1:]) / 1e3 if len(runs) > 1 else 0.0,
            "step": Counter({op: statistics.median(v) for op, v in steps.items()})}


def profile_ours(gen: Any, prompt: np.ndarray, out: Path, new: int = 32, threads: int = 2) -> Path:
    """Our prefill and `new` − 1 decode steps, greedy, with ORT's profiler on; returns the trace. The
    generator runs as it does unprofiled (its own bindings, and the cache in buffers with contrib_ops),
    on a profiling session of the same step model."""
    import onnxruntime as ort

    from pseudoformer.generation import Sampling

    out.mkdir(parents=True, exist_ok=True)
    runtime = gen.runtime
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = str(out / "ours")
    plain = runtime.runner.session
    runtime.runner.session = ort.InferenceSession(runtime.step_model.SerializeToString(), so,
                                                  providers=["CPUExecutionProvider"])
    try:
        gen.generate(prompt, max_new_tokens=new, sampling=Sampling(temperature=0))
        return Path(runtime.runner.session.end_profiling())
    finally:
        runtime.runner.session = plain


def table(profiles: dict[str, dict[str, Any]], part: str, top: int = 12) -> str:
    """Markdown: ms per op type of `part` ("prefill" or "step") for each profiled variant."""
    ops = Counter()
    for p in profiles.values():
        ops.update(p[part])
    names = list(profiles)
    lines = [f"| {part}: op type | " + " | ".join(f"{n} ms" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for op, _ in ops.most_common(top):
        lines.append(f"| {op} | " + " | ".join(f"{profiles[n][part].get(op, 0.0):.2f}" for n in names) + " |")
    lines.append("| whole run | " + " | ".join(f"{profiles[n][part + '_ms']:.1f}" for n in names) + " |")
    return "\n".join(lines)
