"""`train --backend torch` step time on a CPU: against HF + torch eager, and DDP over processes against one.

Part 1 (in this process, interleaved by common/harness.round_robin, the same threads): one AdamW step of
GPT-2 small (or --layers N of it; say so when reporting) on a batch of --batch × --seq tokens, ours
(pseudoformer.training.torch_loop.TorchRuntime: gpt2_loss.alg lowered by the torch backend, autograd,
torch.optim.AdamW) against HF's GPT2LMHeadModel with the same weights and batches, its next-token loss written
the same way (summed over positions, mean over the batch) and the same optimizer. Goal: ours ≤ 1.0× HF's time.

Part 2 (--ddp): `pseudoformer train --backend torch` at the same global batch under `torchrun --nproc-per-node
P` (gloo, --threads 1 a process) and in one process (--threads P), the time per step read from each run's
loss.csv (rank 0's tokens/s over the global batch's tokens), the median over the steps after the first.

    python benchmarks/bench_torch_train.py [--threads 2] [--batch 4] [--seq 128] [--steps 5] [--layers N]
        [--ddp] [--procs 2] [--quick]

Figures are from a shared machine: name the CPU (printed) and say "under load".
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common.harness import machine_summary, round_robin, training_arguments  # noqa: E402

LOSS = ROOT / "tests" / "training" / "gpt2_loss.alg"
SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
QUICK = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = training_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), steps=5,
                            steps_help="timed steps per variant",
                            layers_help="GPT-2 small with this many layers (say so when reporting)")
    ap.add_argument("--ddp", action="store_true", help="also part 2: torchrun processes against one process")
    ap.add_argument("--no-hf", action="store_true", help="skip part 1")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny shapes: the smoke test")
    return ap.parse_args(argv)


def sizes(args: argparse.Namespace) -> dict[str, int]:
    s = dict(QUICK if args.quick else SMALL)
    if args.layers:
        s["n_layer"] = args.layers
    return s


def defines(s: dict[str, int]) -> list[str]:
    head = s["n_embd"] // s["n_head"]
    return [f"L={s['n_layer']}", f"H={s['n_head']}", f"d_e={s['n_embd']}", f"d_mlp={4 * s['n_embd']}",
            f"d_attn={head}", f"d_mid={head}", f"ell_max={s['n_positions']}", f"N_V={s['vocab_size']}", "eps=1e-5"]


def part1(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.loop import _load
    from pseudoformer.training.torch_loop import torch_step

    torch.set_num_threads(args.threads)
    s = sizes(args)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**s, bos_token_id=0, eos_token_id=0))
    hf.save_pretrained(workdir / "hf")
    hf.train()  # dropout is 0.1 in HF's config: off, as ours has none
    for m in hf.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    model, _, _ = _load(LOSS, workdir / "hf", 0)
    opt = Optimizer("adamw")
    _, ours = torch_step(model.graph, model.weights, None, opt, 2, {}, None,
                         options=CompileOptions(backend="torch", threads=args.threads))
    del model
    hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                               weight_decay=opt.weight_decay)

    def hf_step(x: np.ndarray) -> float:
        t = torch.from_numpy(x)
        hf_opt.zero_grad(set_to_none=True)
        logp = torch.log_softmax(hf(t).logits, dim=-1)
        loss = -logp[:, :-1].gather(-1, t[:, 1:, None]).sum(dim=(1, 2)).mean()
        loss.backward()
        hf_opt.step()
        return float(loss.detach())

    rng = np.random.default_rng(0)
    batches = [rng.integers(0, s["vocab_size"], (args.batch, args.seq), dtype=np.int64) for _ in range(4)]
    k = {"ours": 0, "hf": 0}

    def run(name: str):  # type: ignore[no-untyped-def]
        def call() -> None:
            x = batches[k[name] % len(batches)]
            k[name] += 1
            if name == "ours":
                ours.step({"x": x}, 1e-4)
            else:
                hf_step(x)
        return call

    times = round_robin({"ours (train --backend torch)": run("ours"), "HF + torch eager": run("hf")},
                        reps=args.steps, warmup=1)
    return {n: statistics.median(t) for n, t in times.items()}


def _step_time(out: Path, tokens: int) -> float:
    rates = [float(line.split(",")[2]) for line in (out / "loss.csv").read_text().splitlines()[1:]]
    return statistics.median(tokens / r for r in rates[1:] or rates)


def part2(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    s = sizes(args)
    tokens = np.random.default_rng(1).integers(0, s["vocab_size"], args.batch * args.seq * (args.steps + 2))
    np.save(workdir / "ids.npy", tokens)
    common = ["train", str(LOSS), "--data", str(workdir / "ids.npy"), "--backend", "torch", "--seq-len",
              str(args.seq), "--batch-size", str(args.batch), "--steps", str(args.steps + 1), "--lr", "1e-4"]
    for d in defines(s):
        common += ["-D", d]
    one = [sys.executable, "-m", "pseudoformer", *common, "--threads", str(args.threads), "-o", str(workdir / "one")]
    many = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.procs),
            "-m", "pseudoformer", *common, "--threads", "1", "-o", str(workdir / "ddp")]
    for argv in (one, many):
        subprocess.run(argv, check=True, capture_output=True)
    n = args.batch * args.seq
    return {"1 process": _step_time(workdir / "one", n), f"DDP, {args.procs} processes": _step_time(workdir / "ddp", n)}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    s = sizes(args)
    print(f"{machine_summary()}\nGPT-2 {'(quick shapes)' if args.quick else 'small'}, {s['n_layer']} layers, "
          f"batch {args.batch} × seq {args.seq}, AdamW, {args.threads} threads (under load on a shared machine)")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_hf:
            got = part1(args, Path(tmp))
            base = got["HF + torch eager"]
            for name, t in got.items():
                print(f"  {name:32s} {t * 1e3:9.1f} ms/step  {t / base:5.2f}×")
        if args.ddp:
            got = part2(args, Path(tmp))
            base = got["1 process"]
            for name, t in got.items():
                print(f"  {name:32s} {t * 1e3:9.1f} ms/step  {t / base:5.2f}×  (global batch {args.batch})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
