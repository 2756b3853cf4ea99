"""What a compile is asked for, in one frozen value, from the command line (pseudoformer/compile_options.py
reads it off any command's arguments) or the API (its keywords) down to the backends: which passes run
(backends/pipeline.py assembles them from it), how the ONNX backend writes the result (backends/onnx/lower.py)
and what TVM builds for (backends/tvm/build.py).

A field with a `flag` is a command-line option: compile_options.from_arguments reads the argument of the
same name (the flag without its dashes) off whatever command was run, so that a new compile flag is this
field, one argparse line, and, if it goes with some options and not others, a rule in `problems`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError

if TYPE_CHECKING:
    from pseudoformer.passes.quantize import QuantizeOptions

# Each backend and the commands that run on it, in the one spelling every command takes (--backend).
BACKENDS: dict[str, tuple[str, ...]] = {
    "numpy": ("run", "generate", "train"),  # the reference interpreter: nothing to write a file of
    "onnx": ("compile", "inspect", "run", "generate", "train", "genai"),
    "tvm": ("compile", "inspect", "run", "generate", "train"),
    # a torch.nn.Module from the API (deploy_torch.py), and train's torch.optim trainer (training/torch_loop.py)
    "torch": ("compile", "train"),
}
# The spellings `train` took before the one above (its runtimes' names); read as the new, with a note.
OLD_SPELLINGS = {"interpreter": "numpy", "onnxruntime": "onnx"}
PROVIDERS = ("cpu", "cuda")
DTYPES = ("float32", "float16")
# Why --dtype bfloat16 is refused (issue 38): onnxruntime 1.32's CPU provider runs no bfloat16 arithmetic at all
# (MatMul, Add, Mul, Softmax, ReduceSum, GroupQueryAttention, MatMulNBits each refuse a bf16 session: only
# Cast, data movement and its layer norms build one), so no test on a machine without a GPU could run a bf16
# model; the CUDA provider has bf16 MatMul, GroupQueryAttention, MatMulNBits and the skip norms, but not Pad,
# Cos, comparisons or Log, which our graphs use. Built where a CUDA test can check it, or not at all.
BFLOAT16 = ("--dtype bfloat16 is not offered: onnxruntime's CPU provider has no bfloat16 arithmetic (MatMul, Add, "
            "Softmax, GroupQueryAttention, MatMulNBits), so it could not be checked here; use float16 (CPU and CUDA, "
            "the same memory as bfloat16) or float32")
TVM_PARAMS = ("args", "bind")
# The ONNX opsets --opset takes (backends/onnx/lower.py): Shape(start, end) needs 15, single-axis Softmax 13,
# Min/Max on every dtype 17; onnxruntime 1.31, the version pyproject requires, loads opsets up to 26.
MIN_OPSET = 17
MAX_OPSET = 26
# Where a command runs a model on a provider other than the CPU, and on which backends; the rest say why
# not (problems). A compile's provider is where its model's .run runs by default.
# train --backend torch: each process on a GPU (its LOCAL_RANK's) with --provider cuda, on the CPU without.
CUDA_RUNS = {"run": ("onnx",), "compile": ("onnx",), "generate": ("onnx",), "train": ("onnx", "torch")}
# What --provider cuda is on each backend CUDA_RUNS names (the flag's help says it per command).
CUDA_MEANS = {"onnx": "onnxruntime's CUDA provider",
              "torch": "torch's CUDA device, each process's LOCAL_RANK GPU under torchrun"}
# The commands that run a model as they are given: a provider the installed onnxruntime lacks is refused before
# anything is compiled for it (backends/onnx/providers.require_installed). A compile's provider is where its
# .run runs later, perhaps on another machine.
RUNS_NOW = ("run", "generate", "train")
# What --torch-compile's refusal says each other backend does instead (its own compiler, or none)
TORCH_COMPILE_ELSE = {"onnx": "has onnxruntime optimise its step graph", "tvm": "compiles its step with TVM",
                      "numpy": "interprets the step, the reference"}
# What an onnxruntime-genai folder's graph is (cli_genai.py): an ONNX decoder in float32 or float16 at -O2.
GENAI = {"backend": "onnx", "padding_mask": False, "functions": False, "tvm_params": None,
         "target": "llvm", "opt_level": 2, "opset": None}


def _cuda_graph_problems(options: CompileOptions, command: str) -> list[str]:
    """What --cuda-graph lacks: it is generate's and a --genai-folder's, and replays onnxruntime's fp16
    GroupQueryAttention step on CUDA (the CUDA provider has no fp32 GroupQueryAttention: an fp32 step would run its
    attention on the host)."""
    if command not in ("generate", "genai"):
        return ["--cuda-graph is generate's and --genai-folder's (a decode step replayed as one CUDA graph)"]
    need = [flag for flag, ok in (("--backend onnx", options.backend == "onnx"),
                                  ("--provider cuda", options.provider == "cuda"),
                                  ("--dtype float16", options.dtype == "float16"),
                                  ("--contrib-ops", options.contrib_ops)) if not ok]
    if not need:
        return []
    return [f"--cuda-graph replays onnxruntime's float16 GroupQueryAttention decode step on the GPU: it needs "
            f"{' '.join(need)}"]


def _flag(default: Any, name: str) -> Any:
    return field(default=default, metadata={"flag": name})


@dataclass(frozen=True)
class CompileOptions:
    """backend: "onnx", "tvm" or "numpy" (the reference interpreter, for the commands that run a model).
    opt_level: the optimisation level run first (0 runs nothing: the graph is taken as given, already
    optimised, as to_onnx takes a derived decoder's). padding_mask: an attention_mask input per token
    input. quantize: how the weight matrices are quantized (None: they are not). dtype: "float32" or
    "float16". contrib_ops: onnxruntime's com.microsoft kernels where they compute the same (the
    onnx-contrib pipeline); the file then runs on onnxruntime only. opset, ir_version: the ONNX opset
    (default backends/onnx/lower.DEFAULT_OPSET) and IR version (default: the lowest that carries it).
    functions: each algorithm call an ONNX local function. metadata: the model's metadata_props.
    check: run onnx's checker on the result. kv_buffers (with contrib_ops, for a derived decode step):
    the name of an int64 [1] input giving the cache's past length, so that the past keys and values
    can be buffers of any greater length that GroupQueryAttention appends to in place.
    lazy_weights: the weights a pass makes (quantized matrices) are LazyTensors, each computed when the
    writer loads it (passes/quantized_params.py), for a compile whose weights are written once.
    fold_weights: what is computed from weights alone (per-head projections stacked and transposed) is
    computed lazily and read as new weights named folded.<i> (passes/fold_constants.py): onnxruntime then
    folds nothing when a session starts, which cost the folded weights' bytes a second time; for files
    nobody reads by the paper's names (generation's).
    target: TVM's target, "llvm" (this CPU) or "cuda". tvm_params: "args" (None: the default) passes a TVM
    model's weights at run time, "bind" compiles them in. int8_activations: TVM's 4-bit products round
    their activations to int8 per block (backends/tvm/nbits_int8.py; a CPU option).
    provider: where the compiled model runs, "cpu" or "cuda" (onnxruntime's execution provider).
    threads: the runtime's intra-op threads (None: its default).
    torch_compile: train --backend torch runs its loss module under torch.compile (inductor), compiled at the
    first step (training/torch_compile.py); inductor_rules (API only, on by default): with it, our rewrites of
    inductor's post-grad graph (backends/torch/inductor_rules/), off for a before/after.
    cuda_graph: generate's decode step replayed as one CUDA graph (onnxruntime's enable_cuda_graph,
    generation/decode_graph.py); in a lowering with kv_buffers, the step written so that the host reads only
    sizes (backends/onnx/lowerings/group_query_attention.py)."""

    backend: str = _flag("onnx", "--backend")
    opt_level: int = _flag(0, "-O")
    padding_mask: bool = _flag(False, "--padding-mask")
    quantize: QuantizeOptions | None = _flag(None, "--quantize")
    dtype: str = _flag("float32", "--dtype")
    contrib_ops: bool = _flag(False, "--contrib-ops")
    opset: int | None = _flag(None, "--opset")
    ir_version: int | None = None
    functions: bool = _flag(False, "--functions")
    metadata: Mapping[str, str] | None = field(default=None, compare=False)
    check: bool = True
    kv_buffers: str | None = None
    lazy_weights: bool = False
    fold_weights: bool = False
    target: str = _flag("llvm", "--target")
    tvm_params: str | None = _flag(None, "--tvm-params")
    int8_activations: bool = _flag(False, "--accuracy-level")
    provider: str = _flag("cpu", "--provider")
    threads: int | None = _flag(None, "--threads")
    torch_compile: bool = _flag(False, "--torch-compile")
    inductor_rules: bool = True
    cuda_graph: bool = _flag(False, "--cuda-graph")

    def with_fields(self, given: Mapping[str, Any]) -> CompileOptions:
        """These options with `given` (keyword arguments of to_onnx) set; a name that is no field is a TypeError."""
        unknown = sorted(set(given) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"no compile option {', '.join(unknown)}")
        return replace(self, **given) if given else self

    def for_derived(self) -> CompileOptions:
        """These options for a graph derived from the model after its passes ran (generation's prefill, step,
        genai's step): the backend's part only, since the level, padding and quantization are done."""
        return replace(self, opt_level=0, padding_mask=False, quantize=None)

    def problems(self, command: str = "compile") -> list[str]:
        """What in these options does not go together, or does not go with `command` ("compile", "inspect",
        "run", "generate", "train", or "genai": compile --genai-folder), one sentence each."""
        out: list[str] = []
        b = self.backend
        takes = [name for name, commands in BACKENDS.items() if command in commands]
        if b not in BACKENDS:
            out.append(f"unknown backend {b!r} (choose {_either(takes)})")
        elif b not in takes and command != "genai":
            out.append(f"{command} does not take --backend {b} (choose {_either(takes)})")
        if self.dtype == "bfloat16":
            out.append(BFLOAT16)
        elif self.dtype not in DTYPES:
            out.append(f"unknown dtype {self.dtype!r} (choose {_either(DTYPES)})")
        from pseudoformer.passes.manager import LEVELS

        if self.opt_level not in LEVELS:
            out.append(f"no optimisation level -O{self.opt_level} (choose {', '.join(f'-O{k}' for k in LEVELS)})")
        if self.provider not in PROVIDERS:
            out.append(f"unknown provider {self.provider!r} (choose {_either(PROVIDERS)})")
        elif self.provider != "cpu" and command != "genai":
            if command not in CUDA_RUNS:
                out.append(f"--provider {self.provider}: {command} runs on the CPU only for now (its runtimes "
                           "take no CUDA provider yet)")
            elif b not in CUDA_RUNS[command]:
                where = "tvm builds for --target cuda instead" if b == "tvm" else f"{b} runs on the CPU"
                out.append(f"--provider {self.provider} is for the {_either(CUDA_RUNS[command])} backend; {where}")
        if self.cuda_graph:
            out.extend(_cuda_graph_problems(self, command))
        if command == "generate" and self.dtype != "float32" and b in BACKENDS and b != "onnx":
            out.append(f"--dtype {self.dtype} is for the onnx backend; {b} generates in float32")
        if self.opset is not None:  # said where every option is checked: `inspect` lowers nothing to refuse it later
            if isinstance(self.opset, bool) or not isinstance(self.opset, int) or \
                    not MIN_OPSET <= self.opset <= MAX_OPSET:
                out.append(f"--opset {self.opset!r}: pick one from {MIN_OPSET} to {MAX_OPSET}")
        problem = threads_problem(self.threads)
        if problem:
            out.append(problem)
        elif self.threads is not None and b == "tvm":
            out.append("the TVM backend sizes its own thread pool (TVM_NUM_THREADS); --threads is for onnx")
        if command == "genai":
            given = [_spelled(name, getattr(self, name)) for name, want in GENAI.items() if getattr(self, name) != want]
            if given:
                out.append(f"{', '.join(given)}: an onnxruntime-genai folder is an ONNX decoder in float32 or "
                           "float16 at -O2, with genai's attention_mask and position_ids (--genai-folder takes "
                           "--dtype, --provider, --quantize, --contrib-ops and --cuda-graph)")
            return out
        if self.target != "llvm" and b != "tvm":
            out.append(f"--target {self.target} is for the tvm backend; ONNX files run wherever onnxruntime does")
        if self.tvm_params is not None and b != "tvm":
            out.append("--tvm-params is for the tvm backend")
        elif self.tvm_params not in (None, *TVM_PARAMS):
            out.append(f"--tvm-params {self.tvm_params}: choose {_either(TVM_PARAMS)}")
        if self.padding_mask and b != "onnx":
            out.append("--padding-mask is for the onnx backend")
        if self.functions and b != "onnx":
            out.append("--functions is for the onnx backend")
        if self.contrib_ops and b != "onnx":
            out.append("--contrib-ops is for the onnx backend (onnxruntime's com.microsoft kernels)")
        if self.quantize is not None and b == "torch":
            out.append("--quantize is for the onnx and tvm backends")
        if self.torch_compile and b in BACKENDS and b != "torch":
            out.append(f"--torch-compile puts the torch backend's loss module under torch.compile: add --backend "
                       f"torch (the {b} backend {TORCH_COMPILE_ELSE.get(b, 'compiles its own step')})")
        elif self.torch_compile and command != "train":
            out.append("--torch-compile is train's: pseudoformer.compile(..., backend=\"torch\") returns a plain "
                       "torch.nn.Module, which torch.compile takes as it is")
        if self.int8_activations and (b != "tvm" or self.quantize is None):
            out.append("int8 activations are the tvm backend's int4 products: use them with --backend tvm "
                       "--quantize int4")
        return out

    def checked(self, command: str = "compile") -> CompileOptions:
        """These options, if they go together for `command`; else a UsageError naming every problem."""
        problems = self.problems(command)
        if problems:
            raise UsageError("; ".join(problems))
        return self

    def runnable(self, command: str) -> CompileOptions:
        """These options, if this machine can run them now: a provider the installed onnxruntime lacks is
        refused in one line naming pseudoformer[gpu], before anything is compiled for it. Asked by the commands
        that run a model as they are given (RUNS_NOW), not when options are read: a compile's provider is where
        its .run runs later, perhaps elsewhere."""
        if command in RUNS_NOW and self.provider != "cpu" and self.backend == "torch":
            import torch

            if not torch.cuda.is_available():
                raise UsageError(f"--provider {self.provider}: this torch ({torch.__version__}) sees no CUDA device")
        elif command in RUNS_NOW and self.provider != "cpu" and self.backend in CUDA_RUNS.get(command, ()):
            from pseudoformer.backends.onnx.providers import require_installed
            from pseudoformer.base.errors import BackendError

            try:
                require_installed(self.provider)
            except BackendError as e:
                raise UsageError(str(e)) from None
        return self


def _either(names: Any) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _spelled(name: str, value: Any) -> str:
    """How the command line writes an option's value: -O1, --padding-mask, --dtype float16."""
    flag = next(f.metadata["flag"] for f in fields(CompileOptions) if f.name == name)
    if flag == "-O":
        return f"-O{value}"
    return flag if isinstance(value, bool) or name == "opset" else f"{flag} {value}"


def threads_problem(threads: object) -> str | None:
    """Threads: 1 to THREADS_PER_CORE × the cores this process may use (None: the runtime's default)."""
    from pseudoformer.base.limits import THREADS_PER_CORE, cores, max_threads

    if threads is None:
        return None
    top = max_threads()
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= top:
        return (f"--threads must be between 1 and {top} ({THREADS_PER_CORE} × the {cores()} cores this process "
                f"may use), got {threads!r}")
    return None
