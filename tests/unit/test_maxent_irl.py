"""Tier 1 for MaxEnt IRL: the MaxEnt IRL worked problem (docs/worked_problems.md), soft value iteration
and the forward pass on a two-state MDP solved by hand, in both twins; the gradient; the gridworld; bad
input."""

import math

import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/maxent_irl_torch.py", "algos/maxent_irl_jax.py"]
LN3, LN6, LN9, LN18, LN36 = (math.log(x) for x in (3, 6, 9, 18, 36))


def two_state():
    """States 0, 1; actions 0 = stay, 1 = go. From 0, stay keeps 0 and go moves to 1; state 1 is
    absorbing (both actions stay). r = [0, ln 3], gamma = 1/2."""
    P = np.zeros((2, 2, 2), dtype=np.float32)
    P[0, 0, 0] = P[0, 1, 1] = P[1, 0, 1] = P[1, 1, 1] = 1.0
    return P, np.array([0.0, LN3], dtype=np.float32)


@pytest.mark.parametrize("script", TWINS)
def test_two_state_soft_value_iteration_by_hand(script):
    """State 1: V1 = ln 3 + ln(2 e^{V1/2}) = ln 6 + V1/2, so V1 = 2 ln 6 = ln 36 and
    Q(1, .) = ln 3 + ln 36 / 2 = ln 18 (pi = 1/2, 1/2).
    State 0: V0 = ln(e^{V0/2} + e^{V1/2}) = ln(e^{V0/2} + 6); with x = e^{V0/2}, x^2 = x + 6, x = 3,
    so V0 = ln 9, Q(0, stay) = ln 9 / 2 = ln 3, Q(0, go) = ln 36 / 2 = ln 6, pi(. | 0) = [3/9, 6/9]."""
    m, c = load_script(script), conv(script)
    P, r = two_state()
    Q, V, pi = m.soft_value_iteration(c(r), c(P), 0.5, 100)  # 0.5^100: exact in float32
    np.testing.assert_allclose(np.asarray(V), [LN9, LN36], atol=1e-5)
    np.testing.assert_allclose(np.asarray(Q), [[LN3, LN6], [LN18, LN18]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(pi), [[1 / 3, 2 / 3], [0.5, 0.5]], atol=1e-6)
    assert np.asarray(m.greedy_actions(Q)).tolist() == [1, 0]  # go from 0; a tie in 1 goes to action 0


@pytest.mark.parametrize("script", TWINS)
def test_two_state_soft_backup_contracts_by_gamma(script):
    """The soft Bellman operator is a gamma-contraction: after k sweeps from V = 0 the error is at
    most gamma^k ||V*||_inf = 0.5^k ln 36."""
    m, c = load_script(script), conv(script)
    P, r = two_state()
    for k in range(1, 12):
        _, V, _ = m.soft_value_iteration(c(r), c(P), 0.5, k - 1)  # k backups in all
        err = np.abs(np.asarray(V) - [LN9, LN36]).max()
        assert err <= 0.5**k * LN36 + 1e-6, (k, err)


@pytest.mark.parametrize("script", TWINS)
def test_two_state_visitation_by_hand(script):
    """From state 0 under pi(. | 0) = [1/3, 2/3]: d_t(0) = 3^-t, so d_0 = [1, 0], d_1 = [1/3, 2/3],
    d_2 = [1/9, 8/9]. gamma 1/2, horizon 3: D = [1 + 1/6 + 1/36, 1/3 + 2/9] = [43/36, 5/9], summing to
    1 + 1/2 + 1/4 = 1.75 = (1 - gamma^3) / (1 - gamma). gamma 1: D = [13/9, 14/9], summing to the
    horizon 3."""
    m, c = load_script(script), conv(script)
    P, _ = two_state()
    pi, start = c([[1 / 3, 2 / 3], [0.5, 0.5]]), c([1.0, 0.0])
    D = np.asarray(m.state_visitation(pi, c(P), start, 0.5, 3))
    np.testing.assert_allclose(D, [43 / 36, 5 / 9], atol=1e-6)
    assert D.sum() == pytest.approx(1.75, abs=1e-6)
    D1 = np.asarray(m.state_visitation(pi, c(P), start, 1.0, 3))
    np.testing.assert_allclose(D1, [13 / 9, 14 / 9], atol=1e-6)
    assert D1.sum() == pytest.approx(3.0, abs=1e-6)
    # the exact undiscounted return of pi over 3 steps under r = [0, ln 3]: 14/9 ln 3
    assert float(m.policy_return(pi, c(P), start, c([0.0, LN3]), 3)) == pytest.approx(14 / 9 * LN3, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_two_state_expert_features_and_gradient(script):
    """One-hot features. Demonstrations [0, 1, 1] and [0, 0, 1], gamma 1/2: discounted feature sums
    [1, 0.5 + 0.25] and [1 + 0.5, 0.25]; their mean mu_E = [1.25, 0.5]. Against the learner's
    D = [43/36, 5/9] the gradient is mu_E - D = [2/36, -1/18] (sums to zero: both total 1.75)."""
    m, c = load_script(script), conv(script)
    F = c(np.eye(2))
    states = conv(script, dtype=np.int64)([[0, 1, 1], [0, 0, 1]])
    mu = np.asarray(m.expert_feature_expectations(states, F, 0.5))
    np.testing.assert_allclose(mu, [1.25, 0.5], atol=1e-6)
    grad = np.asarray(m.maxent_gradient(c(mu), c([43 / 36, 5 / 9]), F))
    np.testing.assert_allclose(grad, [1.25 - 43 / 36, 0.5 - 5 / 9], atol=1e-6)
    # the reward moves toward the state the expert visits more than the learner does
    assert grad[0] > 0 > grad[1]


@pytest.mark.parametrize("script", TWINS)
def test_gradient_is_zero_when_learner_features_equal_experts(script):
    """mu_E = F^T D (the expert's feature expectations are the learner's) -> the gradient is 0."""
    m, c = load_script(script), conv(script)
    P, r, F, start = m.make_gridworld("puddle7x7", 0.1, "cell_type")
    _, _, pi = m.soft_value_iteration(c(r), c(P), 0.9, 150)
    D = m.state_visitation(pi, c(P), c(start), 0.9, 30)
    mu = c(F).T @ D
    np.testing.assert_allclose(np.asarray(m.maxent_gradient(mu, D, c(F))), 0.0, atol=1e-6)
    # and demonstrations drawn from the learner's own policy give a gradient that shrinks with their
    # number (a Monte Carlo estimate of the same expectation): 4000 episodes leave < 2% of ||mu||
    states, _ = m.sample_episodes(np.asarray(pi), P, start, 30, 4000, np.random.default_rng(0))
    mu_hat = m.expert_feature_expectations(conv(script, dtype=np.int64)(states), c(F), 0.9)
    gap = np.linalg.norm(np.asarray(m.maxent_gradient(mu_hat, D, c(F))))
    assert gap < 0.02 * np.linalg.norm(np.asarray(mu)), gap


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("gamma,horizon", [(0.9, 30), (0.5, 7), (1.0, 12)])
def test_visitation_sums_to_discounted_horizon(script, gamma, horizon):
    """sum_s D(s) = sum_{t < T} gamma^t: the horizon for gamma = 1, (1 - gamma^T) / (1 - gamma) else,
    for any policy on the (non-terminating) gridworld."""
    m, c = load_script(script), conv(script)
    P, r, F, start = m.make_gridworld("puddle7x7", 0.1, "onehot")
    _, _, pi = m.soft_value_iteration(c(r), c(P), 0.9, 150)
    uniform = c(np.full((49, 5), 0.2))
    expected = horizon if gamma == 1.0 else (1 - gamma**horizon) / (1 - gamma)
    for policy in (pi, uniform):
        assert float(m.state_visitation(policy, c(P), c(start), gamma, horizon).sum()) == pytest.approx(
            expected, rel=1e-5
        )


@pytest.mark.parametrize("script", TWINS)
def test_reward_shift_leaves_the_soft_policy_unchanged(script):
    """One face of IRL's ambiguity: r + k (any constant) gives the same soft policy, V shifted by
    k / (1 - gamma), so no amount of demonstrations can pin down the reward's level."""
    m, c = load_script(script), conv(script)
    P, r, _, _ = m.make_gridworld("puddle7x7", 0.1, "onehot")
    _, V, pi = m.soft_value_iteration(c(r), c(P), 0.9, 150)
    _, V2, pi2 = m.soft_value_iteration(c(r + 2.0), c(P), 0.9, 150)
    np.testing.assert_allclose(np.asarray(pi2), np.asarray(pi), atol=1e-5)
    np.testing.assert_allclose(np.asarray(V2) - np.asarray(V), 2.0 / 0.1, atol=1e-3)


@pytest.mark.parametrize("script", TWINS)
def test_policy_match_counts_ties_and_masks(script):
    m, c = load_script(script), conv(script)
    Q_expert = c([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])  # state 0: actions 0 and 1 tie
    Q_learner = c(
        [[0.0, 5.0, 0.0], [0.0, 0.0, 1.0], [9.0, 0.0, 0.0]]
    )  # greedy 1 (tied: ok), 2 (wrong), 0 (ok)
    assert float(m.policy_match(Q_learner, Q_expert, 1e-4, c([1, 1, 1]))) == pytest.approx(2 / 3)
    assert float(m.policy_match(Q_learner, Q_expert, 1e-4, c([1, 0, 1]))) == 1.0
    assert float(m.policy_match(Q_learner, Q_expert, 1e-4, c([0, 1, 0]))) == 0.0


# ----------------------------------------------------------------------------- the gridworld
def test_gridworld_model_slip_and_features():
    m = load_script(TWINS[0])
    P, r, F, start = m.make_gridworld("puddle7x7", 0.1, "cell_type")
    assert P.shape == (49, 5, 49) and F.shape == (49, 3) and start[0] == 1.0 and start.sum() == 1.0
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-6)
    # from the start corner (0, 0), "right": 0.9 + 0.1 / 5 to (0, 1); up, left and stay keep it
    # in the corner (0.1 * 3/5); down reaches (1, 0) with 0.1 / 5
    np.testing.assert_allclose(P[0, 3, [1, 0, 7]], [0.92, 0.06, 0.02], atol=1e-6)
    assert r[4 * 7 + 5] == 5.0 and r[1 * 7 + 1] == -5.0 and r[0] == 0.0  # goal, puddle, start
    assert F[4 * 7 + 5].tolist() == [0, 1, 0] and F[8].tolist() == [0, 0, 1] and F[0].tolist() == [1, 0, 0]
    _, _, F1, _ = m.make_gridworld("puddle7x7", 0.1, "onehot")
    np.testing.assert_array_equal(F1, np.eye(49))


def test_sample_episodes_follow_a_deterministic_policy_without_slip():
    m = load_script(TWINS[0])
    P, _, _, start = m.make_gridworld("open5x5", 0.0, "onehot")
    right = np.zeros((25, 5), dtype=np.float32)
    right[:, 3] = 1.0
    states, actions = m.sample_episodes(right, P, start, 7, 2, np.random.default_rng(0))
    assert states.tolist() == [[0, 1, 2, 3, 4, 4, 4]] * 2 and (actions == 3).all()


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "override,match",
    [
        ({"grid": "maze9x9"}, "puddle7x7, open5x5"),
        ({"features": "pixels"}, "cell_type, onehot"),
        ({"horizon": 0}, "--horizon"),
        ({"num_demos": 0}, "--num-demos"),
        ({"gamma": 1.0}, "--gamma"),
        ({"slip": 1.5}, "--slip"),
        ({"total_steps": 0}, "--total-steps"),
    ],
)
def test_bad_input_is_refused_before_any_run_directory(script, override, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **override))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
