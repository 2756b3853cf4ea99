"""`inspect --passes` with compile options prints the pipeline a compile with those options runs: the
same passes, in the same order, run once (backends/pipeline.py assembles them in one place); and the
contrib ops' fusions show in `inspect --refusals`, `--diff` and the viewer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pseudoformer
from pseudoformer.backends import pipeline
from pseudoformer.backends.options import CompileOptions
from pseudoformer.viewer.data import view_data
from tests.cli.conftest import Cli

LLAMA = ["-D", "L=2", "-D", "d_e=64", "-D", "H=4", "-D", "H_kv=2", "-D", "d_mlp=128", "-D", "N_V=100",
         "-D", "d_attn=16"]
OPTIONS = [["--contrib-ops", "--quantize", "int4", "--dtype", "float16"], ["--contrib-ops"], ["--opset", "21"],
           ["-O1"], ["--padding-mask"], []]


def _printed(out: str) -> list[str]:
    start = out.index("compile pipeline")
    return re.findall(r"^\s+\d+\. (\S+)", out[start:], flags=re.M)


@pytest.mark.parametrize("flags", OPTIONS, ids=lambda f: " ".join(f) or "defaults")
def test_inspect_passes_prints_the_pipeline_a_compile_runs(cli: Cli, flags: list[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli("inspect", "--passes", *flags)
    assert code == 0, err
    printed = _printed(out)
    runs: list[list[str]] = []
    real = pipeline.run_passes

    def recording(graph, passes, **kw):  # noqa: ANN001, ANN202
        runs.append([p.name for p in passes])
        return real(graph, passes, **kw)

    monkeypatch.setattr(pipeline, "run_passes", recording)
    level = int(flags[0][2:]) if flags and flags[0].startswith("-O") else 2
    compile_flags = [f for f in flags if not f.startswith("-O")]
    kw = {"dtype": "float32", "contrib_ops": False, "padding_mask": False}
    i = 0
    while i < len(compile_flags):
        name = compile_flags[i].lstrip("-").replace("-", "_")
        if name in ("contrib_ops", "padding_mask"):
            kw[name] = True
        else:
            kw[name], i = compile_flags[i + 1], i + 1
        i += 1
    if "opset" in kw:
        kw["opset"] = int(kw["opset"])
    pseudoformer.compile("models/llama.alg", defines=LLAMA[1::2], opt_level=level, **kw)
    assert runs == [printed]  # the passes printed, and one run of them from the .alg's graph to the lowered one
    assert ("group_query_attention_fusion" in printed) == ("--contrib-ops" in flags)
    assert ("quantize" in printed) == ("--quantize" in flags) and ("float16" in printed) == ("float16" in flags)


def test_the_contrib_fusions_show_in_refusals_diff_and_the_viewer(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("inspect", "models/llama.alg", *LLAMA, "-O2", "--contrib-ops", "--diff",
                         "skip_norm_fusion")
    assert code == 0, err
    assert "+" in out and "skip_rms_norm" in out
    code, out, err = cli("inspect", "models/llama.alg", *LLAMA, "--contrib-ops", "--diff",
                         "group_query_attention_fusion")
    assert code == 0, err
    assert "group_query_attention" in out and "-  %" in out
    # float16 attention is not the kernel's: the refusal says so, counted once per attention (one per layer),
    # at the user's call of the shared algorithm, naming its line in variants.alg
    code, out, err = cli("inspect", "models/llama.alg", *LLAMA, "--contrib-ops", "--dtype", "float16", "--refusals")
    assert code == 0, err
    assert "group_query_attention refused 2 times: the kernel is taken in float32 only" in out
    assert re.search(r"llama\.alg:\d+:\d+: note: .*\(in variants\.alg:\d+\)", out)
    assert out.rstrip().endswith("2 refused fusions")
    page = tmp_path / "view.html"
    code, _, err = cli("inspect", "models/llama.alg", *LLAMA, "--contrib-ops", "--format", "html", "-o", page)
    assert code == 0, err
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    model = pseudoformer.load("models/llama.alg", defines=LLAMA[1::2])
    view = view_data(model.graph, 2, compile_options=CompileOptions(opt_level=2, contrib_ops=True),
                     weights=model.weights)
    steps = {s.label: s for s in view.snapshots}
    assert steps["group_query_attention_fusion"].new and steps["skip_norm_fusion"].new
