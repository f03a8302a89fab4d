"""Tier 1 for Dueling DQN: the V + A - mean(A) aggregation by hand, its identifiability, and the
bad-input checks."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["algos/dueling_dqn_torch.py", "algos/dueling_dqn_jax.py"]


def aggregate(script, value, advantage):
    m = load_script(script)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    if script.endswith("torch.py"):
        return m.dueling_aggregate(torch.as_tensor(f32(value)), torch.as_tensor(f32(advantage))).numpy()
    return np.asarray(m.dueling_aggregate(jnp.asarray(f32(value)), jnp.asarray(f32(advantage))))


@pytest.mark.parametrize("script", TWINS)
def test_aggregation_by_hand(script):
    # V = 10, A = [1, 2, 6] (mean 3): Q = 10 + [-2, -1, 3] = [8, 9, 13]
    np.testing.assert_allclose(aggregate(script, [[10.0]], [[1.0, 2.0, 6.0]]), [[8.0, 9.0, 13.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_value_is_the_mean_of_q_and_a_shift_of_a_is_invisible(script):
    rng = np.random.default_rng(0)
    value, advantage = rng.normal(size=(32, 1)), rng.normal(size=(32, 4))
    q = aggregate(script, value, advantage)
    np.testing.assert_allclose(q.mean(-1, keepdims=True), value, atol=1e-5)
    # the unidentifiable direction of V + A (V + c, A - c) is removed: shifting A alone changes nothing
    np.testing.assert_allclose(aggregate(script, value, advantage + 7.0), q, atol=1e-5)
    # and the greedy action is the advantage's argmax
    assert (q.argmax(-1) == advantage.argmax(-1)).all()


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
