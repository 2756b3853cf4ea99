"""Sampling as the paper defines it: q ∝ p^{1/τ}; greedy at τ = 0; top-k/top-p cuts; seeded draws."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.generation.sampling import Sampling, SamplingError, distribution, log_probabilities, sample

P = np.array([0.05, 0.1, 0.15, 0.3, 0.4])


def _draws(sampling: Sampling, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    log_p = np.log(np.tile(P, (n, 1)))
    return sample(log_p, sampling, rng)


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_empirical_distribution_matches_p_to_the_one_over_tau(tau: float) -> None:
    n = 40_000
    counts = np.bincount(_draws(Sampling(temperature=tau), n, seed=11), minlength=len(P))
    q = P ** (1 / tau) / (P ** (1 / tau)).sum()
    # Each frequency is within 4.5 standard errors of q (a binomial bound; with this fixed seed the
    # test is deterministic, and a wrong exponent such as p^τ misses by 20+ standard errors).
    se = np.sqrt(q * (1 - q) / n)
    assert np.all(np.abs(counts / n - q) <= 4.5 * se), (counts / n, q)
    # and a chi-square statistic below the 99.9% quantile of χ²(4), 18.47
    assert (((counts - n * q) ** 2) / (n * q)).sum() < 18.47


def test_the_wrong_exponent_would_be_caught() -> None:
    n, tau = 40_000, 0.5
    counts = np.bincount(_draws(Sampling(temperature=tau), n, seed=11), minlength=len(P))
    wrong = P ** tau / (P ** tau).sum()
    assert (((counts - n * wrong) ** 2) / (n * wrong)).sum() > 1000


def test_same_seed_same_tokens_and_different_seed_different_tokens() -> None:
    a = _draws(Sampling(temperature=1.0), 200, seed=5)
    b = _draws(Sampling(temperature=1.0), 200, seed=5)
    c = _draws(Sampling(temperature=1.0), 200, seed=6)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_temperature_zero_is_argmax_with_ties_to_the_lowest_id() -> None:
    log_p = np.log(np.array([[0.2, 0.4, 0.4], [0.5, 0.25, 0.25]]))
    assert sample(log_p, Sampling(temperature=0), np.random.default_rng(0)).tolist() == [1, 0]


def test_low_temperature_approaches_greedy() -> None:
    assert set(_draws(Sampling(temperature=0.01), 500).tolist()) == {4}


def test_logits_and_probabilities_give_the_same_log_p() -> None:
    logits = np.array([[1.0, -2.0, 0.5, 3.0]])
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(log_probabilities(logits, "logits"), log_probabilities(p, "probabilities"), atol=1e-12)


def test_zero_probability_tokens_are_never_drawn() -> None:
    log_p = log_probabilities(np.tile([0.5, 0.0, 0.5, 0.0], (5000, 1)), "probabilities")
    drawn = sample(log_p, Sampling(temperature=0.7), np.random.default_rng(1))
    assert set(drawn.tolist()) == {0, 2}


def test_top_k_keeps_the_k_most_likely() -> None:
    q = distribution(np.log(P)[None], Sampling(temperature=1.0, top_k=2))[0]
    np.testing.assert_allclose(q, [0, 0, 0, 0.3 / 0.7, 0.4 / 0.7])
    assert set(_draws(Sampling(top_k=2), 2000).tolist()) == {3, 4}


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    # sorted: 0.4, 0.3, 0.15, …: 0.4 < 0.6, so 0.3 is needed too; 0.7 ≥ 0.6 stops there
    q = distribution(np.log(P)[None], Sampling(temperature=1.0, top_p=0.6))[0]
    np.testing.assert_allclose(q, [0, 0, 0, 0.3 / 0.7, 0.4 / 0.7])
    q = distribution(np.log(P)[None], Sampling(temperature=1.0, top_p=0.4))[0]
    np.testing.assert_allclose(q, [0, 0, 0, 0, 1])


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=0),
                                 dict(top_p=0.0), dict(top_p=1.5)])
def test_meaningless_settings_are_refused(bad: dict) -> None:
    with pytest.raises(SamplingError):
        Sampling(**bad)
