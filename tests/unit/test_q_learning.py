"""Tier 1 for tabular Q-learning: the update by hand (termination does not bootstrap, colliding
updates add), Robbins-Monro step sizes, the exact value of a greedy policy, worked problem 1's optimum
through the script's own value iteration, and bad input."""

import numpy as np
import pytest

from helpers import conv, is_torch, load_script

TWINS = ["algos/q_learning_torch.py", "algos/q_learning_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_update_by_hand(script):
    m, f, i = load_script(script), conv(script), conv(script, np.int64 if is_torch(script) else np.int32)
    Q = f([[0.0, 1.0], [2.0, 0.5], [0.0, 0.0]])
    # transition 0: (s=0, a=0, r=1, s'=1, not terminated): target 1 + 0.9 * max(2, 0.5) = 2.8
    # transition 1: (s=1, a=1, r=3, s'=2, terminated):     target 3 (nothing bootstrapped)
    targets = m.q_learning_targets(Q, f([1.0, 3.0]), i([1, 2]), f([0.0, 1.0]), 0.9)
    np.testing.assert_allclose(np.asarray(targets), [2.8, 3.0], atol=1e-6)
    Q_new, td = m.q_learning_update(Q, i([0, 1]), i([0, 1]), targets, f([0.5, 0.1]))
    np.testing.assert_allclose(np.asarray(td), [2.8, 2.5], atol=1e-6)
    np.testing.assert_allclose(np.asarray(Q_new), [[1.4, 1.0], [2.0, 0.75], [0.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_colliding_updates_add_up(script):
    """Two environments hit the same (s, a) in one step: both TD errors come from the same Q and
    both increments are applied."""
    m, f, i = load_script(script), conv(script), conv(script, np.int64 if is_torch(script) else np.int32)
    Q = f([[1.0, 0.0]])
    Q_new, td = m.q_learning_update(Q, i([0, 0]), i([0, 0]), f([3.0, 2.0]), f([0.5, 0.5]))
    np.testing.assert_allclose(np.asarray(td), [2.0, 1.0])
    assert float(Q_new[0, 0]) == pytest.approx(1.0 + 0.5 * 2.0 + 0.5 * 1.0)


@pytest.mark.parametrize("script", TWINS)
def test_robbins_monro_step_sizes(script):
    m = load_script(script)
    counts = conv(script, np.int64 if is_torch(script) else np.int32)([1, 4, 16, 100])
    np.testing.assert_allclose(
        np.asarray(m.robbins_monro_step_size(counts, 1.0)), [1, 0.25, 1 / 16, 0.01], rtol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(m.robbins_monro_step_size(counts, 0.5)), [1, 0.5, 0.25, 0.1], rtol=1e-6
    )
    # with power 1, alpha_n = 1/n makes Q[s, a] the running mean of its targets
    assert m.linear_schedule(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert m.linear_schedule(1.0, 0.1, 100, 500) == pytest.approx(0.1)


@pytest.mark.parametrize("script", TWINS)
def test_problem1_optimum_and_greedy_policy_value(script):
    """Worked problem 1 through the script's own value iteration and policy evaluation."""
    m, f = load_script(script), conv(script)
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = P[0, 1, 1] = P[1, 0, 1] = P[1, 1, 0] = 1.0
    R = [[1.0, 0.0], [0.0, 2.0]]
    V, Q = m.value_iteration(f(P), f(R), 0.9)
    np.testing.assert_allclose(np.asarray(V), [10, 11], atol=1e-4)
    np.testing.assert_allclose(np.asarray(Q), [[10, 9.9], [9.9, 11]], atol=1e-4)
    idx = conv(script, np.int64 if is_torch(script) else np.int32)
    np.testing.assert_allclose(np.asarray(m.policy_value(f(P), f(R), idx([0, 1]), 0.9)), [10, 11], atol=1e-4)
    # the always-move policy: V(0) = 0 + 0.9 V(1), V(1) = 2 + 0.9 V(0) -> V(0) = 1.8 / 0.19
    np.testing.assert_allclose(
        np.asarray(m.policy_value(f(P), f(R), idx([1, 1]), 0.9)), [1.8 / 0.19, 2 / 0.19], rtol=1e-5
    )


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_observations_are_refused(script, tmp_path):
    m = load_script(script)
    twin = "dqn_torch.py" if is_torch(script) else "dqn_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_continuous_actions_are_refused(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_robbins_monro_power_out_of_range_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=r"--lr-power must be in \(0.5, 1\]"):
        m.train(m.Args(robbins_monro=True, lr_power=0.4, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
