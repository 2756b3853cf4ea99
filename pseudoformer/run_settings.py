"""Checking the numbers a run is given (seed, threads, the node limit) before anything uses them.

numpy refuses a negative seed with its own ValueError, and onnxruntime asked for 100,000 threads
crashes the process: each is a user's mistake, said in one line, here.
"""

from __future__ import annotations

from pseudoformer.backends.options import threads_problem
from pseudoformer.base.errors import UsageError

# The runtimes `train` runs its step on (training/runtimes.py), by their own names; --backend spells them
# numpy, onnx and tvm as every command does (backends/options.BACKENDS, training/loop._STEP_RUNTIMES).
TRAINING_BACKENDS = ("interpreter", "onnxruntime", "tvm")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_seed(seed: object) -> None:
    """A seed is a whole number ≥ 0 (numpy's generators take no negative seed)."""
    if seed is not None and (not _whole(seed) or seed < 0):  # type: ignore[operator]
        raise UsageError(f"the seed must be a whole number ≥ 0, got {seed!r}")


def check_threads(threads: object) -> None:
    """Threads: 1 to THREADS_PER_CORE × the cores this process may use (None: the runtime's default)."""
    problem = threads_problem(threads)
    if problem:
        raise UsageError(problem)


def check_max_nodes(max_nodes: object) -> None:
    if not _whole(max_nodes) or max_nodes < 1:  # type: ignore[operator]
        raise UsageError(f"--max-nodes must be a whole number ≥ 1, got {max_nodes!r}")
