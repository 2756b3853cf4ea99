"""Running a torch-lowered graph against the interpreter: the check every torch backend test makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pseudoformer.backends.torch.compile import to_torch  # noqa: E402
from pseudoformer.ir import interpreter  # noqa: E402
from pseudoformer.ir.graph import Graph  # noqa: E402


def run_module(module: torch.nn.Module, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = module(**{k: torch.from_numpy(np.asarray(v)) for k, v in feeds.items()})
    return {k: v.detach().numpy() for k, v in out.items()}


def check_against_oracle(graph: Graph, params: Mapping[str, np.ndarray], feeds: Iterable[Mapping[str, np.ndarray]],
                         tol: float = 1e-5) -> None:
    """One module, run at every size of `feeds`: each output of the dtype, shape and values of the interpreter's."""
    module = to_torch(graph, params)
    for feed in feeds:
        want = interpreter.run(graph, feed, params)
        got = run_module(module, feed)
        assert list(got) == list(want)
        for name, w in want.items():
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=tol, atol=tol, err_msg=name)
