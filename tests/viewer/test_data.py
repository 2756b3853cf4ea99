"""What the viewers are given: snapshots over stable node ids, groups per call, folded parameters."""

from __future__ import annotations

from pseudoformer.ir.printer import value_numbers
from pseudoformer.ir.scopes import assign_groups
from pseudoformer.optimize import optimize
from pseudoformer.viewer.data import payload, runs, single_view, view_data
from pseudoformer.viewer.groups import group_table
from tests.viewer.models import small


def test_snapshots_are_the_graph_after_each_pass_in_printer_order() -> None:
    m = small("gpt2")
    vd = view_data(m.graph, 2)
    labels = [s.label for s in vd.snapshots]
    assert labels[0] == "-O0" and "layer_norm_fusion" in labels and labels[-1] == "simplify"
    assert vd.initial == len(vd.snapshots) - 1  # -O2 opens on the optimised graph
    last = optimize(m.graph, 2)
    nodes = last.nodes()
    assert len(vd.snapshots[-1].entries) == len(nodes)
    numbers = value_numbers(nodes)
    for n, e in zip(nodes, vd.snapshots[-1].entries, strict=True):
        entry = vd.table.entries[e]
        assert (entry.op, entry.type, entry.scope) == (n.op.value, str(n.type), n.scope), numbers[id(n)]


def test_a_fusion_is_new_and_its_readers_are_rewired_but_not_their_readers() -> None:
    vd = view_data(small("gpt2").graph, 2)
    k = next(i for i, s in enumerate(vd.snapshots) if s.label == "layer_norm_fusion")
    snap, table = vd.snapshots[k], vd.table.entries
    assert {table[e].op for e in snap.new} == {"layer_norm"}
    assert len(snap.new) == 5  # two per layer and the final one, L=2
    # Only what reads a fused layer norm changed, not everything downstream of it.
    fused = {table[e].stable for e in snap.new}
    assert snap.rewired and all(any(s in fused for s in table[e].src) for e in snap.rewired)
    assert {table[e].op for e in snap.removed} >= {"reduce_sum", "sqrt"}
    unchanged = next(i for i, s in enumerate(vd.snapshots) if i > 0 and s.label == "simplify")
    assert not (vd.snapshots[unchanged].new or vd.snapshots[unchanged].rewired)


def test_parameters_constants_and_sizes_fold_into_their_readers() -> None:
    vd = single_view(optimize(small("gpt2").graph, 0))
    table = vd.table.entries
    live_ops = {table[e].op for e in vd.live_entries(0)}
    assert not live_ops & {"param", "const", "dim"}
    slices = [table[e] for e in vd.snapshots[0].entries if table[e].op == "slice" and not table[e].live]
    assert [s.name for s in slices] == ["slice(W_p, 0, dim(x, 1))"]  # W_p[:, t] for t ∈ [ℓ]
    params = {table[e].name for e in vd.snapshots[0].entries if table[e].op == "param"}
    assert "W_e" in params and "layers.0.W.heads.1.W_q" in params


def test_each_call_of_a_scope_is_its_own_group() -> None:
    vd = single_view(small("gpt2").graph)
    keys = set(vd.groups[0].values())
    # GPT-2's layer calls layer_norm twice under one scope; MHAttention calls Attention per head.
    assert {"GPT2/layers.0/layer_norm", "GPT2/layers.0/layer_norm#2", "GPT2/layers.1/MHAttention/heads.1/Attention"} <= keys
    table = group_table(list(keys))
    assert table["GPT2/layers.0/layer_norm#2"].label == "layer_norm #2"
    assert table["GPT2/layers.0/layer_norm#2"].parent == "GPT2/layers.0"
    assert table["GPT2"].depth == 1 and table["GPT2"].parent is None


def test_groups_split_disconnected_calls_and_keep_connected_ones() -> None:
    scope = {1: "A/f", 2: "A/f", 3: "A", 4: "A/f", 5: "A/f"}
    src = {2: [1], 3: [2], 4: [3], 5: [4]}
    keys = assign_groups([1, 2, 3, 4, 5], scope, src)
    assert keys == {1: "A/f", 2: "A/f", 3: "A", 4: "A/f#2", 5: "A/f#2"}


def test_runs_code_lists_compactly() -> None:
    assert runs([3, 4, 5, 9, 10, 2]) == [3, 3, 9, 2, 2, 1]
    assert runs([]) == []


def test_payload_names_sources_and_every_group() -> None:
    m = small("bart")
    vd = view_data(m.graph, 0)
    p = payload(vd)
    files = [f for f, _ in p["files"]]
    assert any(f.endswith("bart.alg") for f in files) and any(f.endswith("primitives.alg") for f in files)
    assert all(lines for _, lines in p["files"])
    keys = {g[0] for g in p["groups"]}
    assert {"BART", "BART/layers.0", "BART/layers.0/MHAttention"} <= keys
    for entry in p["entries"]:
        stable, op, type_, src, attrs, span, name, live, group = entry
        if live and span:
            assert 0 <= span[0] < len(files) and span[1] >= 1
        assert live in (0, 1) and isinstance(src, list)
