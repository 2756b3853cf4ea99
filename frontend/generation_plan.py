"""What an inference algorithm (the paper's Algorithms 14 and 15) asks the compiler to do.

DInference and EDInference are host-side loops around a model: re-run the model on the growing
sequence, take the distribution at the last position, sample, append. They cannot be unrolled into
one dataflow graph (the sequence grows), so the frontend checks such an algorithm line by line and
reduces it to this plan; `pseudoformer.generation` runs the plan with a prefill graph and a cached
decode-step graph derived from the model it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pseudoformer.base.errors import Pos


@dataclass(frozen=True)
class GenerationPlan:
    algorithm: str  # the inference algorithm's own name, e.g. "DInference"
    model: str  # the algorithm re-run every step, e.g. "GPT2", "DTransformer", "EDTransformer"
    # EDInference: the model argument given once and encoded once (z); None for a decoder-only model.
    encoder_input: str | None
    # "probabilities": the model returns P (softmax inside it); "logits": the inference algorithm
    # applies softmax itself (P ← softmax(GPT2(x | θ̂))).
    model_output: Literal["probabilities", "logits"]
    temperature: str  # the hyperparameter τ of `sample a token y from q ∝ p^{1/τ}`
    # DInference: ℓ_gen, the number of new tokens; EDInference: the length cap (None if it has none).
    max_new_tokens: str | None
    bos_token: str | None  # EDInference: x̂ ← [bos_token]; None for DInference
    eos_token: str | None  # EDInference: while y ≠ eos_token; None for DInference
    # "generated": returns only the new tokens (DInference's x[ℓ+1 : ℓ+ℓ_gen]);
    # "sequence": returns the whole decoded sequence, start token included (EDInference's x̂).
    returns: Literal["generated", "sequence"]
    pos: Pos
