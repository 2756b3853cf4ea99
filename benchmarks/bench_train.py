"""Training step time: ours on onnxruntime against torch eager (and torch.compile with --compile), interleaved
in one process with the same threads, on HF models built from configs and the same weights and batches.

Workloads:
  gpt2     GPT-2 shaped, L=4, d_e=512, 8 heads, the GPT-2 vocabulary; every parameter trained; AdamW
  smollm2  SmolLM2-135M shaped (30 layers, d_e=576, 9/3 heads, vocabulary 49152, tied); only the attention's
           query and value projections trained (the layers LoRA adapts; there is no LoRA Llama .alg yet),
           every other weight frozen on both sides; AdamW

Reported per workload and variant: the median time per step, tokens/s, the achieved GFLOP/s (the step's
matrix-product FLOPs: 2·N·T forward, 2·N·T for the input gradients, 2·N_trained·T for the weight gradients,
and attention's) against onnxruntime's MatMul ceiling measured here, and the peak RSS of a child process
that builds only that variant and runs a few steps. --quick shrinks everything, for the smoke test.

    python benchmarks/bench_train.py [--workloads gpt2,smollm2] [--steps 10] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOSSES = ROOT / "tests" / "training"
SHAPES = {
    "gpt2": dict(n_embd=512, n_layer=4, n_head=8, n_positions=1024, vocab_size=50257),
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True),
}
QUICK = {
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101),
    "smollm2": dict(vocab_size=97, hidden_size=36, intermediate_size=48, num_hidden_layers=2, num_attention_heads=3,
                    num_key_value_heads=1, head_dim=12, max_position_embeddings=64, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True),
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="gpt2,smollm2")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant (interleaved)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, help="override the workload's layer count (say so when reporting)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (slow to compile on a loaded CPU)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, 2 steps: the smoke test")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # "WORKLOAD:VARIANT": peak RSS of one variant alone
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def hf_model(workload: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    sizes = dict((QUICK if args.quick else SHAPES)[workload])
    if args.layers:
        sizes["n_layer" if workload == "gpt2" else "num_hidden_layers"] = args.layers
    torch.manual_seed(0)
    if workload == "gpt2":
        return GPT2LMHeadModel(GPT2Config(**sizes, bos_token_id=0, eos_token_id=0)).eval()
    return LlamaForCausalLM(LlamaConfig(**sizes, bos_token_id=1, eos_token_id=2)).eval()


def trained(workload: str, name: str) -> bool:
    """Whether our parameter `name` trains (smollm2: the query and value projections only)."""
    return workload == "gpt2" or (".W_q" in name or ".W_v" in name)


def ours(workload: str, directory: Path, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.compile import compile_step, tied_unembedding
    from pseudoformer.training.loop import _load
    from pseudoformer.training.runtimes import OrtStep

    loss = LOSSES / ("gpt2_loss.alg" if workload == "gpt2" else "llama_loss.alg")
    model, _, _ = _load(loss, directory, 0)
    ties = tied_unembedding(model.graph, workload == "smollm2")
    train = [k for k in model.weights if trained(workload, k) and k not in ties]
    step = compile_step(model.graph, model.weights, train=train, optimizer=Optimizer("adamw"), ties=ties)
    return OrtStep(step.graph, step.frozen, step.state, threads=args.threads), len(step.graph.nodes())


def torch_step(hf, workload: str, compiled: bool):  # type: ignore[no-untyped-def]
    import torch

    for n, p in hf.named_parameters():
        p.requires_grad_(workload == "gpt2" or n.endswith(("q_proj.weight", "v_proj.weight")))
    opt = torch.optim.AdamW([p for p in hf.parameters() if p.requires_grad], lr=1e-4)

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(hf(x).logits, dim=-1)
        return -logp[:, :-1].gather(-1, x[:, 1:, None]).sum(dim=(1, 2)).mean()

    fn = torch.compile(loss_of) if compiled else loss_of

    def step(x: np.ndarray) -> float:
        opt.zero_grad(set_to_none=True)
        loss = fn(torch.from_numpy(x))
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def flops(hf, workload: str, tokens: int, seq: int) -> float:  # type: ignore[no-untyped-def]
    """Matrix-product FLOPs of one step (see the module's docstring)."""
    matrices = [(n, p) for n, p in hf.named_parameters() if p.ndim == 2 and "wpe" not in n]
    n_all = sum(p.numel() for _, p in matrices)
    n_train = sum(p.numel() for n, p in matrices if workload == "gpt2" or n.endswith(("q_proj.weight",
                                                                                       "v_proj.weight")))
    cfg = hf.config
    layers = getattr(cfg, "n_layer", None) or cfg.num_hidden_layers
    width = getattr(cfg, "n_embd", None) or cfg.num_attention_heads * cfg.head_dim
    attention = 2 * 2 * layers * seq * width * tokens  # QKᵀ and AV, forward
    return 2 * n_all * tokens + 2 * n_all * tokens + 2 * n_train * tokens + 3 * attention


def matmul_ceiling(threads: int, m: int = 1024, k: int = 512, n: int = 2048) -> float:
    """GFLOP/s of one large float32 MatMul on onnxruntime with these threads."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    s = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
    feed = {"a": np.random.rand(m, k).astype(np.float32), "b": np.random.rand(k, n).astype(np.float32)}
    for _ in range(3):
        s.run(None, feed)
    times = []
    for _ in range(10):
        t = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t)
    del onnx
    return 2 * m * k * n / statistics.median(times) / 1e9


def batches(vocab: int, args: argparse.Namespace, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab, (args.batch, args.seq), dtype=np.int64) for _ in range(count)]


def child(args: argparse.Namespace) -> int:
    """Build one variant alone and run a few steps; print its peak RSS in MiB."""
    import torch

    torch.set_num_threads(args.threads)
    workload, variant = args.child.split(":")
    hf = hf_model(workload, args)
    xs = batches(hf.config.vocab_size, args, 3)
    if variant == "ours":
        rt, _ = ours(workload, Path(args.dir), args)
        del hf
        for x in xs:
            rt.step({"x": x}, 1e-4)
    else:
        step = torch_step(hf, workload, variant == "compile")
        for x in xs:
            step(x)
    print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    return 0


def run_workload(workload: str, args: argparse.Namespace, ceiling: float) -> list[dict]:
    import torch

    hf = hf_model(workload, args)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        t0 = time.perf_counter()
        rt, nodes = ours(workload, Path(tmp), args)
        build_s = time.perf_counter() - t0
        variants = {"ours (onnxruntime)": lambda x: rt.step({"x": x}, 1e-4),
                    "torch eager": torch_step(hf_model(workload, args), workload, False)}
        if args.compile:
            variants["torch.compile"] = torch_step(hf_model(workload, args), workload, True)
        xs = batches(hf.config.vocab_size, args, args.warmup + args.steps)
        first = {k: fn(xs[0]) for k, fn in variants.items()}  # same weights, same batch: the same loss
        for x in xs[1:args.warmup]:
            for fn in variants.values():
                fn(x)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for x in xs[args.warmup:]:  # interleaved: each variant in turn on the same batch
            for k, fn in variants.items():
                t = time.perf_counter()
                fn(x)
                times[k].append(time.perf_counter() - t)
        rows = []
        work = flops(hf, workload, args.batch * args.seq, args.seq)
        for k, ts in times.items():
            med = statistics.median(ts)
            kind = {"ours (onnxruntime)": "ours", "torch eager": "eager", "torch.compile": "compile"}[k]
            rss = subprocess.run([sys.executable, __file__, "--child", f"{workload}:{kind}", "--dir", tmp,
                                  "--threads", str(args.threads), "--seq", str(args.seq), "--batch", str(args.batch),
                                  *(["--quick"] if args.quick else []),
                                  *(["--layers", str(args.layers)] if args.layers else [])],
                                 capture_output=True, text=True, timeout=3600)
            peak = json.loads(rss.stdout.strip().splitlines()[-1])["peak_rss_mib"] if rss.returncode == 0 else None
            if peak is None:
                print(f"peak RSS of {k}: the child failed: {rss.stderr[-800:]}", file=sys.stderr)
            rows.append({"workload": workload, "variant": k, "ms_per_step": med * 1e3,
                         "tokens_per_s": args.batch * args.seq / med, "gflops": work / med / 1e9,
                         "of_ceiling": work / med / 1e9 / ceiling, "peak_rss_mib": peak, "first_loss": first[k],
                         "build_s": build_s if kind == "ours" else None, "step_nodes": nodes if kind == "ours" else None})
    del torch
    return rows


def table(rows: list[dict], ceiling: float, args: argparse.Namespace) -> str:
    out = [f"ORT MatMul ceiling: {ceiling:.1f} GFLOP/s ({args.threads} threads); seq {args.seq}, batch {args.batch}",
           "", "| workload | variant | ms/step | tokens/s | GFLOP/s | of ceiling | peak RSS MiB | first loss |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rss = f"{r['peak_rss_mib']:.0f}" if r["peak_rss_mib"] is not None else "–"
        out.append(f"| {r['workload']} | {r['variant']} | {r['ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | "
                   f"{r['gflops']:.1f} | {r['of_ceiling']:.0%} | {rss} | {r['first_loss']:.4f} |")
    for w in dict.fromkeys(r["workload"] for r in rows):
        o = next(r for r in rows if r["workload"] == w and r["variant"].startswith("ours"))
        e = next(r for r in rows if r["workload"] == w and r["variant"] == "torch eager")
        mem = (f"{o['peak_rss_mib'] / e['peak_rss_mib']:.2f}×" if o["peak_rss_mib"] and e["peak_rss_mib"] else "–")
        out.append(f"\nTargets, {w}: per step {o['ms_per_step'] / e['ms_per_step']:.2f}× torch eager (target ≤ 0.8×), "
                   f"peak memory {mem} torch eager's (target ≤ 1×)")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.seq, args.batch = 2, 1, 16, 2
    if args.child:
        return child(args)
    import torch

    torch.set_num_threads(args.threads)
    ceiling = matmul_ceiling(args.threads)
    rows = [r for w in args.workloads.split(",") for r in run_workload(w, args, ceiling)]
    print(table(rows, ceiling, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"ceiling_gflops": ceiling, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
