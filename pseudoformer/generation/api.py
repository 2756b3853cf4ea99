"""`pseudoformer.generate(...)` and `pseudoformer generate FILE`: run a file's inference algorithm.

The file's DInference/EDInference is checked and reduced to a GenerationPlan by the frontend; the
model it calls is loaded with its config and weights; settings come from the call (or command line),
else from the config's hyperparameters (τ, ℓ_gen, bos/eos tokens), else the defaults below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.frontend.generation_plan import GenerationPlan
from pseudoformer.generation.generator import Generation, Generator
from pseudoformer.generation.sampling import Sampling, SamplingError

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

DEFAULT_TEMPERATURE = 1.0


@dataclass
class Prepared:
    plan: GenerationPlan
    generator: Generator
    hyper: dict[str, Any]

    def setting(self, name: str | None) -> Any:
        return None if name is None else self.hyper.get(name)


def prepare(path: str | Path, options: CompileOptions | None = None, *, inference: str | None = None,
            config: str | Path | None = None, defines: list[str] | None = None, weights: str | Path | None = None,
            seed: int = 0, cache: bool = True, include: Sequence[str | Path] = (), max_nodes: int = MAX_NODES,
            allow_nonfinite: bool = False, **keywords: Any) -> Prepared:
    """Check `path`'s inference algorithm and build the generator for the model it calls.

    include, max_nodes, allow_nonfinite: as for `pseudoformer.load`; `options` (a CompileOptions) or
    keywords naming its fields (backend, quantize, contrib_ops, threads, int8_activations, ...): as for
    `generate`.
    """
    from pseudoformer.compile_options import from_keywords
    from pseudoformer.deploy import streams_weights
    from pseudoformer.frontend.inference import plan_inference
    from pseudoformer.frontend.modules import load_program
    from pseudoformer.model import load, resolve_source

    options = from_keywords(options, keywords, "generate", opt_level=2).runnable("generate")
    plan = plan_inference(load_program(resolve_source(path), include=include), inference)
    # ONNX: each checkpoint tensor is read (and quantized) as the generator's file is written, so that
    # onnxruntime's copy of the weights is the only one the process ever holds whole; TVM quantizing: as
    # each tensor TVM runs with is made (backends/tvm/weight_values.py), its copy the only one held.
    model = load(path, entry=plan.model, config=config, defines=defines, weights=weights, seed=seed, include=include,
                 max_nodes=max_nodes, allow_nonfinite=allow_nonfinite, lazy_weights=streams_weights(options))
    inputs = [n.attrs["name"] for n in model.graph.inputs if n.attrs["name"] != plan.encoder_input]
    if len(inputs) != 1:
        raise UsageError(f"{plan.model} takes {', '.join(inputs) or 'no inputs'}: generation needs exactly one "
                         "sequence fed back to it")
    output = model.output_names[0]
    generator = Generator(model, decoder_input=inputs[0], encoder_input=plan.encoder_input, output=output,
                          model_output=plan.model_output, cache=cache, options=options,
                          # the model was loaded here to generate: onnxruntime's copy of the weights is the only one
                          keep_weights=options.backend != "onnx")
    return Prepared(plan, generator, dict(model.config.hyperparameters))


def run_plan(prepared: Prepared, *, prompt_ids: Sequence[int] | Sequence[Sequence[int]] | None = None,
             encoder_ids: Sequence[int] | Sequence[Sequence[int]] | None = None, max_new_tokens: int | None = None,
             temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, eos_token: int | None = None,
             progress: Callable[[int], None] | None = None) -> tuple[Generation, list[list[int]]]:
    """Generate; returns the Generation and, per row, the sequence the algorithm returns."""
    plan = prepared.plan
    n = max_new_tokens if max_new_tokens is not None else prepared.setting(plan.max_new_tokens)
    if n is None:
        cap = f" or {plan.max_new_tokens} in the config" if plan.max_new_tokens else ""
        raise UsageError(f"how many tokens? give max_new_tokens (--max-new-tokens){cap}")
    tau = temperature if temperature is not None else prepared.setting(plan.temperature)
    try:
        sampling = Sampling(temperature=float(DEFAULT_TEMPERATURE if tau is None else tau), top_k=top_k, top_p=top_p)
    except SamplingError as e:
        raise UsageError(str(e)) from None
    eos = eos_token if eos_token is not None else prepared.setting(plan.eos_token)
    if prompt_ids is None:
        bos = prepared.setting(plan.bos_token)
        if bos is None:
            what = f"set {plan.bos_token} in the config" if plan.bos_token else "give prompt ids (--prompt-ids)"
            raise UsageError(f"{plan.algorithm} needs a start: {what}")
        prompt_ids = [int(bos)]
    if plan.encoder_input is not None and encoder_ids is None:
        raise UsageError(f"{plan.algorithm} conditions on {plan.encoder_input}: give encoder ids (--encoder-ids)")
    if plan.encoder_input is None and encoder_ids is not None:
        raise UsageError(f"{plan.model} is a decoder only: it takes no encoder ids")
    enc = {plan.encoder_input: encoder_ids} if plan.encoder_input is not None else None
    result = prepared.generator.generate(prompt_ids, max_new_tokens=int(n), sampling=sampling, seed=seed,
                                         eos_token=None if eos is None else int(eos), encoder_inputs=enc,
                                         progress=progress)
    prompts = [list(prompt_ids)] if isinstance(prompt_ids[0], int) else [list(p) for p in prompt_ids]
    returned = [(p + t) if plan.returns == "sequence" else t for p, t in zip(prompts, result.tokens, strict=True)]
    return result, returned


def generate(path: str | Path, prompt_ids: Sequence[int] | Sequence[Sequence[int]] | None = None, *,
             encoder_ids: Sequence[int] | None = None, max_new_tokens: int | None = None,
             temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, eos_token: int | None = None, weights: str | Path | None = None,
             config: str | Path | None = None, defines: list[str] | None = None, inference: str | None = None,
             cache: bool = True, options: CompileOptions | None = None, **keywords: Any) -> list[int] | list[list[int]]:
    """Run the inference algorithm of `path` (Algorithm 14 or 15 as written there) and return the new
    token ids (prompt excluded): a list for one prompt, a list per row for a batch.

    temperature 0 is greedy; None takes τ from the config, else 1. `cache=False` re-runs the model on
    the whole sequence every step, as the algorithm is written. The model is compiled as `options` (a
    CompileOptions) or keywords naming its fields say: backend ("onnx", the default; "tvm", "numpy"),
    `quantize` ("int4", "int8" or a QuantizeOptions) generates with block-quantized weights, as
    `compile(quantize=...)` makes them; `contrib_ops` (ONNX) uses onnxruntime's GroupQueryAttention and
    Skip(Simplified)LayerNormalization where they compute the same, with the cache kept in buffers they
    append to (docs/generation.md).
    """
    prepared = prepare(path, options, inference=inference, config=config, defines=defines, weights=weights,
                       cache=cache, **keywords)
    result, _ = run_plan(prepared, prompt_ids=prompt_ids, encoder_ids=encoder_ids, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, eos_token=eos_token)
    single = prompt_ids is None or isinstance(prompt_ids[0], int)
    return result.tokens[0] if single else result.tokens
