"""Tier 1 for Double DQN: worked problem 4 (the double estimator removes the upward bias of the
max) through the scripts' own double_q_target, the target by hand, and the bad-input checks."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["algos/double_dqn_torch.py", "algos/double_dqn_jax.py"]


def as_framework(script):
    return (
        (lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32)))
        if script.endswith("torch.py")
        else (lambda x: jnp.asarray(np.asarray(x, dtype=np.float32)))
    )


@pytest.mark.parametrize("script", TWINS)
def test_problem4_double_estimator_is_unbiased_exact(script):
    """All 8 x 8 pairs of (selecting estimate, evaluating estimate), each with probability 1/64."""
    m, conv = load_script(script), as_framework(script)
    estimates = list(itertools.product([0.1, -0.1], repeat=3))
    pairs = list(itertools.product(estimates, estimates))
    online = np.array([a for a, _ in pairs], dtype=np.float32)
    target = np.array([b for _, b in pairs], dtype=np.float32)
    zeros = np.zeros(len(pairs), dtype=np.float32)
    y = np.asarray(
        m.double_q_target(conv(online), conv(target), conv(zeros), conv(zeros), 1.0), dtype=np.float64
    )
    assert y.mean() == pytest.approx(0.0, abs=1e-8)
    # the same estimate used for both selection and evaluation is the plain max: 0.075
    same = np.array(estimates, dtype=np.float32)
    y_same = np.asarray(m.double_q_target(conv(same), conv(same), conv(zeros[:8]), conv(zeros[:8]), 1.0))
    assert y_same.mean() == pytest.approx(0.075, abs=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_problem4_double_estimator_monte_carlo(script):
    m, conv = load_script(script), as_framework(script)
    rng = np.random.default_rng(0)
    n = 200_000
    online = rng.choice([0.1, -0.1], size=(n, 3)).astype(np.float32)
    target = rng.choice([0.1, -0.1], size=(n, 3)).astype(np.float32)
    zeros = np.zeros(n, dtype=np.float32)
    y = np.asarray(
        m.double_q_target(conv(online), conv(target), conv(zeros), conv(zeros), 1.0), dtype=np.float64
    )
    assert abs(y.mean()) < 4 * 0.1 / np.sqrt(n)  # 4 standard errors


@pytest.mark.parametrize("script", TWINS)
def test_double_q_target_by_hand(script):
    m, conv = load_script(script), as_framework(script)
    online = [[1.0, 3.0], [2.0, -1.0], [5.0, 4.0]]  # selects actions 1, 0, 0
    target = [[7.0, 2.0], [0.5, 9.0], [6.0, 8.0]]  # which score 2, 0.5, 6; max would be 7, 9, 8
    rewards, dones = [1.0, 0.5, 2.0], [0.0, 0.0, 1.0]
    y = np.asarray(m.double_q_target(conv(online), conv(target), conv(rewards), conv(dones), 0.9))
    np.testing.assert_allclose(y, [1 + 0.9 * 2, 0.5 + 0.9 * 0.5, 2.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
