"""`pseudoformer generate FILE`: the generated ids on one line of stdout, progress on stderr."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

from pseudoformer.base.errors import UsageError
from pseudoformer.base.terminal import escape
from pseudoformer.compile_options import add_backend_argument, add_provider_argument
from pseudoformer.quantization import add_arguments as add_quantize_arguments
from pseudoformer.run_settings import check_seed
from pseudoformer.tokenizer import open_tokenizer


def add_parser(sub: argparse._SubParsersAction, model_args: Callable[..., None]) -> None:
    """The `generate` subcommand, with the model options every command shares (cli.py)."""
    g = sub.add_parser("generate", help="sample tokens with a file's inference algorithm (Algorithm 14 or 15)")
    g.add_argument("file", metavar="FILE", help="a .alg file with an inference algorithm (e.g. models/gpt2.alg)")
    model_args(g, entry=False)
    g.add_argument("--inference", metavar="NAME", help="which inference algorithm, if the file has several")
    g.add_argument("--weights", help="a safetensors or GGUF file, or a HuggingFace checkpoint directory "
                   "(default: random)")
    g.add_argument("--allow-nonfinite", action="store_true",
                   help="load weights that hold NaN or ±∞ (refused by default, naming the tensors)")
    g.add_argument("--prompt", metavar="TEXT", help="the prompt as text, encoded with the tokenizer (--tokenizer, "
                   "else the tokenizer.json of the --weights checkpoint directory, or a GGUF file's own vocabulary)")
    g.add_argument("--prompt-ids", metavar="IDS", help='the prompt as token ids, e.g. "464 2068 7586"')
    g.add_argument("--encoder-ids", metavar="IDS", help="an encoder–decoder's context z, as token ids")
    g.add_argument("--max-new-tokens", type=int, metavar="N", help="at most N new tokens (default: ℓ_gen)")
    g.add_argument("--temperature", type=float, metavar="TAU", help="τ in q ∝ p^{1/τ}; 0 is greedy (default: τ)")
    g.add_argument("--top-k", type=int, metavar="K", help="sample among the K most likely tokens")
    g.add_argument("--top-p", type=float, metavar="P", help="sample among the fewest tokens holding mass P")
    g.add_argument("--seed", type=int, help="seed of the sampler (a whole number ≥ 0), for reproducible samples")
    g.add_argument("--eos-token-id", type=int, metavar="ID", help="stop a row at this token (default: eos_token)")
    add_backend_argument(g, "onnx", "onnx (default), tvm, or numpy (the reference interpreter)")
    add_provider_argument(g, "generate")
    g.add_argument("--dtype", default="float32", help="onnx: float32 (default) or float16 (the model and its "
                   "cache in half precision, reductions and softmaxes in float32)")
    g.add_argument("--no-cache", action="store_true",
                   help="re-run the model on the whole sequence every step, as the algorithm is written")
    g.add_argument("--threads", type=int, help="onnxruntime threads, 1 to 4 × the cores (default: all cores)")
    g.add_argument("--tokenizer", metavar="FILE", help="a tokenizers tokenizer.json (or a GGUF file): also print the text (default "
                   "with --prompt: the checkpoint's)")
    g.add_argument("--contrib-ops", action="store_true",
                   help="onnx: onnxruntime's own kernels where they compute the same and faster "
                   "(GroupQueryAttention appending to a cache kept in buffers, Skip(Simplified)LayerNormalization)")
    g.add_argument("--cuda-graph", action="store_true",
                   help="with --provider cuda --dtype float16 --contrib-ops: the decode step captured once as a CUDA "
                   "graph (onnxruntime's) and replayed per token")
    add_quantize_arguments(g)


def parse_ids(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    body = text.strip()
    listed = body.startswith("[") and body.endswith("]")  # a JSON list, "[464, 2068]": commas separate there
    parts = [p for p in re.split(r"\s*,\s*|\s+" if listed else r"\s+", body[1:-1] if listed else body) if p]
    if not parts or not all(re.fullmatch(r"\d+", p) for p in parts):
        # "1,000" is not read as the ids 1 and 0: outside a [list], ids are separated by spaces only.
        raise UsageError(f"{flag} takes token ids: non-negative integers separated by spaces (\"464 2068\") or a list "
                         f"(\"[464, 2068]\"), got {escape(text)!r}")
    return [int(p) for p in parts]


class _Progress:
    """`generate ▕████▏ 12/32 tokens, ms/token` on stderr: a tqdm bar, called with the tokens done so far. On a
    terminal only: in a log (stderr no terminal) a bar is carriage-returned lines, so one plain line at the end,
    as train writes plain lines there."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar = None  # made at the first token: a refusal before it (too many tokens) prints no bar
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.done = 0

    def __call__(self, done: int) -> None:
        self.done = done
        if not self.tty:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc="generate", unit="token", file=sys.stderr,
                            bar_format="{desc} ▕{bar:24}▏ {n_fmt}/{total_fmt} tokens {postfix}")
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(f"{(time.perf_counter() - self.start) / done * 1e3:5.0f} ms/token")

    def finish(self, done: int) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.done:
            sys.stderr.write(f"generated {self.done} tokens, {(time.perf_counter() - self.start) / self.done * 1e3:.0f} "
                             "ms/token\n")
        if done < self.total:  # stopped early at the end token
            sys.stderr.write("(stopped at the end token)\n")


def run(args: argparse.Namespace) -> int:
    from pseudoformer.compile_options import from_arguments
    from pseudoformer.generation.api import prepare, run_plan

    options = from_arguments(args)  # before any work: options that do not go together
    if args.prompt is not None and args.prompt_ids is not None:
        raise UsageError("give the prompt once: as text (--prompt) or as token ids (--prompt-ids)")
    prompt = parse_ids(args.prompt_ids, "--prompt-ids")
    encoder = parse_ids(args.encoder_ids, "--encoder-ids")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    path = args.tokenizer or (_checkpoint_tokenizer(args.weights) if args.prompt is not None else None)
    tokenizer = open_tokenizer(path) if path else None
    if args.prompt is not None:
        prompt = tokenizer.encode(args.prompt)
        if not prompt:
            raise UsageError(f"the prompt {escape(args.prompt)!r} encodes to no tokens")
    check_seed(args.seed)
    prepared = prepare(args.file, options, inference=args.inference, config=args.config, defines=args.defines,
                       weights=args.weights, cache=not args.no_cache, include=args.include,
                       max_nodes=args.max_nodes, allow_nonfinite=args.allow_nonfinite)
    n = args.max_new_tokens if args.max_new_tokens is not None else prepared.setting(prepared.plan.max_new_tokens)
    progress = _Progress(int(n)) if n else None
    result, _ = run_plan(prepared, prompt_ids=prompt, encoder_ids=encoder, max_new_tokens=args.max_new_tokens,
                         temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                         eos_token=args.eos_token_id, progress=progress)
    tokens = result.tokens[0]
    if progress is not None:
        progress.finish(len(tokens))
    print(" ".join(str(t) for t in tokens))
    if tokenizer is not None:
        # Decoded text is the tokenizer file's to choose: escaped, it cannot drive the terminal.
        print(escape(tokenizer.decode(tokens), keep="\n\t"))
    return 0


def _checkpoint_tokenizer(weights: str | None) -> str:
    """The tokenizer the --weights checkpoint holds (a HF directory's tokenizer.json, a GGUF file's
    vocabulary), which --prompt encodes with."""
    from pseudoformer.weights import WeightsError, open_checkpoint

    needs = ("--prompt needs a tokenizer: give --tokenizer tokenizer.json, or --weights a HuggingFace checkpoint "
             "directory that holds one, or a GGUF file")
    if weights is None:
        raise UsageError(needs)
    try:
        checkpoint = open_checkpoint(weights)
    except WeightsError as e:
        raise UsageError(str(e)) from None
    found = checkpoint.tokenizer()
    if found is None and checkpoint.directory is not None:
        raise UsageError(f"--prompt needs a tokenizer, and {weights} has no tokenizer.json: give --tokenizer FILE")
    if found is None:
        raise UsageError(needs)
    return str(found.path)


