"""What a training algorithm (the paper's Algorithms 11–13) asks the compiler to do.

DTraining, ETraining and EDTraining are loops on the host around one gradient step: for each epoch,
for each sequence x_n of the dataset, compute loss(θ) and move θ against its gradient. The loops and
the update cannot be one dataflow graph of the model, so the frontend checks such an algorithm line by
line (frontend/training.py) and reduces it to this plan plus a LOSS GRAPH: the ordinary IR graph that
the elaborator builds for lines 3–5 (ℓ ← length(x_n), P(θ) ← Model(x_n | θ), loss(θ) = …), whose
output is the loss of each example, float32 [batch], and whose parameters are the model's own (named
as the model's graph names them: W_e, layers.0.…, so the model's checkpoints load onto it).

The loss graph's inputs follow docs/language.md's interface: token ids int64 [batch, ℓ]; ETraining's
masked positions float32 [batch, ℓ] (1 where x̃[t] is the mask token, 0 elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pseudoformer.base.errors import Pos
from pseudoformer.frontend.inference import hyper_shown
from pseudoformer.frontend.modules import Program


@dataclass(frozen=True)
class MaskingPlan:
    """ETraining's lines 4–7: which positions the host masks, and what the loss graph is given.

    x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or 1 − p_mask (for each t ∈ [ℓ]);
    T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}. The host draws the mask and fills the three inputs below.
    """

    probability: str  # ASCII name of the hyperparameter p_mask (declared p_mask ∈ (0, 1))
    # The token written at a masked position: the ASCII name of a config key (the paper leaves
    # mask_token undeclared; declare mask_token ∈ V or set it in the config), or a literal id.
    mask_token: str | int
    masked_input: str  # the loss graph's input for x̃_n, the masked tokens the model reads (int64 [batch, ℓ])
    target_input: str  # the loss graph's input for x_n, the original tokens the loss scores (int64 [batch, ℓ])
    positions_input: str  # the loss graph's input for T̃: float32 [batch, ℓ], 1 at masked positions, else 0


@dataclass(frozen=True)
class TrainingPlan:
    """A training algorithm reduced to what `pseudoformer train` runs. Names of hyperparameters are
    their ASCII config keys (η → eta, N_epochs → N_epochs); inputs are the loss graph's input names."""

    algorithm: str  # the training algorithm's own name: "DTraining", "ETraining", "EDTraining"
    model: str  # the algorithm the loss calls: "DTransformer", "GPT2", "BERT", "BART", …
    # "probabilities": the model returns P (softmax inside it); "logits": the training algorithm applies
    # softmax itself (P(θ) ← softmax(GPT2(x_n | θ))).
    model_output: Literal["probabilities", "logits"]
    theta: str  # ASCII name of θ, the parameters trained ("theta"): the loss graph's PARAMs are all of them
    # The dataset's members in order, ASCII without the example index: ("x",) for DTraining and ETraining
    # ({x_n}_{n=1}^{N_data}), ("z", "x") for EDTraining ({(z_n, x_n)}_{n=1}^{N_data}).
    data: tuple[str, ...]
    # The loss graph's inputs in order: ("x",), ("z", "x"), or ETraining's ("x_tilde", "x", "T_tilde").
    loss_inputs: tuple[str, ...]
    loss_output: str  # the loss graph's output name ("loss"): float32 [batch], the loss of each example
    # "next_token": −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t] (Algorithms 11, 13); "masked": −Σ_{t ∈ T̃} log
    # P(θ)[x_n[t], t] over the masked positions (Algorithm 12). The graph computes the line as written.
    loss: Literal["next_token", "masked"]
    masking: MaskingPlan | None  # ETraining's masking rule; None for next_token
    # θ ← θ − η · ∇loss(θ) is plain gradient descent: SGD with the step size η (`pseudoformer train
    # --optimizer` may choose another; the paper's line is SGD).
    optimizer: Literal["sgd"]
    learning_rate: str  # ASCII name of η ("eta"), declared η ∈ (0, ∞)
    epochs: str  # ASCII name of N_epochs: `for i = 1, 2, …, N_epochs do`, the outer loop
    # ASCII name of N_data, the dataset's size (`for n = 1, 2, …, N_data do`, the inner loop, one
    # example at a time as the paper writes it; the loss graph takes a batch of them at once).
    data_count: str
    pos: Pos  # the training algorithm's header


def describe_training(prog: Program, plan: TrainingPlan, hyper: dict[str, int | float] | None = None) -> str:
    """One line: `DTraining: trains DTransformer (probabilities) on x, next-token loss, SGD with η = eta
    for N_epochs epochs`."""
    h = hyper_shown(prog, plan.algorithm, hyper)
    out = f"{plan.algorithm}: trains {plan.model} ({plan.model_output}) on {', '.join(plan.data)}, "
    if plan.masking is not None:
        m = plan.masking
        token = m.mask_token if isinstance(m.mask_token, int) else h(m.mask_token)
        out += f"masked loss ({token} with probability {h(m.probability)})"
    else:
        out += "next-token loss"
    return out + f", SGD with {h(plan.learning_rate)} for {h(plan.epochs)} epochs"
