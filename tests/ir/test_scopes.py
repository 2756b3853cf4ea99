"""Calls from scopes: one call per connected component of a scope, split where a path leaves a call and returns."""

from __future__ import annotations

from pseudoformer.ir.scopes import assign_groups


def test_a_path_that_leaves_a_component_and_returns_splits_it() -> None:
    # f's nodes 1 and 3 are connected, but 3 also reads 2, which its caller A computed from 1:
    # as one call, f would run both before and after A's node.
    scope = {1: "A/f", 2: "A", 3: "A/f"}
    keys = assign_groups([1, 2, 3], scope, {2: [1], 3: [1, 2]})
    assert keys == {1: "A/f", 2: "A", 3: "A/f#2"}


def test_two_loops_over_one_variable_are_told_apart_though_connected() -> None:
    # BART: encoder layers E0, E1 and decoder layers D0, D1 are all `layers.k`; E1's output feeds D1's
    # cross-attention (and D0's), so E1 and D1 are one component of `layers.1`.
    scope = {"e0": "M/layers.0", "e1": "M/layers.1", "d0": "M/layers.0", "q0": "M/layers.0",
             "d1": "M/layers.1", "q1": "M/layers.1"}
    src = {"e1": ["e0"], "q0": ["d0", "e1"], "d1": ["q0"], "q1": ["d1", "e1"]}
    keys = assign_groups(["e0", "e1", "d0", "q0", "d1", "q1"], scope, src)
    assert keys["e1"] != keys["d1"] == keys["q1"]
    assert keys["e0"] != keys["d0"] == keys["q0"]


def test_a_component_no_path_returns_to_stays_one_call() -> None:
    scope = {1: "A/f", 2: "A/f", 3: "A"}
    assert assign_groups([1, 2, 3], scope, {2: [1], 3: [1, 2]}) == {1: "A/f", 2: "A/f", 3: "A"}
