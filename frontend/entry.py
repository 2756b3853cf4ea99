"""Elaborate an entry algorithm into an IR graph: bind hyperparameters, make inputs, run, lay out outputs.

Interface conventions (docs/language.md): a leading batch axis on every input and output; token ids
and positions are 0-based int64; matrices cross the interface transposed, as [batch, positions,
features] — so an output declared P ∈ (0,1)^{N_V × ℓ} is delivered as [batch, ℓ, N_V].
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pseudoformer.base.errors import AlgError, CompileError, Diagnostics, Pos, UsageError
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.frontend.ast import Algorithm, Decl, is_inference, is_training
from pseudoformer.frontend.calls import input_decl
from pseudoformer.frontend.errors import BadTypeError, HyperparameterError, LimitError, UnknownNameError
from pseudoformer.frontend.frame import Frame, Weights
from pseudoformer.frontend.inference import plan_inference
from pseudoformer.frontend.modules import Program
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.sizes import Size
from pseudoformer.frontend.statements import run_body
from pseudoformer.frontend.tensor_ops import ShapeMismatch, show
from pseudoformer.frontend.training import reduce_training, training_hyperparameters
from pseudoformer.frontend.training_loss import finish_loss_graph
from pseudoformer.frontend.values import Builder, MaskDef, NodeLimit, SizeVal, Val
from pseudoformer.ir import DType, Graph, Op, TensorType


def find_entry(prog: Program, entry: str | None) -> Algorithm:
    algs = prog.entries()
    if not algs:  # a mistake in the file as a whole: reported at its start
        raise CompileError([UnknownNameError(f"{prog.root.path} defines no algorithm",
                                             Pos(prog.root.path, 1, 1), prog.root.line(1) or None)])
    if entry is None:
        # An inference algorithm (Algorithm 14) is a loop around a model, not a graph: the default
        # entry is the model beside it, whichever order the file defines them in.
        # A training algorithm's graph is its loss graph: the entry when the file defines no model.
        models = [a for a in algs if not is_inference(a) and not is_training(a)] or \
            [a for a in algs if is_training(a)]
        if not models:
            names = ", ".join(a.name for a in algs)
            raise CompileError([UsageError(f"{prog.root.path} defines only inference algorithms ({names}); run "
                                           f"them with `pseudoformer generate {prog.root.path}`")])
        return models[-1]
    hits = [a for a in algs if entry in (a.name, a.label, f"Algorithm {a.label}")]
    if not hits:
        # The model of models/paper/dinference.alg lives in the file it `use`s: generation names it.
        hits = [a for a in prog.lookup(prog.root, entry) if not is_inference(a)][-1:]
    if len(hits) == 1:
        if is_inference(hits[0]):
            raise CompileError([UsageError(_not_a_graph(prog, hits[0]))])
        return hits[0]
    names = ", ".join(f"{a.name} (Algorithm {a.label})" if a.label else a.name for a in algs)
    if not hits:
        raise CompileError([UnknownNameError(f"{prog.root.path} has no algorithm {entry!r}; it defines {names}")])
    raise CompileError([UnknownNameError(f"{entry!r} is ambiguous in {prog.root.path}: pick one by its number "
                                         f"({', '.join(str(a.label) for a in hits)})")])


def _not_a_graph(prog: Program, alg: Algorithm) -> str:
    msg = (f"{alg.name} is an inference algorithm: it samples tokens in a loop, which is not one graph to "
           f"compile or run; use `pseudoformer generate {prog.root.path}`")
    try:
        model = plan_inference(prog, alg.name if alg.label is None else alg.label).model
    except CompileError:
        return msg
    return f"{msg}, or take its model as the entry (--entry {model})"


def elaborate(prog: Program, entry: str | None = None, hyperparameters: dict[str, Any] | None = None,
              *, symbolic: bool = False, optional: set[str] | frozenset[str] = frozenset(),
              max_nodes: int = MAX_NODES, draws: bool = False) -> Graph:
    """Build the graph of `entry` with the given hyperparameters (ASCII names); raise CompileError.

    `draws`: a model's random draws become inputs `draw_<k>` the trainer fills (frontend/draws.py; their
    probabilities in meta["draws"]), not their expectations.

    A graph that would pass `max_nodes` IR nodes is refused (LimitError) as soon as that is
    foreseeable: after the first iteration of a block loop that would unroll past it.
    """
    alg = find_entry(prog, entry)
    plan = None
    if is_training(alg):
        # Algorithms 11–13: the graph is that of the loss (lines ℓ, P and loss), elaborated as any algorithm.
        training = alg
        plan, alg = reduce_training(prog, alg)
        optional = set(optional) | training_hyperparameters(prog)
        if not symbolic:
            _model_sizes_set(prog, training, plan.model, dict(hyperparameters or {}))
    graph = _elaborate(prog, alg, dict(hyperparameters or {}), symbolic, optional, max_nodes, draws)
    if plan is not None:
        finish_loss_graph(graph, plan, alg)
    return graph


def _model_sizes_set(prog: Program, training: Algorithm, model: str, config: dict[str, Any]) -> None:
    """A training algorithm's model takes its sizes from the config alone (its input x ∈ V* fixes none of
    them), so each one nothing sets is named here, with the `-D` to add, before elaboration would meet
    it as an unknown name or a size known only at run time (`?d_e#2`)."""
    if training.module is None:
        return
    found = [a for a in prog.lookup(training.module, model) if not is_training(a) and not is_inference(a)]
    if not found:
        return
    decls = [d for d in found[-1].hyper if d.kind != "derived" and not (d.type is not None and d.type.kind == "bool")]
    missing = [d for d in decls if parse_name(d.name).ascii() not in config]
    if not missing:
        return
    keys = [parse_name(d.name).ascii() for d in missing]
    names = ", ".join(d.name for d in missing)
    home = found[-1].alias_in or found[-1].module  # phi3.alg's Phi3 is written in mistral.alg: phi3.toml sizes it
    src = home.path if home is not None else model
    raise CompileError([HyperparameterError(
        f"{training.name}'s model {model} needs {'hyperparameters' if len(keys) > 1 else 'the hyperparameter'} "
        f"{names} that nothing sets: give its config (--config {Path(src).with_suffix('.toml')}) or checkpoint "
        f"(--weights DIR), or add " + " ".join(f"-D {k}=…" for k in keys), training.pos,
        training.module.line(training.pos.line) if training.module is not None else None)])


def _elaborate(prog: Program, alg: Algorithm, config: dict[str, Any], symbolic: bool,
               optional: set[str] | frozenset[str], max_nodes: int, draws: bool = False) -> Graph:
    try:
        f = Frame(alg=alg, prog=prog, b=Builder(max_nodes), weights=Weights(), config=config, symbolic=symbolic,
                  scope=alg.name, runtime_dims=True)
    except AlgError as e:
        raise CompileError([e]) from None
    diags = Diagnostics()
    try:
        _bind_hyper(f, diags)
        diags.raise_if_any()
        inputs = _make_inputs(f)
        if draws:
            f.b.draws = []
        result = run_body(f)
        outputs = [(parse_name(alg.outputs[0]).ascii(), _output(f, result))]
        _check_params(f)
        _check_config(f, optional)
    except AlgError as e:
        raise CompileError([e]) from None
    except ShapeMismatch as e:
        raise CompileError([f.error(AlgError, str(e), alg.pos)]) from None
    except NodeLimit:
        raise CompileError([f.error(LimitError, f"the graph of {alg.name} grows past {max_nodes:,} IR nodes; "
                                    "--max-nodes N raises the limit", alg.pos)]) from None
    used = f.config_used | {k for k in f.sizes if k in config} | {k for k in f.reals if k in config}
    hyper = {k: v for k, v in config.items() if k in used}
    meta = {"entry": alg.name, "source": alg.pos.file, "hyperparameters": hyper,
            "dims": {"batch": "examples in the batch"} | {n: "positions" for n in f.b.run_dims if n != "batch"},
            "limits": dict(f.b.limits), "call_sites": dict(f.b.call_sites)}
    if f.b.draws:
        inputs += [n for n, _ in f.b.draws]
        meta["draws"] = {n.attrs["name"]: p for n, p in f.b.draws}
    return Graph(inputs=inputs, outputs=outputs, meta=meta)


def _bind_hyper(f: Frame, diags: Diagnostics) -> None:
    for d in f.alg.hyper:
        key = parse_name(d.name).ascii()
        try:
            if d.kind == "derived":
                f.sizes[key] = f.eval_size(d.value)
            elif d.type is not None and d.type.kind == "bool":
                continue  # a mask left open becomes a model input
            elif d.type is not None and d.type.kind == "real":
                if key in f.config:
                    v = f.config[key]
                    f.config_used.add(key)
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise f.error(HyperparameterError, f"{d.name} is a real number, not {v!r}", d.pos)
                    lo, hi = d.type.interval or (-math.inf, math.inf)
                    if not lo < v < hi:  # η ∈ (0, ∞) promises a positive value to the lines that use it
                        raise f.error(HyperparameterError, f"{d.name} = {v!r}, but it is declared in "
                                      f"({lo:g}, {'∞' if hi == math.inf else f'{hi:g}'})", d.pos)
                    f.reals[key] = float(v)
                elif f.symbolic:
                    f.reals[key] = 1e-5
                else:
                    raise f.error(HyperparameterError, f"hyperparameter {d.name} ({key}) has no value; "
                                  f"set it in the config or with -D {key}=…", d.pos)
            else:
                if key not in f.config and not f.symbolic:
                    raise f.error(HyperparameterError, f"hyperparameter {d.name} ({key}) has no value; "
                                  f"set it in the config or with -D {key}=…", d.pos)
                f.size_of_name(d.name, d.pos)
        except AlgError as e:
            diags.add(e)


def _make_inputs(f: Frame) -> list[Any]:
    inputs = []
    seqs = [a for a in f.alg.data_args if (d := input_decl(f.alg, a)) is not None and d.type.star]
    shared = [a for a in seqs if a in f.alg.same_length]  # one length, one dimension (named after the first)
    several_seqs = len(seqs) - max(len(shared) - 1, 0) > 1
    for arg in f.alg.data_args:
        d = input_decl(f.alg, arg)
        if d is None:
            raise f.error(BadTypeError, f"{f.alg.name} declares no Input {arg}", f.alg.pos)
        # A family input (e_t for t ∈ [T]) is named as the signature writes it: e_{1:T} → e_1_T.
        name = parse_name(arg if d.var else d.name).ascii()
        seq_of = parse_name(shared[0]).ascii() if arg in shared else name
        node, val = _input(f, d, name, several_seqs, seq_of)
        inputs.append(node)
        key = parse_name(d.name).key(frozenset([d.var]) if d.var else frozenset())
        f.vars[key] = val
    for d in f.alg.hyper:
        if d.type is not None and d.type.kind == "bool":
            dims = _runtime_dims(f, d)
            node = f.b.node(Op.INPUT, name=parse_name(d.name).ascii(),
                            type=TensorType(DType.bool, tuple(x.dim() for x in reversed(dims))))
            _register(f, node, list(reversed(dims)), batched=False)
            inner = f.b.node(Op.TRANSPOSE, node, perm=[1, 0]) if len(dims) == 2 else node
            f.hyper[d.name] = Val(inner, "bool", dims)
            inputs.append(node)
    return inputs


def _runtime_dims(f: Frame, d: Decl) -> tuple[Size, ...]:
    out = []
    for x in d.type.dims:
        if x.op == "name":
            s = f.size_of_name(x.text, x.pos, create=False)
            if s is None:
                s = Size.of(parse_name(x.text).ascii())
                f.sizes[parse_name(x.text).ascii()] = s
            out.append(s)
        else:
            out.append(f.eval_size(x))
    return tuple(out)


def _register(f: Frame, node: Any, dims: list[Size], batched: bool) -> None:
    if batched:
        f.b.run_dims.setdefault("batch", f.b.node(Op.DIM, node, axis=0))
    for i, s in enumerate(dims):
        if not s.is_int and len(s.terms) == 1 and str(s) not in f.b.run_dims:
            f.b.run_dims[str(s)] = f.b.node(Op.DIM, node, axis=i + int(batched))


def _input(f: Frame, d: Decl, name: str, several_seqs: bool, seq_of: str) -> tuple[Any, Any]:
    t = d.type
    if t.kind in ("vocab", "index"):
        kind = "token" if t.kind == "vocab" else "index"
        if t.star:
            seq = Size.of(f"seq_{seq_of}" if several_seqs else "seq")
            node = f.b.node(Op.INPUT, name=name, type=TensorType(DType.int64, ("batch", seq.dim())))
            _register(f, node, [seq], batched=True)
            return node, Val(node, kind, (seq,), (), True)
        node = f.b.node(Op.INPUT, name=name, type=TensorType(DType.int64, ("batch",)))
        _register(f, node, [], batched=True)
        return node, Val(node, kind, (), (), True)
    if t.kind != "real":
        raise f.error(BadTypeError, f"inputs of type {t.kind} are not supported", d.pos)
    dims = list(_runtime_dims(f, d))
    if d.var is not None:  # e_t for t ∈ [T]: a family, delivered as a matrix of columns
        (count,) = _runtime_dims(f, Decl("typed", d.var, d.pos, type=d.range)) if d.range.kind == "index" \
            else (Size.of("T"),)
        dims = dims + [count]
    api = [dims[1], dims[0]] if len(dims) == 2 else dims
    node = f.b.node(Op.INPUT, name=name, type=TensorType(DType.float32, ("batch", *(x.dim() for x in api))))
    _register(f, node, api, batched=True)
    inner = f.b.node(Op.TRANSPOSE, node, perm=[0, 2, 1]) if len(dims) == 2 else node
    val = Val(inner, "real", tuple(dims), (), True)
    if d.var is not None:
        from pseudoformer.frontend.tensor_ops import dim_to_free

        internal = f.b.fresh(d.var)
        return node, (dim_to_free(f.b, val, 1, internal), (internal,))
    return node, val


def _output(f: Frame, result: Any) -> Any:
    if isinstance(result, SizeVal):
        raise f.error(BadTypeError, "the entry returns a size, not a tensor", f.alg.pos)
    if not isinstance(result, Val):
        raise f.error(BadTypeError, "the entry must return a vector or a matrix", f.alg.pos)
    if result.free:
        raise f.error(BadTypeError, f"the result still depends on a loop index ({show(result)})", f.alg.pos)
    for d in f.alg.output_decls:
        if d.type is not None and d.type.kind in ("real", "prob", "bool") and d.type.dims:
            f.bind_dims(d.type, result.dims, f"the output {d.name}", d.pos)
    node = result.node
    if len(result.dims) == 2:
        a = result.paper_axis0
        perm = list(range(node.type.rank))
        perm[a], perm[a + 1] = perm[a + 1], perm[a]
        node = f.b.node(Op.TRANSPOSE, node, perm=perm)
    if node.dtype is DType.bool:
        node = f.b.node(Op.CAST, node, dtype=DType.float32)
    return node


def _check_params(f: Frame) -> None:
    for name, node in f.weights.nodes.items():
        bad = [d for d in node.type.shape if isinstance(d, str) and "?" in d]
        # Checking without a config, a callee's size that nothing pins (d_attn of the heads of an
        # algorithm group `W^h_qkv : Head`) is a size of its own, as every unset size is there; a
        # config fills it in by name, so only a graph to be built needs it solved.
        if bad and not f.symbolic:
            what = ", ".join(sorted({d.strip("?").split("#")[0] for d in bad}))
            raise f.error(HyperparameterError, f"cannot infer the size {what} of parameter {name}; declare it "
                          "among the entry's hyperparameters", f.alg.pos)
        runtime = [d for d in node.type.shape if isinstance(d, str)]
        if runtime and not f.symbolic:
            # A weight's shape is fixed when the model is built: its sizes need values, not run-time dims.
            what = ", ".join(sorted(set(runtime)))
            raise f.error(HyperparameterError, f"parameter {name} has size {what}, which has no value; set it in "
                          f"the config or with -D {runtime[0]}=…", f.alg.pos)


def _check_config(f: Frame, optional: set[str] | frozenset[str]) -> None:
    unused = sorted(set(f.config) - f.config_used - set(optional) - {k for k in f.sizes if k in f.config})
    if unused:
        raise f.error(HyperparameterError, f"unknown hyperparameter{'s' if len(unused) > 1 else ''} "
                      f"{', '.join(unused)} for {f.alg.name}", f.alg.pos)


__all__ = ["elaborate", "find_entry", "MaskDef"]
