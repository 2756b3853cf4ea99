"""Small kernels run on the calling thread: each parallel loop gets a serial twin, chosen at run time by its work.

A parallel loop is a launch of TVM's thread pool: a wake-up of the workers and a barrier at the end. On a
quiet machine that costs microseconds; on a loaded one, where a worker has been descheduled, the barrier
waits for the scheduler to run it again, a time slice of milliseconds. A decode step is some 850 kernels
(SmolLM2: residual adds, norms, slices, the cache's concatenation, attention over one query, the products),
most of them a few hundred elements, and each was a parallel launch, over a batch of one as often as not.
A product of 2048 × 256 weights took 0.65 ms on two threads against 0.04 ms on one, with one other busy
process on the two cores (ORT: 0.04 ms; its pool lets the caller take a missing worker's share).

The work of a loop is counted from the loop nest itself: the product of the extents of the loops inside it
(sequence lengths included, as run-time values), summed over sibling nests. Where it is below the
function's threshold the serial twin runs, so a decode step's kernels stay on one thread while prefill's
128 rows, and the large products, still split between the cores. Both twins are the same scheduled code.

Thresholds are in the unit of the loops: an element for injective kernels and norms, a byte of int4 codes
for nbits.matmul_nbits (nbits_schedule.py), which sets its own as the loop's annotation MIN_WORK_ATTR;
nbits_int8's kernel, whose work is not a count of its loops, decides itself (annotation 0: no twin).
"""

from __future__ import annotations

from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm

tvm = require_tvm()
from tvm import s_tir, tirx  # noqa: E402

MIN_WORK_ATTR = "pseudoformer.min_parallel_work"
# Elements an injective kernel or norm must touch to be worth a launch: ~30 µs of serial work, where a
# quiet launch costs a few µs.
MIN_ELEMENTS = 1 << 15


Work = int | Any  # a Python int where every extent is known when compiling, else an int64 expression


def _extent(e: Any) -> Work:
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return tirx.Cast("int64", e)  # sizes are int64 (Relax), loop counters may be narrower


def _mul(a: Work, b: Work) -> Work:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return (tirx.IntImm("int64", a) if isinstance(a, int) else a) * b


def _add(a: Work, b: Work) -> Work:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return (tirx.IntImm("int64", a) if isinstance(a, int) else a) + b


def _work(stmt: Any) -> Work:
    """Iterations of the innermost statements under `stmt`."""
    if isinstance(stmt, tirx.For):
        return _mul(_extent(stmt.extent), _work(stmt.body))
    if isinstance(stmt, tirx.SeqStmt):
        total: Work = 0
        for s in stmt.seq:
            total = _add(total, _work(s))
        return total
    if isinstance(stmt, s_tir.SBlockRealize):
        return _work(stmt.block)
    if isinstance(stmt, tirx.IfThenElse):  # both branches, an upper bound
        return _work(stmt.then_case) if stmt.else_case is None else _add(_work(stmt.then_case),
                                                                         _work(stmt.else_case))
    body = getattr(stmt, "body", None)
    return _work(body) if isinstance(body, tirx.Stmt) else 1


def _gate(stmt: Any) -> Any:
    """`stmt` with each parallel loop at its top level (through the root block, sequences and branches) gated."""
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_gate(s) for s in stmt.seq])
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _gate(stmt.then_case),
                               None if stmt.else_case is None else _gate(stmt.else_case))
    if not isinstance(stmt, tirx.For) or stmt.kind != tirx.ForKind.PARALLEL:
        return stmt
    annotations = dict(stmt.annotations)
    min_work = int(annotations.pop(MIN_WORK_ATTR, MIN_ELEMENTS))
    stmt = tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.PARALLEL, stmt.body, annotations=annotations)
    if min_work <= 0:  # the kernel decided itself
        return stmt
    serial = tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, stmt.body,
                      annotations=annotations)
    work = _work(stmt)
    if isinstance(work, int):  # known when compiling: no twin
        return stmt if work >= min_work else serial
    return tirx.IfThenElse(work >= tirx.IntImm("int64", min_work), stmt, serial)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="SerialWhenSmall")
def serial_when_small(func: Any, _mod: Any, _ctx: Any) -> Any:
    """The pass: every PrimFunc's top-level parallel loops gated by their work (after scheduling)."""
    if not isinstance(func.body, s_tir.SBlockRealize):  # TVMScript without blocks (nbits_int8's kernel)
        return func.with_body(_gate(func.body))
    realize = func.body
    block = realize.block
    body = _gate(block.body)
    new_block = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                             block.alloc_buffers, block.match_buffers, block.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, new_block))
