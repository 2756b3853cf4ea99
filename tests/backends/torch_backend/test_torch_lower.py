"""The torch backend's lowerings against the interpreter: every op's example (so a new op is tested here
without an edit), the hand-built graphs of the ONNX tests, and what the module is made of."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pseudoformer.backends.lowering_table import LoweringTable  # noqa: E402
from pseudoformer.backends.torch.compile import to_torch  # noqa: E402
from pseudoformer.backends.torch.lowerings import LOWERINGS  # noqa: E402
from pseudoformer.backends.torch.names import our_name, torch_name  # noqa: E402
from pseudoformer.base.errors import BackendError  # noqa: E402
from pseudoformer.ir.examples import example  # noqa: E402
from pseudoformer.ir.ops import OPS, Op  # noqa: E402
from tests.backends.onnx_cases import SIZES, block, block_inputs, block_params, structure, structure_inputs  # noqa: E402
from tests.backends.torch_backend.torch_util import check_against_oracle  # noqa: E402


@pytest.mark.parametrize("op", list(OPS), ids=lambda op: op.value)
def test_each_ops_example_matches_the_interpreter_at_every_size(op):
    """Every op, lowered by its own torch ops or by its formula (a fused op without a lowering here)."""
    ex = example(op)
    check_against_oracle(ex.graph, ex.params, [ex.feeds(b, s) for b, s in SIZES])


def test_block_and_structure_match_the_interpreter_at_every_size():
    check_against_oracle(block(), block_params(), [block_inputs(b, s) for b, s in SIZES])
    check_against_oracle(structure(), {}, [structure_inputs(b, s) for b, s in SIZES])


def test_the_table_is_a_lowering_table_and_attention_is_sdpa():
    assert isinstance(LOWERINGS, LoweringTable) and LOWERINGS.backend == "torch"
    ex = example(Op.ATTENTION)
    code = to_torch(ex.graph, ex.params).code
    # all but the soft-capped one (SDPA has no soft cap) are one SDPA call each (lowerings/attention.py's
    # sdpa: F.scaled_dot_product_attention, written out under torch.compile at short lengths)
    assert code.count("lowerings_attention_sdpa(") == 5


def test_parameters_are_nested_modules_under_our_names_and_constants_are_buffers():
    module = to_torch(block(), block_params())
    assert sorted(module.state_dict()) == sorted(block_params())
    assert isinstance(module.get_parameter("W_e"), torch.nn.Parameter)
    assert all(not n.startswith("constants.") for n in module.state_dict())
    assert any(n.startswith("constants.") for n, _ in module.named_buffers())


def test_names_spell_ours_one_to_one():
    for ours in ("layers.0.W.heads.1.W_q", "training", "b_", "x.forward.y__", "graph"):
        assert our_name(torch_name(ours)) == ours
    assert torch_name("training.code") == "training_.code_"
    with pytest.raises(BackendError, match="empty part"):
        torch_name("a..b")
