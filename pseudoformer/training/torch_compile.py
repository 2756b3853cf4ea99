"""`train --backend torch --torch-compile`: the loss module under torch.compile, inductor's fused kernels in place
of eager's op-by-op forward and backward (torch_loop.TorchRuntime asks for it; the optimizer stays torch.optim's,
eager and fused).

How it is put together, each choice for a reason:
- After DDP or FSDP2, on the wrapped module: torch's documented order. DDP's notes say to apply the wrapper
  before compiling, so that Dynamo's DDPOptimizer splits the graph at DDP's gradient buckets and the all-reduce
  overlaps the backward; FSDP2's `fully_shard` goes on first as well, its hooks run eagerly around the graphs.
- Our parameter names are read off the plain module before any wrapping (torch_loop.py): the wrapper's own
  names (OptimizedModule's `_orig_mod.` prefix, DDP's `module.`) never reach a checkpoint or optimizer state.
- `dynamic=False`: a graph compiled for each input shape the run meets, kept (torch._dynamo's cache, guarded
  by the shape). A run meets few: the batch, the data's shorter last batch (the same every epoch, compiled once
  more at its first epoch), a shorter last micro-batch of --grad-accum, a rank's share of a batch that does not
  divide. The default (`dynamic=None`) would recompile at the second shape with the batch size symbolic and
  then run every step through that graph, its kernels generic in the batch: slower for the steps that are
  most of the run, to save one compile.
- `fullgraph=True` where the module is ours alone: the lowered module is plain torch code with no graph break
  (tests/backends/torch_backend/test_torch_module.py), so a break would be a lowering's bug, said at once
  rather than run slowly in pieces. Under DDP or FSDP2 the wrappers' hooks break the graph by design.
- Inductor's post-grad graph is rewritten by our rules (backends/torch/inductor_rules/, its
  `post_grad_custom_post_pass`, passed in torch.compile's options so that it holds for this module alone and
  for its backward, compiled at the first step): what autograd writes for our lowered module's backward and
  inductor fuses poorly on the CPU (a gather's backward, a tied embedding's two gradients, GELU's tanh). The rule set's
  hit counts stay on the compiled module as `inductor_rules`.
- The validation loss (`--val-data`) runs on the numpy interpreter (steps.py), not through this module, so it
  compiles nothing and needs no no_grad graph; --precision's autocast is entered around the compiled call,
  which Dynamo traces into the graph (the autocast state is part of its guard).
- What inductor cannot do (no C++ compiler, an op it has no lowering for, a Python torch.compile does not
  support) is one UsageError naming the cause and saying to drop --torch-compile (compile_errors), raised at
  the first step, where torch compiles: never a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pseudoformer.base.errors import UsageError

# Said once before the first step (training/loop.py), so that a long first step is not taken for a hang.
NOTE = ("--torch-compile: the first step compiles the loss module and its backward with inductor, which takes "
        "far longer than a step; a batch of another size (the data's shorter last one) compiles once more")


def compiled(module: Any, *, whole: bool, rules: bool = True) -> Any:
    """`module` (plain, or wrapped by DDP/FSDP2) under torch.compile: one graph per input shape, and with
    `whole` (no wrapper's hooks) one graph for the whole forward or an error; with `rules`, inductor's
    post-grad graph rewritten by ours (CompileOptions.inductor_rules)."""
    import torch

    from pseudoformer.backends.torch.inductor_rules import RULES, RuleSet

    rule_set = RuleSet(RULES if rules else ())
    options = {"post_grad_custom_post_pass": rule_set} if rules else {}
    try:
        out = torch.compile(module, dynamic=False, fullgraph=whole, options=options)
    except RuntimeError as e:  # this Python or platform has no torch.compile (said at the call, not lazily)
        raise UsageError(_refusal(e)) from None
    out.inductor_rules = rule_set
    return out


def _errors() -> tuple[type[BaseException], ...]:
    """The exceptions by which Dynamo and inductor say they cannot compile (inductor's own, raised bare from
    the backward's lazy compile, and Dynamo's wrappers of them)."""
    import torch._dynamo.exc as dynamo
    import torch._inductor.exc as inductor

    return (dynamo.TorchDynamoException, inductor.OperatorIssue, inductor.InvalidCxxCompiler,
            inductor.CppCompileError, inductor.SubgraphLoweringException)


@contextlib.contextmanager
def compile_errors() -> Iterator[None]:
    """Around a step of a compiled module: a compile's failure as one UsageError."""
    try:
        yield
    except _errors() as e:
        raise UsageError(_refusal(e)) from None


def _refusal(e: BaseException) -> str:
    return (f"--torch-compile: torch.compile could not compile the loss module ({_cause(e)}); drop --torch-compile "
            "to train it eagerly")


def _cause(e: BaseException) -> str:
    """The innermost exception, by its type and the first line of its message: Dynamo wraps inductor's
    (InductorError, BackendCompilerFailed) and appends advice on debugging variables that a user of train has no
    use for."""
    import torch._inductor.exc as inductor

    seen = {id(e)}
    while (inner := getattr(e, "inner_exception", None) or e.__cause__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        e = inner
    if isinstance(e, inductor.InvalidCxxCompiler):
        return "no C++ compiler: inductor builds its CPU kernels with one; install g++ or name one in CXX"
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = text if len(text) <= 300 else text[:297] + "…"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
