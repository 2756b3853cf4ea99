"""`pseudoformer train` as a researcher first meets it: one command per model (the packaged or derived
training algorithm), messages that name the next step, and the knobs (--betas, --eps, decay exemptions,
--warmup with SGD, --resume, plain progress lines in a log). A shared attention group at any L."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.weights.safetensors_io import read_safetensors

GPT2 = ["-D", "L=1", "-D", "H=2", "-D", "d_e=16", "-D", "d_mlp=32", "-D", "d_attn=8", "-D", "d_mid=8",
        "-D", "N_V=50", "-D", "ell_max=32", "-D", "eps=1e-5"]
LLAMA = ["-D", "L=1", "-D", "H=2", "-D", "H_kv=1", "-D", "d_e=16", "-D", "d_attn=8", "-D", "d_mlp=32",
         "-D", "N_V=50"]
LOSS = str(Path(__file__).resolve().parents[1] / "training" / "gpt2_loss.alg")


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(0, 50, 24 * 8).astype(np.int64))
    return path


def test_a_decoder_model_trains_through_the_packaged_dtraining(ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "models/gpt2.alg", *GPT2, "--data", str(ids), "--seq-len", "8", "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "through models/gpt2_dtraining.alg" in err and "trained 2 steps" in err


def test_a_decoder_without_a_training_file_gets_one_derived(ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "models/llama.alg", *LLAMA, "--data", str(ids), "--seq-len", "8", "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "derived from its kind" in err and "DTraining" in err and "η has no value: 0.0001" in err


def test_bert_trains_through_etraining(ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "models/bert.alg", *GPT2, "-D", "d_f=16", "-D", "mask_token=3", "--data", str(ids),
                 "--seq-len", "8", "--steps", "2"]) == 0
    assert "bert_etraining.alg" in capsys.readouterr().err


def test_a_model_of_unknown_kind_asks_for_an_objective(tmp_path: Path, ids: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    text = Path("models/gpt2.alg").read_text().split("# Algorithm 14 over GPT-2")[0]
    (tmp_path / "mine.alg").write_text(text)  # GPT-2 without its DInference: nothing says it is a decoder
    args = ["train", str(tmp_path / "mine.alg"), *GPT2, "--data", str(ids), "--seq-len", "8", "--steps", "1"]
    assert main(args) == 1
    assert "--objective next-token" in capsys.readouterr().err
    assert main([*args, "--objective", "next-token"]) == 0


def test_a_partial_define_names_the_missing_hyperparameters(ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "models/gpt2_dtraining.alg", "--config", "/dev/null", "-D", "L=2", "-D", "eps=1e-5",
                 "--data", str(ids)]) == 1
    err = capsys.readouterr().err
    assert "needs hyperparameters" in err and "-D d_mlp=…" in err and "?" not in err


def test_the_model_config_serves_its_training_file() -> None:
    model = load("models/gpt2_dtraining.alg", config="models/gpt2.toml", bind_weights=False)
    assert model.entry == "DTraining" and model.config.hyperparameters["ell_gen"] == 32


def _run(out: Path, ids: Path, *args: str) -> int:
    return main(["train", LOSS, *GPT2, "--data", str(ids), "--seq-len", "8", "--batch-size", "4", "--lr", "1e-2",
                 "-o", str(out), *args])


def test_resume_follows_the_uninterrupted_trajectory(tmp_path: Path, ids: Path) -> None:
    """AdamW over a shuffled loss algorithm, 6 batches an epoch: 4 steps, then --resume to 9, is 9 steps."""
    assert _run(tmp_path / "whole", ids, "--steps", "9") == 0
    assert _run(tmp_path / "part", ids, "--steps", "4") == 0
    assert _run(tmp_path / "part", ids, "--steps", "9", "--resume", str(tmp_path / "part")) == 0
    whole = read_safetensors(tmp_path / "whole" / "model.safetensors")
    got = read_safetensors(tmp_path / "part" / "model.safetensors")
    assert all(np.array_equal(got[k], whole[k]) for k in whole)
    assert np.array_equal(read_safetensors(tmp_path / "part" / "optimizer.safetensors")["t"],
                          read_safetensors(tmp_path / "whole" / "optimizer.safetensors")["t"])

    def losses(d: Path) -> list[str]:
        return [r.split(",")[1] for r in (d / "loss.csv").read_text().splitlines()[1:]]

    assert losses(tmp_path / "part") == losses(tmp_path / "whole") and len(losses(tmp_path / "whole")) == 9


def test_weight_decay_spares_norms_and_biases_unless_decay_all(tmp_path: Path, ids: Path) -> None:
    def trained(*args: str) -> dict[str, np.ndarray]:
        out = tmp_path / "_".join(args or ("plain",))
        assert _run(out, ids, "--steps", "1", "--no-shuffle", *args) == 0
        return read_safetensors(out / "model.safetensors")

    none, strong, every = trained("--weight-decay", "0"), trained("--weight-decay", "5"), \
        trained("--weight-decay", "5", "--decay-all")
    bias, matrix = "theta.layers.0.b_mlp1", "theta.layers.0.W_mlp1"
    assert np.array_equal(none[bias], strong[bias]) and not np.array_equal(none[matrix], strong[matrix])
    assert not np.array_equal(none[bias], every[bias])


def test_betas_and_eps_change_adamw_and_are_refused_for_sgd(tmp_path: Path, ids: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    assert _run(tmp_path / "a", ids, "--steps", "2", "--no-shuffle") == 0
    assert _run(tmp_path / "b", ids, "--steps", "2", "--no-shuffle", "--betas", "0.8", "0.99", "--eps", "1e-6") == 0
    a, b = (read_safetensors(tmp_path / d / "model.safetensors") for d in "ab")
    assert not np.array_equal(a["theta.W_e"], b["theta.W_e"])
    assert _run(tmp_path / "c", ids, "--steps", "1", "--optimizer", "sgd", "--eps", "1e-6") == 1
    assert "SGD has none" in capsys.readouterr().err
    assert _run(tmp_path / "d", ids, "--steps", "1", "--betas", "0.9", "1.5") == 1
    assert "--betas (β2) must be a finite number in [0, 1)" in capsys.readouterr().err


def test_warmup_works_with_sgd(tmp_path: Path, ids: Path) -> None:
    plain = _run(tmp_path / "a", ids, "--steps", "3", "--optimizer", "sgd", "--no-shuffle")
    warm = _run(tmp_path / "b", ids, "--steps", "3", "--optimizer", "sgd", "--no-shuffle", "--warmup", "2")
    assert plain == warm == 0
    a, b = ((tmp_path / d / "loss.csv").read_text().splitlines()[2:] for d in "ab")
    assert a != b


def test_a_log_gets_a_plain_line_every_n_steps(tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert _run(tmp_path / "a", ids, "--steps", "5", "--log-every", "2") == 0
    err = capsys.readouterr().err
    assert "\r" not in err and [line.split()[1] for line in err.splitlines() if line.startswith("step ")] == \
        ["2/5", "4/5", "5/5"]


SHARED = """use MHAttention from "paper/primitives.alg"

Algorithm: Y ← Shared(x | θ)
  Input: x ∈ V*
  Output: Y ∈ ℝ^{N_V × length(x)}
  Hyperparameters: L, H, d_e, N_V, ℓ_max, d_attn, d_mid ∈ ℕ
  Parameters: θ consisting of:
    W_e ∈ ℝ^{d_e × N_V}, W_p ∈ ℝ^{d_e × ℓ_max}
    W : MHAttention, one attention group shared by every layer
  1  ℓ ← length(x)
  2  for t ∈ [ℓ] : e_t ← W_e[:, x[t]] + W_p[:, t]
  3  X ← [e_1, e_2, …, e_ℓ]
BODY
  7  return Y = W_eᵀ X
"""


def test_an_attention_group_shared_by_every_layer_compiles_at_any_depth(tmp_path: Path) -> None:
    loop = "  4  for l = 1, 2, …, L do\n  5    X ← X + MHAttention(X | W, Mask[t, t'] = [[t ≤ t']])\n  6  end"
    twice = "\n".join(f"  {n}  X ← X + MHAttention(X | W, Mask[t, t'] = [[t ≤ t']])" for n in (4, 5, 6))
    (tmp_path / "loop.alg").write_text(SHARED.replace("BODY", loop))
    (tmp_path / "unrolled.alg").write_text(SHARED.replace("BODY", twice))
    sizes = ["H=2", "d_e=8", "N_V=10", "ell_max=8", "d_attn=4", "d_mid=4"]
    looped = load(tmp_path / "loop.alg", defines=["L=3", *sizes])
    unrolled = load(tmp_path / "unrolled.alg", defines=["L=1", *sizes], seed=0)
    x = np.array([[1, 2, 3, 4]])
    assert all(np.array_equal(looped.weights[k], unrolled.weights[k]) for k in unrolled.weights)
    assert sorted(looped.weights) == sorted(unrolled.weights)
    np.testing.assert_allclose(looped.run(x=x)["Y"], unrolled.run(x=x)["Y"], rtol=1e-6)


def test_the_validation_loss_is_the_trained_model_s_mean_loss_on_the_held_out_data(tmp_path: Path, ids: Path) -> None:
    held = tmp_path / "val.npy"
    np.save(held, np.random.default_rng(7).integers(0, 50, 5 * 8).astype(np.int64))
    out = tmp_path / "out"
    assert _run(out, ids, "--steps", "5", "--val-data", str(held), "--val-every", "2") == 0
    rows = [line.split(",") for line in (out / "loss.csv").read_text().splitlines()]
    assert rows[0] == ["step", "loss", "tokens_per_s", "val_loss"]
    assert [bool(r[3]) for r in rows[1:]] == [False, True, False, True, True]
    trained = load(LOSS, defines=[d for d in GPT2 if d != "-D"], weights=out / "model.safetensors")
    want = np.mean(trained.run(x=np.load(held).reshape(5, 8))["loss"])
    assert abs(float(rows[-1][3]) - want) <= 1e-5 * abs(want)
    assert (out / "loss.svg").read_text().count("<polyline") == 2


def test_a_per_token_mean_is_the_sum_over_l_minus_1(tmp_path: Path, ids: Path) -> None:
    mean = str(Path(LOSS).with_name("gpt2_mean_loss.alg"))
    common = ["--data", str(ids), "--seq-len", "8", "--batch-size", "4", "--lr", "1e-2", "--steps", "1"]
    assert main(["train", LOSS, *GPT2, *common, "-o", str(tmp_path / "sum")]) == 0
    assert main(["train", mean, *GPT2, *common, "-o", str(tmp_path / "mean")]) == 0
    first = [float((tmp_path / d / "loss.csv").read_text().splitlines()[1].split(",")[1]) for d in ("sum", "mean")]
    assert abs(first[0] / 7 - first[1]) <= 1e-5 * first[1]


def test_gpt2_init_scales_the_residual_projections() -> None:
    from pseudoformer.training.init import gpt2_init

    shapes = {"W_e": (64, 500), "layers.0.W.W_o": (64, 64), "layers.1.W.W_o": (64, 64), "layers.0.W_mlp2": (64, 256),
              "layers.1.W_mlp2": (64, 256), "layers.0.b_mlp1": (256,), "layers.0.gamma_1": (64,),
              "layers.0.beta_1": (64,)}
    drawn, scaled = gpt2_init({k: np.zeros(v, np.float32) for k, v in shapes.items()}, seed=3)
    assert sorted(scaled) == ["layers.0.W.W_o", "layers.0.W_mlp2", "layers.1.W.W_o", "layers.1.W_mlp2"]
    assert abs(drawn["W_e"].std() - 0.02) < 1e-3 and abs(drawn["layers.0.W_mlp2"].std() - 0.01) < 1e-3  # 0.02/√4
    assert not drawn["layers.0.b_mlp1"].any() and not drawn["layers.0.beta_1"].any()
    assert (drawn["layers.0.gamma_1"] == 1).all()


def test_init_gpt2_trains_and_is_refused_with_weights(tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture) -> None:
    assert _run(tmp_path / "a", ids, "--steps", "1", "--init", "gpt2") == 0
    assert "scaled 2 residual projections" in capsys.readouterr().err
    assert _run(tmp_path / "b", ids, "--steps", "1", "--init", "gpt2", "--weights",
                str(tmp_path / "a" / "model.safetensors")) == 1
    assert "does not go with --weights" in capsys.readouterr().err
