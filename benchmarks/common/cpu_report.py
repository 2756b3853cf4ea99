"""bench_cpu.py's report: the machine it ran on, its tables in markdown, the project's targets, its JSON."""

from __future__ import annotations

import argparse
from typing import Any

from common.cpu_measure import ModelResult, best_torch, median
from common.cpu_variants import SPECS

# Targets of the project (docs: benchmarks/README.md).
TARGET_VS_TORCH_ORT = 0.95  # ours / best torch-export ORT, at every measured sequence length
TARGET_VS_EAGER = 2.6  # eager / ours
TARGET_COMPILE = 0.1  # ours compile+save / torch.onnx.export


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
