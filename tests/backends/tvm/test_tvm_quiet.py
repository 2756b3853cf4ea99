"""A TVM compile writes nothing to the terminal. LLVM's CPU codegen logged "Unknown pragma pragma_scope" raw on
fd 2 for every scatter kernel (TVM's own topi scatter opens a seq_scope the codegen ignores), so every training
step compiled for TVM, whose gradients scatter, printed them (issue 40)."""

from __future__ import annotations

import pytest

from pseudoformer.backends.tvm.build import compile_graph
from pseudoformer.ir.examples import example
from pseudoformer.ir.ops import Op


def test_a_scatter_kernel_compiles_without_a_line_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    case = example(Op.SCATTER_ADD_ELEMENTS)
    model = compile_graph(case.graph, case.params, tvm_params="args")
    assert model.run(case.feeds(2, 5))
    err = capfd.readouterr().err
    assert "pragma" not in err and "Warning" not in err, err
