"""Fingerprints of the ONNX graphs `--contrib-ops` changes: op-type counts and outputs on fixed inputs.

For the Llama (small, via -D) and GPT-2, in float32 and int4, with and without contrib ops: the compiled model
(`pseudoformer.compile`'s graph), and generation's prefill and decode-step graphs (the step's cache in buffers
where contrib ops allow it). Recorded once before the contrib-op fusions moved from the ONNX lowerings into
passes (passes/rules/skip_norm.py, group_query_attention.py); tests/backends/test_onnx_contrib_ops.py
checks every later compile against that record.
Re-recorded once since, for two meant changes (issue 25) and nothing else: int4 now quantizes the output
projection and a tied embedding (MatMul → MatMulNBits, Gather → GatherBlockQuantized, outputs within int4's
error), and what is computed from weights alone is computed as the file is written (the fp32 decode steps
lose their weight transposes and rotary-frequency nodes; their outputs stayed within 1e-6 of the record).
Two entries re-recorded for issue 38, nothing else: the fp16 Llama compiles (llama/fp16/*/compile) compute their
rotary angles in fp32 (passes/float16.py's tables), where Llama's base 10⁵ had been ∞ in fp16: two more Casts
(cos and sin to fp16), outputs moved by 1.2e-3.

    python tests/backends/contrib_graphs.py record     # rewrite the record (only when a change is meant)
    python tests/backends/contrib_graphs.py compare    # the largest differences from the record
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
RECORD_COUNTS = HERE / "data" / "contrib_graphs.json"
RECORD_OUTPUTS = HERE / "data" / "contrib_graphs.npz"
MODELS = {
    "llama": ("models/llama.alg", ["L=2", "d_e=64", "H=4", "H_kv=2", "d_mlp=128", "N_V=100", "d_attn=16"]),
    "gpt2": ("models/gpt2.alg", ["L=2", "d_e=64", "H=4", "d_mlp=128", "N_V=100", "ℓ_max=32"]),
}
BATCH, PROMPT, PAST, BUFFER = 2, 5, 4, 6  # the step reads PAST cached positions (in buffers of BUFFER)


def graphs() -> Iterator[tuple[str, object]]:
    """(key, onnx.ModelProto) for every graph of the record."""
    from pseudoformer.backends.onnx import to_onnx
    from pseudoformer.deploy import lower
    from pseudoformer.generation.generator import Generator
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    for name, (path, defines) in MODELS.items():
        model = load(path, defines=defines)
        for quant in ("fp32", "int4"):
            opts = QuantizeOptions(bits=4, block_size=32) if quant == "int4" else None
            for contrib in (False, True):
                key = f"{name}/{quant}/{'contrib' if contrib else 'standard'}"
                yield f"{key}/compile", lower(model, quantize=opts, contrib_ops=contrib)
                gen = Generator(model, quantize=opts, contrib_ops=contrib)
                assert gen.decoder is not None
                yield f"{key}/prefill", to_onnx(gen.decoder.prefill, gen.weights, contrib_ops=contrib)
                yield f"{key}/step", gen.runtime.step_model  # type: ignore[attr-defined]
        for contrib in (False, True):  # and two compiles the skips of the backend's pipeline change
            key = f"{name}/fp16/{'contrib' if contrib else 'standard'}"
            yield f"{key}/compile", lower(model, dtype="float16", contrib_ops=contrib)
            key = f"{name}/fp32-opset21/{'contrib' if contrib else 'standard'}"
            yield f"{key}/compile", lower(model, opset=21, contrib_ops=contrib)


def _feeds(model: object) -> dict[str, np.ndarray]:
    """Fixed inputs: BATCH rows of PROMPT tokens (1 in a step), PAST cached positions of random keys and values."""
    rng = np.random.default_rng(0)
    step = any(i.name.startswith("past") for i in model.graph.input)  # type: ignore[attr-defined]
    buffered = any(i.name == "past_sequence_length" for i in model.graph.input)  # type: ignore[attr-defined]
    sizes = {"batch": BATCH, "seq": 1 if step else PROMPT, "past": BUFFER if buffered else PAST}
    feeds = {}
    for i in model.graph.input:  # type: ignore[attr-defined]
        shape = [sizes[d.dim_param] if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "past_sequence_length":
            feeds[i.name] = np.array([PAST], dtype=np.int64)
        elif i.type.tensor_type.elem_type == 7:  # token ids
            feeds[i.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def fingerprint() -> tuple[dict[str, dict[str, int]], dict[str, np.ndarray]]:
    """Each graph's op-type counts, and its outputs on the fixed inputs (a cache buffer up to what is written)."""
    import onnxruntime as ort

    counts, outputs = {}, {}
    for key, model in graphs():
        counts[key] = dict(sorted(Counter(n.op_type for n in model.graph.node).items()))  # type: ignore[attr-defined]
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), so,  # type: ignore[attr-defined]
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        for name, value in zip(names, session.run(names, _feeds(model)), strict=True):
            if name.startswith("present") and value.shape[2] > PAST + 1:
                value = value[:, :, :PAST + 1]  # a buffer past the positions written holds whatever it held
            outputs[f"{key}/{name}"] = value
    return counts, outputs


def differences() -> tuple[list[str], float]:
    """The graphs whose op counts differ from the record, and the largest output difference from it."""
    counts, outputs = fingerprint()
    want_counts = json.loads(RECORD_COUNTS.read_text(encoding="utf-8"))
    want = np.load(RECORD_OUTPUTS)
    changed = [k for k in sorted(set(counts) | set(want_counts)) if counts.get(k) != want_counts.get(k)]
    if sorted(outputs) != sorted(want.files):
        changed.append(f"outputs: {sorted(set(outputs) ^ set(want.files))}")
        return changed, float("inf")
    worst = max(float(np.abs(outputs[k].astype(np.float64) - want[k]).max()) for k in outputs)
    return changed, worst


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"]:
        counts, outputs = fingerprint()
        RECORD_COUNTS.parent.mkdir(exist_ok=True)
        RECORD_COUNTS.write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
        np.savez_compressed(RECORD_OUTPUTS, **outputs)
        total = {k: sum(v.values()) for k, v in counts.items()}
        print("\n".join(f"{k:36s} {n:4d} nodes  {counts[k]}" for k, n in total.items()))
        return 0
    if argv[:1] == ["compare"]:
        changed, worst = differences()
        print(f"graphs whose op counts changed: {changed or 'none'}; largest output difference: {worst:.3g}")
        return 1 if changed or worst > 1e-6 else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
