"""Tier 1 and 2 for the `--al-alpha` flag of DQN and Dueling DQN (advantage learning; docs/algorithms/dqn.md,
the eighth round): the target on hand numbers, alpha = 0 gives the DQN target back, the operator's fixed
point on a one-state bandit (the greedy value is Q*'s, the action gap grows by 1 / (1 - alpha)), twin
parity within 1e-5, the default is off, a bad alpha is refused before any work, and the training loop's
branch is live: a smoke-budget run with --al-alpha 0.9 trains other weights than the same seed at 0."""
import numpy as np
import pytest
from helpers import all_finite, conv, load_script, run_train

SCRIPTS = [f"algos/{name}_{fw}.py" for name in ("dqn", "dueling_dqn") for fw in ("torch", "jax")]


def al_target(script, targets, q_target_obs, actions, alpha):
    m = load_script(script)
    f, i = conv(script), conv(script, np.int64)
    out = m.advantage_learning_target(f(targets), f(q_target_obs), i(actions), alpha)
    return np.asarray(out, dtype=np.float64)


@pytest.mark.parametrize("script", SCRIPTS)
def test_target_by_hand(script):
    # row 0: greedy value 3, taken action worth 1: gap 2, so y = 1 - 0.9 * 2 = -0.8
    # row 1: the taken action is the greedy one: gap 0, y unchanged
    targets = np.array([1.0, 2.0], np.float32)
    q = np.array([[3.0, 1.0], [0.5, 2.5]], np.float32)
    actions = np.array([1, 1])
    np.testing.assert_allclose(al_target(script, targets, q, actions, 0.9), [-0.8, 2.0], atol=1e-6)
    np.testing.assert_allclose(al_target(script, targets, q, actions, 0.0), targets, atol=0.0)


@pytest.mark.parametrize("script", SCRIPTS)
def test_fixed_point_widens_the_gap(script):
    """One state, two actions, rewards 1 and 0.9, gamma 0.5, the state repeats: Q* = (2, 1.9), a gap of
    0.1. Iterating y_AL = r + gamma max Q - alpha (max Q - Q(a)) for both actions converges to
    Q = (2, 2 - 0.1 / (1 - 0.9)) = (2, 1): the greedy value unchanged, the gap ten times wider."""
    rewards, gamma, alpha = np.array([1.0, 0.9]), 0.5, 0.9
    q = np.zeros(2)
    for _ in range(400):
        y = rewards + gamma * q.max()
        q = al_target(script, y.astype(np.float32), np.tile(q, (2, 1)).astype(np.float32), np.array([0, 1]), alpha)
    np.testing.assert_allclose(q, [2.0, 1.0], atol=1e-4)


@pytest.mark.parametrize("name", ["dqn", "dueling_dqn"])
def test_twin_parity(name):
    pt, jx = f"algos/{name}_torch.py", f"algos/{name}_jax.py"
    rng = np.random.default_rng(0)
    targets = rng.normal(size=64).astype(np.float32) * 10
    q = rng.normal(size=(64, 3)).astype(np.float32) * 10
    actions = rng.integers(0, 3, size=64)
    for alpha in (0.0, 0.5, 0.9):
        np.testing.assert_allclose(al_target(pt, targets, q, actions, alpha), al_target(jx, targets, q, actions, alpha),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("script", SCRIPTS)
def test_off_by_default_and_bad_alpha_refused(script):
    m = load_script(script)
    assert m.Args().al_alpha == 0.0  # the DQN target unless the flag asks otherwise
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="al_alpha"):
            m.check_args(m.Args(al_alpha=bad))


def _saved_weights(path):
    if path.endswith(".pt"):
        import torch
        return np.concatenate([t.numpy().ravel() for t in torch.load(path, map_location="cpu").values()])
    import flax.serialization
    import jax
    tree = flax.serialization.msgpack_restore(open(path, "rb").read())
    return np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(tree)])


@pytest.mark.parametrize("script", SCRIPTS)
def test_training_loop_uses_the_flag(script, tmp_path):
    smoke = load_script(script).SMOKE_ARGS
    plain = run_train(script, tmp_path / "plain", seed=1, **smoke)
    al = run_train(script, tmp_path / "al", seed=1, al_alpha=0.9, **smoke)
    assert all_finite(al)
    w_plain, w_al = _saved_weights(plain["model_path"]), _saved_weights(al["model_path"])
    assert np.isfinite(w_al).all() and w_al.shape == w_plain.shape
    assert np.abs(w_al - w_plain).max() > 1e-6  # the same seed and data order, another target: other weights
