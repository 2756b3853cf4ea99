"""An onnxruntime-genai model folder: `pseudoformer compile FILE --weights DIR --genai-folder OUT`.

onnxruntime-genai (C, C#, Java and Python APIs; mobile builds) loads a decoder from a folder of

    model.onnx, model.onnx.data   one graph for the prompt and every step (passes/genai_interface.py)
    genai_config.json             the graph's names and sizes, the special tokens, the search defaults
    tokenizer.json, …             the checkpoint's tokenizer files, its chat template among them

The graph is the decode step the compiler derives for generation (passes/kv_cache.py) with genai's
interface; it is compiled as `pseudoformer generate` compiles its step (the model's passes, quantization
included, float16 as generation/precision.py makes it, then the onnx backend's), so that genai's tokens
are those of `pseudoformer generate` with the same options. Provider "cuda" names genai's CUDA provider
in the config (onnxruntime-genai-cuda), with TF32 off as our own CUDA sessions have it.
Every file is written as one set (atomic_write.atomic_set), genai_config.json last but for model.onnx.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import FileCopy, loads_json, read_inside

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.model import Model
    from pseudoformer.passes.quantize import QuantizeOptions

MODEL_FILE = "model.onnx"
CONFIG_FILE = "genai_config.json"
# The checkpoint's files that genai's tokenizer (onnxruntime-extensions) and chat template read, when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja",
                   "chat_template.json")
# genai_config.json's provider_options per provider: the CUDA options genai's builder writes (CUDA graphs off:
# genai captures one only where every buffer is fixed, which a cache grown by concatenation is not; on with
# --cuda-graph, for the fp16 GroupQueryAttention step whose past and present are one buffer) and TF32 off, so that
# an fp32 folder computes what `generate --provider cuda` does.
GENAI_PROVIDERS: dict[str, list[dict[str, dict[str, str]]]] = {
    "cpu": [], "cuda": [{"cuda": {"enable_cuda_graph": "0", "use_tf32": "0"}}]}


@dataclass
class GenaiFolder:
    """What was written: the folder, its files, and the config genai reads."""

    path: Path
    files: list[str]
    config: dict[str, Any]
    quantize: QuantizeOptions | None


def export(model: Model, out: str | Path, options: CompileOptions | None = None, *,
           weights: str | Path | None = None, output: str | None = None, log: bool = False,
           **keywords: Any) -> GenaiFolder:
    """Write `model` (a decoder) as an onnxruntime-genai folder `out`; `weights`, a HuggingFace checkpoint
    directory, gives the tokenizer files and the special tokens. `log`: the model returns probabilities,
    and the folder's logits are their log (genai takes a softmax of them). `options` (or keywords naming
    its fields): quantize, contrib_ops, dtype ("float16": the step and its cache in fp16) and provider (the
    one genai's config names); the rest must be what a folder is (CompileOptions.problems)."""
    from pseudoformer.backends.onnx import BackendError
    from pseudoformer.backends.onnx.compile import lower_model
    from pseudoformer.backends.onnx.save import save_model
    from pseudoformer.backends.pipeline import model_passes, run
    from pseudoformer.compile_options import from_keywords
    from pseudoformer.generation.precision import half, half_weights
    from pseudoformer.inputs import size_limit
    from pseudoformer.model import model_metadata
    from pseudoformer.optimize import debugging
    from pseudoformer.passes.contrib_ops import KvLengthsError
    from pseudoformer.passes.genai_interface import INPUT_IDS, LOGITS, genai_step
    from pseudoformer.passes.generation_passes import incremental
    from pseudoformer.passes.pass_base import PassContext
    from pseudoformer.weights import open_checkpoint

    options = from_keywords(options, keywords, "genai", opt_level=2)
    quantize, contrib_ops = options.quantize, options.contrib_ops
    tokens = [n.attrs["name"] for n in model.graph.inputs]
    if len(tokens) != 1:
        raise UsageError(f"{model.entry} takes {', '.join(tokens)}: an onnxruntime-genai decoder takes one "
                         "sequence of token ids")
    output = output or model.output_names[0]
    out = _folder(out)
    checkpoint = open_checkpoint(weights).directory if weights is not None else None  # its files go along
    passes = replace(options, lazy_weights=True)
    graph, params = run(model.graph, model_passes(passes), weights=model.weights, options=passes,
                        check=debugging())
    seq = graph.input(tokens[0]).shape[1]
    dec = incremental(graph, PassContext(decoder_input=tokens[0], output=output, positions=seq))
    metadata = model_metadata(model, 2)
    if quantize is not None:
        metadata["quantization"] = quantize.describe()
    context = size_limit(model.graph, seq)[0]
    step = lowered = None
    # The step is put in its dtype here, float inputs included (genai binds an fp16 cache), so the backend's own
    # float16 pass, which keeps inputs fp32, is not run again on it.
    lowering = replace(options.for_derived(), dtype="float32")

    def precision(graph: Any) -> Any:
        if options.dtype != "float16":
            return graph
        graph = half(graph)
        half_weights((graph,), params)
        return graph

    if contrib_ops:  # GroupQueryAttention driven by attention_mask, as genai's builder writes it, where it takes all
        step = precision(genai_step(dec, tokens[0], output, log=log, lengths=context))
        metadata["token_bounds"] = json.dumps({INPUT_IDS: dict(step.outputs)[LOGITS].shape[-1]})
        try:
            lowered = lower_model(step, params, lowering, metadata=metadata, fold_weights=True)
        except KvLengthsError as e:
            if options.cuda_graph:  # genai captures no step whose cache is grown by concatenation
                raise UsageError(f"--cuda-graph needs the folder's cache in one buffer genai appends to, which needs "
                                 f"every attention GroupQueryAttention's with its lengths from the mask: {e}") from None
            say_lengths_fallback(str(e))
            step = None
        except BackendError as e:
            raise UsageError(str(e)) from None
    if step is None:
        step = precision(genai_step(dec, tokens[0], output, log=log))
        metadata["token_bounds"] = json.dumps({INPUT_IDS: dict(step.outputs)[LOGITS].shape[-1]})
        try:
            lowered = lower_model(step, params, lowering, metadata=metadata, fold_weights=True)
        except BackendError as e:
            raise UsageError(str(e)) from None
    hf = _read_json(checkpoint, "config.json") if checkpoint else {}
    config = genai_config(step, dec, model, hf, _read_json(checkpoint, "generation_config.json") if checkpoint else {},
                          provider=options.provider, cuda_graph=options.cuda_graph)
    extra: dict[str, bytes | FileCopy] = {}
    for name in TOKENIZER_FILES if checkpoint is not None else ():
        if (copy := read_inside(checkpoint, name, "tokenizer file", "tokenizer")) is not None:
            extra[name] = copy
    extra[CONFIG_FILE] = (json.dumps(config, indent=4) + "\n").encode()
    try:
        save_model(lowered, out / MODEL_FILE, beside=extra)
    except BackendError as e:
        raise UsageError(str(e)) from None
    return GenaiFolder(out, [MODEL_FILE, MODEL_FILE + ".data", *extra], config, quantize)


def genai_config(step: Any, dec: Any, model: Model, hf: Mapping[str, Any], generation: Mapping[str, Any], *,
                 provider: str = "cpu", cuda_graph: bool = False) -> dict:
    """genai_config.json for the step graph: names and sizes from the graph, tokens and search defaults
    from the checkpoint's config.json and generation_config.json (as genai's own builder takes them); with
    `cuda_graph`, genai's CUDA provider captures the step (enable_cuda_graph)."""
    from pseudoformer.inputs import size_limit
    from pseudoformer.ir import Op
    from pseudoformer.passes.genai_interface import (
        ATTENTION_MASK,
        INPUT_IDS,
        LENGTHS_META,
        LOGITS,
        PAST_KEY,
        PAST_VALUE,
        POSITION_IDS,
        PRESENT_KEY,
        PRESENT_VALUE,
    )

    names = {n.attrs["name"] for n in step.inputs}
    lengths = LENGTHS_META in step.meta  # the GroupQueryAttention form (passes/genai_interface.py, `lengths`)
    slot = dec.slots[0]
    kv_heads, head_size = int(slot.key_type.shape[1]), int(slot.key_type.shape[-1])
    heads = next(int(n.src[0].shape[1]) for n in step.nodes() if n.op is Op.ATTENTION)
    vocab = int(dict(step.outputs)[LOGITS].shape[-1])
    seq = dec.positions
    context = size_limit(model.graph, seq)[0]
    hidden = hf.get("hidden_size", hf.get("n_embd", heads * head_size))

    def token(name: str, default: Any) -> Any:
        source = "generation_config.json" if generation.get(name) is not None else "config.json"
        value = generation.get(name, hf.get(name))
        if value is None:
            return default
        ids = value if isinstance(value, list) else [value]
        if not ids or not all(_whole(i) and 0 <= i < vocab for i in ids):  # genai indexes its logits by them
            raise UsageError(f"{source}: {name} = {value!r} is not a token id of this model (0 to {vocab - 1}) or a "
                             "non-empty list of them")
        return value

    def search(name: str, default: Any, kind: str) -> Any:
        value = generation.get(name, default)
        value = default if value is None else value
        if not _search_value_ok(value, kind):
            raise UsageError(f"generation_config.json: {name} = {value!r} is not {_SEARCH_KINDS[kind]}")
        return value

    eos = token("eos_token_id", 0)
    first_eos = eos[0] if isinstance(eos, list) else eos
    return {
        "model": {
            "bos_token_id": token("bos_token_id", first_eos),
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": [
                    {name: {**options, **({"enable_cuda_graph": "1"} if cuda_graph else {})}
                     for name, options in entry.items()} for entry in GENAI_PROVIDERS[provider]]},
                "filename": MODEL_FILE,
                "head_size": head_size,
                "hidden_size": int(hidden),
                # the GroupQueryAttention form finds its positions from attention_mask: no position_ids
                "inputs": {"input_ids": INPUT_IDS, "attention_mask": ATTENTION_MASK,
                           **({"position_ids": POSITION_IDS} if POSITION_IDS in names else {}),
                           "past_key_names": PAST_KEY, "past_value_names": PAST_VALUE},
                "outputs": {"logits": LOGITS, "present_key_names": PRESENT_KEY,
                            "present_value_names": PRESENT_VALUE},
                "num_attention_heads": heads,
                "num_hidden_layers": len(dec.slots),
                "num_key_value_heads": kv_heads,
            },
            "eos_token_id": eos,
            # genai takes a token equal to pad_token_id in a prompt for padding: the checkpoint's, else the end token
            "pad_token_id": token("pad_token_id", first_eos),
            "type": "decoder",
            "vocab_size": vocab,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": search("do_sample", False, "flag"),
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": context,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            # The step concatenates the cache (passes/kv_cache.py): a new buffer each step. The lengths form
            # (GroupQueryAttention reading its lengths off attention_mask alone) appends in place to one
            # buffer of max_length that genai binds as both past and present, as the builder's folders do:
            # nothing else in that graph reads the past's length (benchmarks/README.md measured it).
            "past_present_share_buffer": lengths,
            "repetition_penalty": float(search("repetition_penalty", 1.0, "positive")),
            "temperature": float(search("temperature", 1.0, "positive")),
            "top_k": int(search("top_k", 50, "count") or 50),
            "top_p": float(search("top_p", 1.0, "fraction")),
        },
    }


# generation_config.json's search fields, by kind: what genai reads each as (a string is never a number or a flag).
_SEARCH_KINDS = {"flag": "true or false", "positive": "a finite number > 0", "count": "a whole number ≥ 0",
                 "fraction": "a number in (0, 1]"}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _search_value_ok(value: object, kind: str) -> bool:
    if kind == "flag":
        return isinstance(value, bool)
    if kind == "count":
        return _whole(value) and 0 <= value <= 2**31 - 1  # type: ignore[operator]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value > 0 if kind == "positive" else 0 < value <= 1


def say_lengths_fallback(why: str) -> None:
    """Once, on stderr: the folder keeps the masked step (ONNX Attention over a Concat-grown cache)."""
    import sys

    from pseudoformer.base.terminal import escape

    print(escape(f"note: --contrib-ops: the folder's attention stays ONNX Attention with the padding mask: "
                 f"{why}"), file=sys.stderr)


def _folder(out: str | Path) -> Path:
    """The folder to write into: made when absent (its parent must exist), refused when a file."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--genai-folder {out} is a file; give a folder to write the model's files into")
    if not out.exists():
        if not out.parent.is_dir():
            raise UsageError(f"cannot write --genai-folder {out}: no directory {out.parent}")
        out.mkdir()
    return out


def _read_json(directory: Path, name: str) -> dict[str, Any]:
    """A JSON object the checkpoint holds (config.json, generation_config.json), read from inside it; {} if absent."""
    copy = read_inside(directory, name, "checkpoint file", "config")
    if copy is None:
        return {}
    try:
        value = loads_json(copy.data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise UsageError(f"{directory / name}: not a JSON object ({e})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{directory / name}: not a JSON object")
    return value
