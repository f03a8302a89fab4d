"""Tier 1 for value iteration: worked problem 1 (docs/worked_problems.md), the Bellman system of a
two-state MDP, in both twins with exact numbers; the contraction; a toy-text model; bad input."""

import gymnasium as gym
import numpy as np
import pytest

from helpers import conv, load_script

TWINS = ["algos/value_iteration_torch.py", "algos/value_iteration_jax.py"]
GAMMA = 0.9


def problem1():
    """States 0, 1; actions 0 = stay, 1 = move (deterministic). r(0, stay) = 1, r(0, move) = 0,
    r(1, stay) = 0, r(1, move) = 2."""
    P = np.zeros((2, 2, 2), dtype=np.float32)
    P[0, 0, 0] = P[0, 1, 1] = P[1, 0, 1] = P[1, 1, 0] = 1.0
    R = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    return P, R


@pytest.mark.parametrize("script", TWINS)
def test_problem1_random_policy_linear_solve_and_iteration(script):
    m, c = load_script(script), conv(script)
    P, R = problem1()
    pi = c(np.full((2, 2), 0.5))
    # r_pi = [0.5, 1], P_pi = all 0.5: V = r_pi + 0.9 * mean(V) 1 -> mean(V) = 7.5, V = [7.25, 7.75]
    v_lin = np.asarray(m.policy_evaluation_linear(c(P), c(R), pi, GAMMA))
    np.testing.assert_allclose(v_lin, [7.25, 7.75], atol=1e-5)
    v_it = np.asarray(m.policy_evaluation_iterative(c(P), c(R), pi, GAMMA, 300))
    np.testing.assert_allclose(v_it, [7.25, 7.75], atol=1e-4)  # 0.9^300 * 7.75 ~ 1e-13, float32 rounding


@pytest.mark.parametrize("script", TWINS)
def test_problem1_value_iteration_q_star_and_greedy_policy(script):
    m, c = load_script(script), conv(script)
    P, R = problem1()
    V, Q, changes = m.value_iteration(c(P), c(R), GAMMA, 1e-6, 10_000)
    # V*(1) = 2 + 0.9 V*(0), V*(0) = 1 + 0.9 V*(0) = 10 -> V*(1) = 11; Q*(0, move) = 0 + 0.9 * 11
    np.testing.assert_allclose(np.asarray(Q), [[10.0, 9.9], [9.9, 11.0]], atol=1e-4)
    np.testing.assert_allclose(np.asarray(V), [10.0, 11.0], atol=1e-4)
    assert np.asarray(m.greedy_policy(Q)).tolist() == [0, 1]  # stay in 0, move from 1
    # the greedy policy's exact value is V*
    one_hot = c(np.eye(2)[[0, 1]])
    np.testing.assert_allclose(
        np.asarray(m.policy_evaluation_linear(c(P), c(R), one_hot, GAMMA)), [10, 11], atol=1e-4
    )


@pytest.mark.parametrize("script", TWINS)
def test_problem1_sup_norm_error_shrinks_by_gamma_per_sweep(script):
    m, c = load_script(script), conv(script)
    P, R = problem1()
    V_star = np.array([10.0, 11.0])
    V = c(np.zeros(2))
    errors = []
    for _ in range(40):
        errors.append(np.abs(np.asarray(V) - V_star).max())
        V, _ = m.value_iteration_sweep(V, c(P), c(R), GAMMA)
    ratios = np.array(errors[1:]) / np.array(errors[:-1])
    assert (ratios <= GAMMA + 1e-5).all(), ratios
    # here the bound is tight after the first sweep: V_k = V* - 10 * 0.9^k for k >= 1
    assert errors[0] == 11.0
    np.testing.assert_allclose(errors[1:], 10.0 * GAMMA ** np.arange(1, 40), rtol=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_terminal_transitions_bootstrap_nothing(script):
    """A sub-stochastic row: from the single state, the episode ends with probability 1/2.
    V = 1 + 0.9 * 0.5 V -> V = 1 / 0.55."""
    m, c = load_script(script), conv(script)
    P, R = np.full((1, 1, 1), 0.5, dtype=np.float32), np.ones((1, 1), dtype=np.float32)
    assert float(m.policy_evaluation_linear(c(P), c(R), c(np.ones((1, 1))), GAMMA)[0]) == pytest.approx(
        1 / 0.55, rel=1e-6
    )


def test_mdp_from_env_frozenlake_rows():
    m = load_script(TWINS[0])
    env = gym.make("FrozenLake-v1")
    P, R, start = m.mdp_from_env(env)
    assert P.shape == (16, 4, 16) and R.shape == (16, 4)
    assert start[0] == 1.0 and start.sum() == 1.0
    # holes (5, 7, 11, 12) and the goal (15) are absorbing: no mass goes on, no reward
    for s in (5, 7, 11, 12, 15):
        assert P[s].sum() == 0.0 and R[s].sum() == 0.0
    # from 14, action right (2): 1/3 each to 14 (stays), 15 (goal, reward 1, ends), 10
    np.testing.assert_allclose(P[14, 2, [10, 14]], [1 / 3, 1 / 3], atol=1e-6)
    assert P[14, 2, 15] == 0.0 and R[14, 2] == pytest.approx(1 / 3)


@pytest.mark.parametrize("script", TWINS)
def test_cliffwalking_optimum_is_the_13_step_path(script, tmp_path):
    """Deterministic CliffWalking: the optimal path hugs the cliff, 13 steps of -1."""
    m = load_script(script)
    s = m.train(m.Args(env_id="CliffWalking-v1", rollout_episodes=3, log_dir=str(tmp_path), progress=False))
    assert s["final_mean_return"] == -13.0
    expected = -sum(GAMMA**0 * 0.99**k for k in range(13))
    assert s["optimal_start_value"] == pytest.approx(expected, rel=1e-5)
    assert s["greedy_start_value"] == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_env_without_a_model_is_refused(script, tmp_path):
    m = load_script(script)
    twin = "q_learning_torch.py" if script.endswith("torch.py") else "q_learning_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_gamma_one_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=r"--gamma must be in \[0, 1\)"):
        m.train(m.Args(gamma=1.0, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
