"""Seeded, grammar-aware fuzzing of every file in models/ and of the training algorithms in
tests/frontend/training/ (mutations.py): every mutant must end as a
success or one clean diagnostic, never an internal error or a hang (harness.HANG_SECONDS stops one).
How long a mutant takes is not asserted here, where other jobs load the machine; the long run,
`python -m tests.fuzz --mutants 10000`, reports the slowest against issue 16's 5 s target.

MUTANTS runs in CI in about a minute and a half on two cores; KIND_MUTANTS of the other input kinds
(inputs.py: config.json, safetensors, GGUF, tokenizer.json, ONNX) in about a minute more, building their
base files with transformers first.
"""

from __future__ import annotations

from tests.fuzz.harness import FILES, run_mutants
from tests.fuzz.inputs import KINDS

MUTANTS = 3000
KIND_MUTANTS = 250


def test_mutants_of_every_model_are_a_success_or_a_clean_diagnostic() -> None:
    outcomes = run_mutants(MUTANTS, kinds=False)
    assert {o.file for o in outcomes} == set(FILES) and len(FILES) >= 11
    assert sum(f.startswith("training/") for f in FILES) >= 7  # Algorithms 11–13, over the real models too
    bad = [o for o in outcomes if o.problem]
    assert not bad, f"{len(bad)} of {len(outcomes)} mutants went wrong:\n" + "\n".join(map(str, bad[:25]))
    # Mutants that tested nothing would pass too: most must be refused, and some still check.
    refused = sum(o.code == 1 for o in outcomes)
    assert refused > MUTANTS // 2 and MUTANTS - refused > MUTANTS // 20, refused


def test_mutants_of_every_other_input_kind_are_a_success_or_a_clean_diagnostic() -> None:
    outcomes = run_mutants(KIND_MUTANTS, files=False)
    assert {o.file for o in outcomes} == set(KINDS)
    bad = [o for o in outcomes if o.problem]
    assert not bad, f"{len(bad)} of {len(outcomes)} mutants went wrong:\n" + "\n".join(map(str, bad[:25]))
    # Most are refused; some (an ONNX attribute nothing reads, a config key nothing uses) still run.
    refused = sum(o.code == 1 for o in outcomes)
    assert refused > KIND_MUTANTS // 2 and KIND_MUTANTS - refused > 5, refused
