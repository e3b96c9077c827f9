"""The Saha-Sindhwani simulated stream generator and the symmetric KL divergence."""

from __future__ import annotations

import numpy as np
from sparsewatch.replay.topic_simulation import simulate_topic_stream, symmetric_kl


def test_stream_follows_the_paper_setting() -> None:
    s = simulate_topic_stream(random_state=0)
    assert s.X.shape == (1000, 2500)
    assert s.topics.shape == (25, 2500)
    np.testing.assert_allclose(s.topics.sum(axis=1), 1.0)
    assert np.all((s.topics > 0).sum(axis=1) == 25)  # sparsity 0.01 of 2,500 terms
    assert np.all(np.bincount(s.dominant) == 40)
    rows = np.arange(1000)
    assert np.all(s.mixing[rows, s.dominant] >= 0.8)
    assert np.all(s.mixing.argmax(axis=1) == s.dominant)
    np.testing.assert_allclose(s.mixing.sum(axis=1), 1.0)
    assert 2.2 <= (s.mixing > 0).sum(axis=1).mean() <= 2.8
    assert set(np.unique(s.days)) == set(range(31))
    np.testing.assert_array_equal(s.births[:5], 0)
    np.testing.assert_array_equal(s.births[5:], np.arange(5, 25))
    for k in range(5, 25):
        days = s.days[s.dominant == k]
        assert days.min() >= k
        # rising: the second half of its life holds more of its documents than the first
        mid = (k + 30) / 2
        assert np.sum(days > mid) > np.sum(days < mid)
    for d in range(1000):
        assert np.all(s.births[s.mixing[d] > 0] <= s.days[d])
    noise = s.X.toarray() - s.mixing @ s.topics
    assert 0.0005 <= np.mean(noise > 1e-12) <= 0.002


def test_stream_is_reproducible() -> None:
    a, b = simulate_topic_stream(random_state=3), simulate_topic_stream(random_state=3)
    assert (a.X != b.X).nnz == 0
    np.testing.assert_array_equal(a.days, b.days)


def test_symmetric_kl() -> None:
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(30), size=4)
    Q = rng.dirichlet(np.ones(30), size=3)
    D = symmetric_kl(P, Q)
    np.testing.assert_allclose(D, symmetric_kl(Q, P).T, atol=1e-12)
    assert np.all(D > 0)
    np.testing.assert_allclose(np.diag(symmetric_kl(P, P)), 0.0, atol=1e-12)
    eps = 1e-4
    p = (P[0] + eps) / (P[0] + eps).sum()
    q = (Q[1] + eps) / (Q[1] + eps).sum()
    assert np.isclose(D[0, 1], np.sum(p * np.log(p / q)) + np.sum(q * np.log(q / p)))
