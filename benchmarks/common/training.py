"""What the training benchmarks share (bench_train.py, profile_train.py, profile_train_vs_torch.py,
bench_update_pieces.py): the workloads' shapes, their HF models, our step on onnxruntime and on the torch
backend (eager or under torch.compile), torch eager's, and the batches."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests/training's loss algorithms and LoRA cases
    sys.path.insert(0, str(ROOT))

LOSSES = ROOT / "tests" / "training"
SHAPES = {
    "gpt2": dict(n_embd=512, n_layer=4, n_head=8, n_positions=1024, vocab_size=50257),
    "gpt2small": dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257),  # GPT-2 small itself
    "smollm2": dict(num_hidden_layers=30),  # the rest: lora_cases.SMOLLM2
}
QUICK = {
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=101),
    "gpt2small": dict(n_embd=48, n_layer=2, n_head=4, n_positions=64, vocab_size=101),
    "smollm2": dict(vocab_size=97, hidden_size=36, intermediate_size=48, num_hidden_layers=2, num_attention_heads=3,
                    num_key_value_heads=1, head_dim=12, max_position_embeddings=64),
}

def gpt2_like(workload: str) -> bool:
    """Whether a workload is GPT-2 trained whole (gpt2, gpt2small), not LoRA on a Llama."""
    return workload.startswith("gpt2")


def hf_model(workload: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.models.llama_cases import hf_model as hf_llama
    from tests.training.lora_cases import SMOLLM2

    sizes = dict((QUICK if args.quick else SHAPES)[workload])
    if args.layers:
        sizes["n_layer" if gpt2_like(workload) else "num_hidden_layers"] = args.layers
    if gpt2_like(workload):
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(**sizes, bos_token_id=0, eos_token_id=0)).eval()
    return hf_llama("llama", 0, **{**SMOLLM2, **sizes})


def ours(workload: str, directory: Path, args: argparse.Namespace, *,  # type: ignore[no-untyped-def]
         profile: bool = False, plain: bool = False, one_graph: bool = False, only_one_graph: bool = False,
         whole_update: bool = False, update_chunk: int | None = None, without: str | None = None):
    """Our step on onnxruntime, split and in place (and, with `plain`, a second session of the step compiled
    without the training step's rewrite rules; with `without`, the split step compiled without that one pass of
    the "training-step" pipeline; with `one_graph`, the same step as one graph, double-buffered;
    `only_one_graph`: that alone; with `whole_update`, the split step with its update over whole tensors;
    `update_chunk`: the first runtime's update pieces, passes/update_chunks.py), and the step graph's
    node count."""
    from onnxruntime import SessionOptions

    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.compile import compile_step
    from pseudoformer.training.loop import _load
    from pseudoformer.training.runtimes import OrtSplitStep, OrtStep, make_runtime
    from tests.training.lora_cases import is_adapter, lora_model

    if gpt2_like(workload):
        model, _, _ = _load(LOSSES / "gpt2_loss.alg", directory, 0)
        train = list(model.weights)
    else:
        model = lora_model(directory)
        train = [k for k in model.weights if is_adapter(k)]
    step = compile_step(model.graph, model.weights, train=train, optimizer=Optimizer("adamw"))
    plain_step = without_step_rules(compile_step, model, train) if plain else None
    step_without = without_step_rules(compile_step, model, train, [without]) if without else None
    del model
    def options(pairs: list[str]) -> dict[str, object]:
        return {k: type(getattr(SessionOptions(), k))(int(v) if v.isdigit() else v)
                for k, v in (o.split("=", 1) for o in pairs)}

    session = options(args.ort)
    if only_one_graph:
        return [OrtStep(step.graph, step.frozen, step.state, threads=args.threads, session=session)], None
    chunk = {} if update_chunk is None else {"update_chunk": update_chunk}
    runtimes = [make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split,
                             threads=args.threads, profile=profile, session=session, **chunk)]
    if not isinstance(runtimes[0], OrtSplitStep):
        print("ours: the update graph failed the in-place check; the step runs as one graph", file=sys.stderr)
    if args.ort_b:
        runtimes.append(make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split,
                                     threads=args.threads, session=options(args.ort_b), **chunk))
    if plain_step is not None:
        runtimes.append(OrtStep(plain_step.graph, plain_step.frozen, plain_step.state, threads=args.threads,
                                session=session))
    if step_without is not None:
        runtimes.append(make_runtime("onnxruntime", step_without.graph, step_without.frozen, step_without.state,
                                     split=step_without.split, threads=args.threads, session=session, **chunk))
    if one_graph:
        runtimes.append(OrtStep(step.graph, step.frozen, step.state, threads=args.threads, session=session))
    if whole_update:
        runtimes.append(make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split,
                                     threads=args.threads, session=session, update_chunk=0))
    return runtimes, len(step.graph.nodes())


def ours_torch(workload: str, directory: Path, args: argparse.Namespace, compiled: bool,  # type: ignore[no-untyped-def]
               rules: bool = True):
    """Our step on the torch backend, as `train --backend torch` runs it (training/torch_loop.TorchRuntime: the
    same loss algorithm and weights lowered to a torch module, autograd, torch.optim's fused AdamW), with
    `compiled` under torch.compile (`--torch-compile`; without `rules`, without our rewrites of inductor's
    graph): a function of a batch that steps and returns its loss."""
    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.passes.training_step import Optimizer
    from pseudoformer.training.loop import _load
    from pseudoformer.training.torch_loop import torch_step
    from tests.training.lora_cases import is_adapter, lora_model

    if gpt2_like(workload):
        model, _, _ = _load(LOSSES / "gpt2_loss.alg", directory, 0)
        train = None
    else:
        model = lora_model(directory)
        train = [k for k in model.weights if is_adapter(k)]
    options = CompileOptions(backend="torch", threads=args.threads, torch_compile=compiled, inductor_rules=rules)
    _, runtime = torch_step(model.graph, model.weights, train, Optimizer("adamw"), 2, {}, None, options=options)
    del model
    return lambda x: runtime.step({"x": x}, 1e-4)


def without_step_rules(compile_step, model, train, passes: list[str] | None = None):  # type: ignore[no-untyped-def]
    """The step compiled with the "training-step" pipeline cut to its clean-ups (no rewrite rules), or with only
    `passes` left out of it."""
    from pseudoformer.passes import manager
    from pseudoformer.passes.training_step import Optimizer

    saved = manager.PIPELINES["training-step"]
    unknown = set(passes or []) - set(saved)
    if unknown:
        raise SystemExit(f"not passes of the training-step pipeline: {', '.join(sorted(unknown))} "
                         f"(it runs {', '.join(saved)})")
    manager.PIPELINES["training-step"] = ([p for p in saved if p not in passes] if passes is not None
                                          else manager.LEVELS[1])
    try:
        return compile_step(model.graph, model.weights, train=train, optimizer=Optimizer("adamw"))
    finally:
        manager.PIPELINES["training-step"] = saved


def torch_step(hf, workload: str, compiled: bool, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import torch

    from tests.training.lora_cases import adapter_values, torch_lora

    if gpt2_like(workload):
        for p in hf.parameters():
            p.requires_grad_(True)
    else:
        hf = torch_lora(hf, adapter_values(hf.config))
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


def batches(vocab: int, args: argparse.Namespace, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab, (args.batch, args.seq), dtype=np.int64) for _ in range(count)]
