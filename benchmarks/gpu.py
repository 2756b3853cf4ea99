#!/usr/bin/env python3
"""Ours on onnxruntime's CUDA provider against torch and onnxruntime-genai-cuda: one process, one table.

    forward   GPT-2 small (random weights, one HF checkpoint both sides read), fp32 and fp16, at 1×128, 8×128,
              4×512 and 1×1024: ours (`compile`, fp16 with --contrib-ops; IO binding, the logits left on the
              device) against torch eager and torch.compile(mode="reduce-overhead") (CUDA graphs); and ours
              as torch.compile's CUDA graphs are, a session per shape with its sizes fixed (onnxruntime's free
              dimension overrides) that onnxruntime's CUDA provider captures once and replays (the same session
              without the capture on the CPU: --smoke)
    decode    SmolLM2-135M and Qwen2.5-0.5B shapes, fp16 and int4, batch 1 and 8, prompt 128: ours
              (`generate --provider cuda`) against onnxruntime-genai-cuda on its own builder's folder
              (benchmarks/common/gpu_decode.py), per token and prefill
    train     a step of GPT-2 small, batch 8, seq 512, AdamW (tests/training/gpt2_loss.alg): ours (the step's
              parameters, gradients and state on the GPU) against torch eager and torch.compile, with peak
              GPU memory (torch: max_memory_allocated; ours: the device memory onnxruntime's arena holds)

fp32 runs with TF32 off on both sides (onnxruntime's `use_tf32=0`, torch's allow_tf32 False), as the tests do.
Every figure is a median of timed calls after warm-up, each call synchronised; every ratio is ours over the
other side's, taken in this one process, on the card the table names. The targets (issue 38): forward ≤ 0.8×
torch.compile, decode per token and prefill ≤ 0.9× genai, training step ≤ 0.8× torch eager and ≤ 1.0×
torch.compile, peak memory ≤ 1.1× torch's.

    bash .gpu/device.sh python3 benchmarks/gpu.py --out gpu.md     # on the GPU machine (shared/gpu/README.md)
    python benchmarks/gpu.py --smoke                                 # anywhere: tiny sizes on the CPU

--smoke runs every code path at tiny sizes on the CPU (CI: tests/benchmarks/test_gpu_bench.py): torch.compile
with its "eager" backend there (inductor's C++ build would take minutes), and genai's cells empty with the
reason unless onnxruntime-genai imports in this process. Its figures mean nothing. A section that would start
past --budget-s is not run, and its rows say so: the whole run ends within 8 minutes on an H100/H200. The
sections run in the order --sections names them, and --out holds the table of those finished after each one,
so a run stopped from outside (benchmarks/gpu_session.py's time limit) still leaves them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from common.harness import machine_summary

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPT2_SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
GPT2_SMOKE = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101)
FORWARD_SHAPES = ((1, 128), (8, 128), (4, 512), (1, 1024))
SMOKE_SHAPES = ((1, 8), (2, 16))
LOSS = ROOT / "tests" / "training" / "gpt2_loss.alg"


class Clock:
    """The device's timing: each call synchronised, the median of `reps` after `warmup`."""

    def __init__(self, device: str) -> None:
        import torch

        self.sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def ms(self, call: Callable[[], object], reps: int, warmup: int = 3) -> float:
        for _ in range(warmup):
            call()
        self.sync()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            self.sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3


def card(device: str) -> str:
    """The card the figures were taken on; with --smoke, the CPU (the harness's machine summary)."""
    if device == "cuda":
        import torch

        return f"{torch.cuda.get_device_name()}; host {machine_summary()}"
    return f"CPU: {machine_summary()} (smoke: tiny sizes, figures mean nothing)"


def torch_exact() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def compiled(module: Callable, args: argparse.Namespace) -> Callable:
    import torch

    if args.smoke:
        return torch.compile(module, backend="eager")
    return torch.compile(module, mode="reduce-overhead", dynamic=False)


def gpt2_checkpoint(directory: Path, smoke: bool):  # type: ignore[no-untyped-def]
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**(GPT2_SMOKE if smoke else GPT2_SMALL), bos_token_id=0, eos_token_id=0)).eval()
    hf.save_pretrained(directory)
    return hf


def forward_rows(args: argparse.Namespace, clock: Clock, checkpoint: Path, hf) -> list[dict]:  # type: ignore[no-untyped-def]
    import torch

    rows = [row for dtype in ("float32", "float16") for row in _forward(args, clock, checkpoint, hf, dtype)]
    hf.to("cpu", torch.float32)
    return rows


def _forward(args: argparse.Namespace, clock: Clock, checkpoint: Path, hf, dtype: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """One dtype's rows: our session and torch's two forms built once, every shape timed on them."""
    import onnxruntime as ort
    import torch

    import pseudoformer
    from pseudoformer.backends.onnx import OnnxRunner

    onnx_model = pseudoformer.compile(ROOT / "models" / "gpt2.alg", weights=checkpoint, dtype=dtype,
                                      contrib_ops=dtype == "float16").onnx
    ours = OnnxRunner(onnx_model, provider=args.provider)
    model = hf.to(args.device, getattr(torch, dtype))
    fast = compiled(model, args)
    rows = []
    for batch, seq in SMOKE_SHAPES if args.smoke else FORWARD_SHAPES:
        x = np.random.default_rng(seq).integers(0, hf.config.vocab_size, (batch, seq), dtype=np.int64)
        binding = ours.session.io_binding()
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, ours.device, 0))
        binding.bind_output(ours.output_names[0], ours.device)
        xt = torch.from_numpy(x).to(args.device)
        row = {"section": "forward", "case": f"GPT-2 small {batch}×{seq}", "dtype": dtype}
        with torch.no_grad():
            row["ours"] = clock.ms(lambda b=binding: ours.session.run_with_iobinding(b), args.reps)
            row["torch eager"] = clock.ms(lambda t=xt: model(t).logits, args.reps)
            row["torch.compile"] = clock.ms(lambda t=xt: fast(t).logits, args.reps)
            want = model(xt).logits.float().cpu().numpy()
        got = binding.copy_outputs_to_cpu()[0].astype(np.float32)
        row["note"] = f"largest logit difference from torch {np.abs(got - want).max():.1e}"
        rows.append(row)
        graph_ms, apart = _captured(args, clock, onnx_model, x, got, dtype)
        rows.append({**row, "case": f"{row['case']}, CUDA graph", "ours": graph_ms,
                     "note": f"onnxruntime's CUDA graphs{'' if args.provider == 'cuda' else ' (CPU: none)'}; "
                             f"largest logit difference from the session without {apart:.1e}"})
    return rows


def _captured(args: argparse.Namespace, clock: Clock, model, x: np.ndarray, plain: np.ndarray,  # type: ignore[no-untyped-def]
              dtype: str) -> tuple[float, float]:
    """Ours on a session of this shape alone, captured as a CUDA graph on CUDA: its ms, and the largest difference
    of its logits from `plain`'s, the session's without (this session is let go before the next shape's)."""
    import onnxruntime as ort

    from pseudoformer.backends.onnx import OnnxRunner

    runner = OnnxRunner(model, provider=args.provider, sizes={"batch": x.shape[0], "seq": x.shape[1]},
                        cuda_graph=args.provider == "cuda")
    # the graph reads the values bound when it was captured: the input and the logits made once, bound once
    value = ort.OrtValue.ortvalue_from_numpy(x, runner.device, 0)
    logits = ort.OrtValue.ortvalue_from_shape_and_type(list(plain.shape), np.dtype(dtype), runner.device, 0)
    binding = runner.session.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_ortvalue_output(runner.output_names[0], logits)
    ms = clock.ms(lambda: runner.session.run_with_iobinding(binding), args.reps)
    return ms, float(np.abs(logits.numpy().astype(np.float32) - plain).max())


def train_rows(args: argparse.Namespace, clock: Clock, checkpoint: Path, hf) -> list[dict]:  # type: ignore[no-untyped-def]
    import torch

    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.compile import compile_step
    from pseudoformer.training.loop import _load
    from pseudoformer.training.runtimes import make_runtime

    batch, seq = (2, 16) if args.smoke else (8, 512)
    x = np.random.default_rng(1).integers(0, hf.config.vocab_size, (batch, seq), dtype=np.int64)
    reps = max(3, args.reps // 4)
    row: dict = {"section": "train", "case": f"GPT-2 small step {batch}×{seq}, AdamW", "dtype": "float32"}
    cuda = args.device == "cuda"

    def torch_variant(compile_it: bool) -> tuple[float, float | None]:
        model = hf.to(args.device).train()
        for p in model.parameters():
            p.requires_grad_(True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        xt = torch.from_numpy(x).to(args.device)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            logp = torch.log_softmax(model(ids).logits, dim=-1)
            return -logp[:, :-1].gather(-1, ids[:, 1:, None]).sum(dim=(1, 2)).mean()

        fn = compiled(loss_of, args) if compile_it else loss_of

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            fn(xt).backward()
            opt.step()

        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        ms = clock.ms(step, reps, warmup=2)
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        opt.state.clear()
        model.to("cpu").eval()
        for p in model.parameters():
            p.grad = None
        if cuda:
            torch.cuda.empty_cache()
        return ms, peak

    row["torch eager"], torch_peak = torch_variant(False)
    row["torch.compile"], _ = torch_variant(True)
    model, _, _ = _load(LOSS, checkpoint, 0)
    step = compile_step(model.graph, model.weights, train=list(model.weights), optimizer=Optimizer("adamw"))
    del model
    free_before = torch.cuda.mem_get_info()[0] if cuda else 0
    runtime = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split,
                           provider=args.provider)
    row["ours"] = clock.ms(lambda: runtime.step({"x": x}, 1e-5), reps, warmup=2)
    if cuda:  # the arena keeps its high-water mark: what onnxruntime took from the device, weights and state included
        ours_peak = (free_before - torch.cuda.mem_get_info()[0]) / 2**20
        row["memory"] = (ours_peak, torch_peak)
        row["note"] = f"peak MiB: ours {ours_peak:.0f} (arena held), torch eager {torch_peak:.0f} (allocated)"
    else:
        row["note"] = "peak GPU memory: none on the CPU"
    return [row]


def decode_table_rows(args: argparse.Namespace, out_of_time: Callable[[], bool]) -> list[dict]:
    from common.gpu_decode import decode_rows

    prompt, new = (8, 4) if args.smoke else (128, 32)
    rows = []
    for r in decode_rows(smoke=args.smoke, provider=args.provider, prompt=prompt, new=new, rounds=args.rounds,
                         batches=(1, 2) if args.smoke else (1, 8), out_of_time=out_of_time):
        graph_note = "; ".join(filter(None, [r.note, "" if args.provider == "cuda" else
                                             "CUDA graphs are CUDA's: not on the CPU"]))
        for what, ours, theirs, note in (("per token", r.ours_step_ms, r.genai_step_ms, r.note),
                                         ("per token, --cuda-graph", r.graph_step_ms, r.genai_step_ms, graph_note),
                                         ("prefill", r.ours_prefill_ms, r.genai_prefill_ms, r.note)):
            rows.append({"section": "decode", "case": f"{r.shape} batch {r.batch}, {what}",
                         "dtype": r.precision, "ours": ours, "genai": theirs, "note": note})
    return rows


TARGETS = {"forward": ("torch.compile", 0.8), "decode": ("genai", 0.9), "train": ("torch eager", 0.8)}


def table(rows: list[dict], device_name: str, judge: bool = True) -> str:
    """The one table; `judge` False (--smoke) leaves the targets unjudged: tiny sizes on a CPU judge nothing."""
    def ms(v: float | None) -> str:
        return "—" if v is None or v != v else f"{v:.2f}"

    lines = [f"## GPU: ours against torch and onnxruntime-genai — {device_name}", "",
             "| section | case | dtype | ours ms | torch eager ms | torch.compile ms | genai ms | ratio | target | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        anchor, target = TARGETS[r["section"]]
        other = r.get(anchor)
        ours = r["ours"]
        ratio = ours / other if other and ours is not None and ours == ours else None  # None: not run; NaN: no time
        met = "" if ratio is None or not judge else ("met" if ratio <= target else "missed")
        extra = []
        if r["section"] == "train" and r.get("torch.compile"):
            extra.append(f"{r['ours'] / r['torch.compile']:.2f}× torch.compile (≤ 1.0)")
        if "memory" in r:
            extra.append(f"memory {r['memory'][0] / r['memory'][1]:.2f}× (≤ 1.1)")
        lines.append(f"| {r['section']} | {r['case']} | {r['dtype']} | {ms(r['ours'])} | {ms(r.get('torch eager'))} | "
                     f"{ms(r.get('torch.compile'))} | {ms(r.get('genai'))} | "
                     f"{'—' if ratio is None else f'{ratio:.2f}× {anchor}'} | ≤ {target} {met} | "
                     f"{'; '.join([*extra, r.get('note', '')]).strip('; ')} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: every code path, no meaning")
    ap.add_argument("--sections", default="forward,decode,train",
                    help="which sections, in the order they run (of forward, decode, train)")
    ap.add_argument("--reps", type=int, default=20, help="timed calls per forward figure (a quarter for training)")
    ap.add_argument("--rounds", type=int, default=3, help="timed generations per decode figure")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no section past this many seconds")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sections.split(",") if s not in ("forward", "decode", "train")]
    if unknown:
        ap.error(f"--sections: no section {', '.join(unknown)} (choose from forward, decode, train)")
    args.device = "cpu" if args.smoke else "cuda"
    args.provider = "cpu" if args.smoke else "cuda"
    if args.smoke:
        args.reps, args.rounds = min(args.reps, 3), min(args.rounds, 1)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    if not args.smoke:
        import torch

        from pseudoformer.backends.onnx.providers import require_installed
        from pseudoformer.base.errors import BackendError

        if not torch.cuda.is_available():
            print("no CUDA device here: run on the GPU machine, or --smoke", file=sys.stderr)
            return 1
        try:
            require_installed("cuda")  # one line naming pseudoformer[gpu] where onnxruntime lacks CUDA
        except BackendError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        torch_exact()
    clock = Clock(args.device)
    device_name = card(args.device)
    sections = list(dict.fromkeys(args.sections.split(",")))

    def out_of_time() -> bool:
        return time.perf_counter() - start > args.budget_s

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        hf = gpt2_checkpoint(Path(tmp) / "gpt2", args.smoke)
        makers = {"forward": lambda: forward_rows(args, clock, Path(tmp) / "gpt2", hf),
                  "decode": lambda: decode_table_rows(args, out_of_time),
                  "train": lambda: train_rows(args, clock, Path(tmp) / "gpt2", hf)}
        for section in sections:  # in the order asked: a session short of time puts first what it needs most
            if out_of_time():
                rows.append({"section": section, "case": "all", "dtype": "", "ours": float("nan"),
                             "note": "not run: the time budget was spent"})
                continue
            began = time.perf_counter()
            rows += makers[section]()
            print(f"{section}: {time.perf_counter() - began:.0f} s", file=sys.stderr)
            if args.out:  # the table so far, so that a run stopped from outside still leaves its finished sections
                args.out.write_text(table(rows, device_name, judge=not args.smoke) +
                                    f"\n(so far: {', '.join(dict.fromkeys(r['section'] for r in rows))}; "
                                    f"{time.perf_counter() - start:.0f} s)\n")
    text = table(rows, device_name, judge=not args.smoke) + f"\n{time.perf_counter() - start:.0f} s in all, in one process.\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
