"""`pseudoformer train FILE --data DATA`: the command over pseudoformer.train (loop.py)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

# compile_options, not runtimes: `pseudoformer --version` builds this parser and must not import numpy
from pseudoformer.compile_options import add_backend_argument, add_provider_argument


def add_parser(sub: argparse._SubParsersAction, model_args: Callable[..., None]) -> None:
    t = sub.add_parser("train", help="train a loss or training algorithm's parameters on token data")
    t.add_argument("file", metavar="FILE", help="a .alg file whose entry computes a loss per example, or a "
                   "training algorithm (the paper's 11–13)")
    model_args(t)
    t.add_argument("--data", required=True, help="token ids (.npy, int, [n] or [rows, n]) or a text file with "
                   "--tokenizer; for EDTraining's pairs, a .npz file with int arrays z [N, ℓ_z] and x [N, ℓ_x], "
                   "one example per row")
    t.add_argument("--tokenizer", metavar="FILE", help="a tokenizers tokenizer.json (or a directory holding one) "
                   "that turns a text --data file into token ids")
    t.add_argument("--weights", help="start from a .safetensors file of ours or a HuggingFace checkpoint directory")
    t.add_argument("--allow-nonfinite", action="store_true",
                   help="load weights that hold NaN or ±∞ (refused by default, naming the tensors)")
    t.add_argument("--seed", type=int, default=0, help="seed of the init (without --weights), of the shuffle and "
                   "of ETraining's masking draws")
    t.add_argument("--objective", choices=["next-token", "masked"], help="for a model whose file does not say its "
                   "kind: train it by next-token prediction (DTraining) or masked tokens (ETraining)")
    t.add_argument("--seq-len", type=int, default=128, metavar="N", help="tokens per sequence (default 128)")
    t.add_argument("--batch-size", type=int, default=8, metavar="B", help="sequences per step (default 8)")
    t.add_argument("--grad-accum", type=int, default=1, metavar="N", help="sum the gradients of N micro-batches of "
                   "--batch-size before each optimizer step: one batch N times the size (default 1)")
    t.add_argument("--loss-reduction", choices=["sum", "mean"], default="sum", help="a sequence's loss: the sum over "
                   "its positions, as the paper writes it (default), or the mean over the tokens the loss scores, "
                   "torch's mean cross-entropy (training algorithms)")
    t.add_argument("--epochs", type=int, help="passes over the data (default: N_epochs of a training algorithm, "
                   "else 1)")
    t.add_argument("--steps", type=int, help="stop after this many steps (default: the epochs' worth)")
    t.add_argument("--lr", type=float, help="the step size η (default: a training algorithm's η)")
    t.add_argument("--optimizer", choices=["sgd", "adamw"], help="sgd, as the paper writes it (the default for a "
                   "training algorithm), or adamw (the default for a loss algorithm)")
    t.add_argument("--warmup", type=int, default=0, metavar="STEPS",
                   help="η rises linearly over these steps, then falls on a cosine to 0 at the last step (sgd and "
                   "adamw)")
    t.add_argument("--clip", type=float, default=0.0, help="clip the gradient's global norm to this (default: no)")
    t.add_argument("--weight-decay", type=float, default=0.01, help="adamw's decoupled weight decay λ, on the "
                   "matrices (parameters of rank ≥ 2)")
    t.add_argument("--decay-all", action="store_true", help="decay every parameter, norms' gains and biases too")
    t.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.999), metavar=("B1", "B2"),
                   help="adamw's β₁ and β₂ (default 0.9 0.999)")
    t.add_argument("--eps", type=float, default=1e-8, help="adamw's ε (default 1e-8)")
    order = t.add_mutually_exclusive_group()
    order.add_argument("--shuffle", dest="shuffle", action="store_true", default=None,
                       help="shuffle the examples each epoch (a training algorithm's loops run in order by default)")
    order.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                       help="take the examples in order (a loss algorithm's are shuffled by default)")
    t.add_argument("--resume", metavar="DIR", help="go on from a run's -o DIR: its parameters, optimizer state, "
                   "step, data position and model sizes (give the run's own training options)")
    t.add_argument("--init", choices=["normal", "gpt2"], default="normal", help="without --weights: a seeded "
                   "N(0, 0.02²) (default), or GPT-2's init (residual projections scaled by 1/√(2L), biases 0, gains 1)")
    t.add_argument("--val-data", metavar="FILE", help="held-out data, read as --data is: its loss (the mean over its "
                   "examples) in the progress line, loss.csv (val_loss) and loss.svg")
    t.add_argument("--val-every", type=int, default=100, metavar="N", help="the validation loss every N steps and at "
                   "the last (default 100)")
    t.add_argument("--log-every", type=int, default=10, metavar="N", help="where stderr is no terminal, a progress "
                   "line every N steps (default 10)")
    t.add_argument("--train", action="append", metavar="NAME",
                   help="train only this parameter (repeatable; the rest stay frozen), e.g. LoRA's A and B")
    t.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32", help="what the forward and "
                   "backward compute in: fp32 (default), or bf16/fp16 under torch.autocast over float32 master "
                   "weights and optimizer state, fp16 with dynamic loss scaling (--backend torch)")
    add_backend_argument(t, "onnx", "onnx (onnxruntime, the default), tvm, numpy (the reference interpreter) or "
                         "torch (torch.optim; under torchrun, on its process group); the old spellings onnxruntime "
                         "and interpreter are read as onnx and numpy")
    t.add_argument("--torch-compile", action="store_true", help="--backend torch: run the loss module under "
                   "torch.compile (inductor's fused kernels); the first step compiles, far longer than a step")
    t.add_argument("--fsdp", action="store_true", help="--backend torch under torchrun: shard the model with FSDP2 "
                   "(fully_shard per layer) instead of DDP")
    add_provider_argument(t, "train")
    t.add_argument("--threads", type=int, help="onnxruntime threads (default: all cores)")
    t.add_argument("--no-arena", dest="arena", action="store_false",
                   help="free each of onnxruntime's tensors after its last use instead of keeping its memory arena "
                   "between steps: slower steps (GPT-2's shape: ~30 %%), a peak a few %% lower or higher by model")
    t.add_argument("--save-every", type=int, default=0, metavar="N", help="write a checkpoint every N steps")
    t.add_argument("-o", "--output", metavar="DIR", help="write the checkpoint (model.safetensors, and hf/ for a "
                   "HuggingFace model), the loss curve (loss.csv, loss.svg) and training.json here")
    t.add_argument("-O", dest="opt", type=int, default=2, metavar="LEVEL", help="optimisation level (default -O2)")


def run(args: argparse.Namespace) -> int:
    from pseudoformer.compile_options import from_arguments
    from pseudoformer.training.loop import TrainingSetup, run_training
    from pseudoformer.training.options import TrainingOptions

    options = from_arguments(args)  # backend, -O, threads, provider: how the step is compiled and run
    if args.save_every and args.output is None:
        print("error: --save-every needs -o DIR to save to", file=sys.stderr)
        return 1
    hyper = TrainingOptions(seq_len=args.seq_len, batch_size=args.batch_size, grad_accum=args.grad_accum,
                            loss_reduction=args.loss_reduction, epochs=args.epochs,
                            steps=args.steps, lr=args.lr, optimizer=args.optimizer, warmup=args.warmup,
                            clip=args.clip, weight_decay=args.weight_decay, betas=tuple(args.betas),
                            eps=args.eps, decay_all=args.decay_all, shuffle=args.shuffle, seed=args.seed,
                            save_every=args.save_every, precision=args.precision)
    setup = TrainingSetup(entry=args.entry, config=args.config, defines=tuple(args.defines or ()),
                          weights=args.weights, tokenizer=args.tokenizer,
                          trainable=tuple(args.train) if args.train is not None else None, out=args.output,
                          arena=args.arena, compile=options, objective=args.objective, resume=args.resume,
                          log_every=args.log_every, val_data=args.val_data, val_every=args.val_every, init=args.init,
                          include=tuple(args.include or ()), max_nodes=args.max_nodes,
                          allow_nonfinite=args.allow_nonfinite, fsdp=args.fsdp)
    result = run_training(args.file, args.data, hyper, setup)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 alone reports
        return 0
    last = f"{result.losses[-1]:.4f}" if result.losses else "none"
    saved = f"; saved to {result.out}" if result.out is not None else ""
    if result.interrupted:
        print(f"interrupted after step {result.steps}{saved}", file=sys.stderr)
        return 130 if result.out is None else 0
    if result.skipped:
        shown = ", ".join(map(str, result.skipped[:8])) + (", …" if len(result.skipped) > 8 else "")
        print(f"note: {len(result.skipped)} step{'s' if len(result.skipped) > 1 else ''} skipped, their fp16 "
              f"gradients overflowed at the loss scale (steps {shown}); the scale was halved each time",
              file=sys.stderr)
    print(f"trained {result.steps} steps, last loss {last}{saved}", file=sys.stderr)
    return 0
