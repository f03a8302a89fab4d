"""Tier 1 and 2 for the `--al-alpha` flag of the six value-based pairs (advantage learning;
docs/algorithms/dqn.md). The four scalar pairs (DQN, Double DQN, Dueling DQN, PER DQN):
the target on hand numbers, alpha = 0 gives the pair's own target back, the operator's fixed point on a
one-state bandit (the greedy value is Q*'s, the action gap grows by 1 / (1 - alpha)), twin parity within
1e-5. The two distributional pairs (C51, QR-DQN), where every target atom or quantile moves down by the
scaled gap: the shift on hand numbers, the shifted target distribution's mean equals the scalar
advantage-learning target (through each script's own projection / quantile target), twin parity. All
six: the default alpha 0 (the plain target), a bad alpha is refused before any work, and the training
loop's branch is live: a smoke-budget run with --al-alpha 0.9 trains other weights than the same seed
at 0."""

import numpy as np
import pytest

from helpers import all_finite, conv, load_script, run_train, smoke_run

PAIRS = ["dqn", "double_dqn", "dueling_dqn", "per_dqn"]
SCRIPTS = [f"algos/{name}_{fw}.py" for name in PAIRS for fw in ("torch", "jax")]
DIST_PAIRS = ["c51", "qr_dqn"]
DIST_SCRIPTS = [f"algos/{name}_{fw}.py" for name in DIST_PAIRS for fw in ("torch", "jax")]
# the default alpha of each pair: 0, the pair's own target (advantage learning is a flag)
DEFAULT_ALPHA = {"dqn": 0.0, "double_dqn": 0.0, "dueling_dqn": 0.0, "per_dqn": 0.0, "c51": 0.0, "qr_dqn": 0.0}


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
        q = al_target(
            script, y.astype(np.float32), np.tile(q, (2, 1)).astype(np.float32), np.array([0, 1]), alpha
        )
    np.testing.assert_allclose(q, [2.0, 1.0], atol=1e-4)


@pytest.mark.parametrize("name", PAIRS)
def test_twin_parity(name):
    pt, jx = f"algos/{name}_torch.py", f"algos/{name}_jax.py"
    rng = np.random.default_rng(0)
    targets = rng.normal(size=64).astype(np.float32) * 10
    q = rng.normal(size=(64, 3)).astype(np.float32) * 10
    actions = rng.integers(0, 3, size=64)
    for alpha in (0.0, 0.5, 0.9):
        np.testing.assert_allclose(
            al_target(pt, targets, q, actions, alpha),
            al_target(jx, targets, q, actions, alpha),
            atol=1e-5,
            rtol=1e-5,
        )


def al_shift(script, q_target_obs, actions, alpha):
    m = load_script(script)
    out = m.advantage_learning_shift(conv(script)(q_target_obs), conv(script, np.int64)(actions), alpha)
    return np.asarray(out, dtype=np.float64)


@pytest.mark.parametrize("script", DIST_SCRIPTS)
def test_shift_by_hand(script):
    # the same rows as test_target_by_hand: gap 2 -> shift 0.9 * 2 = 1.8; the greedy action -> 0
    q = np.array([[3.0, 1.0], [0.5, 2.5]], np.float32)
    np.testing.assert_allclose(al_shift(script, q, np.array([1, 1]), 0.9), [1.8, 0.0], atol=1e-6)
    np.testing.assert_allclose(al_shift(script, q, np.array([1, 1]), 0.0), [0.0, 0.0], atol=0.0)


@pytest.mark.parametrize("script", DIST_SCRIPTS)
def test_shifted_distribution_has_the_scalar_target_as_mean(script):
    """Rewards, discounts, next-state distributions and current-state values drawn at random: the mean
    of the shifted target distribution is r + gamma (1 - done) E[Z'] - alpha (max_b Q(s, b) - Q(s, a)),
    the scalar advantage-learning target (C51: after the projection, which keeps the mean of an
    in-range distribution; QR-DQN: the mean of the quantiles)."""
    m, f = load_script(script), conv(script)
    rng = np.random.default_rng(3)
    B, alpha = 16, 0.9
    rewards = rng.uniform(0.0, 3.0, B).astype(np.float32)
    dones = (rng.random(B) < 0.25).astype(np.float32)
    discounts = (0.998 ** rng.integers(1, 4, B)).astype(np.float32)
    q_obs = rng.uniform(50.0, 150.0, (B, 2)).astype(np.float32)
    actions = rng.integers(0, 2, B)
    shift = al_shift(script, q_obs, actions, alpha)
    if "c51" in script:
        atoms = np.linspace(-500.0, 500.0, 51, dtype=np.float32)
        next_probs = rng.dirichlet(np.ones(51) * 0.3, B).astype(np.float32)
        next_probs[:, :20] = 0.0  # keep r + gamma z - shift inside [v_min, v_max]: no clipped mass
        next_probs[:, -20:] = 0.0
        next_probs /= next_probs.sum(1, keepdims=True)
        next_mean = next_probs @ atoms.astype(np.float64)
        target = m.categorical_projection(f(next_probs), f(rewards - shift), f(dones), f(discounts), f(atoms))
        mean = np.asarray(target, np.float64) @ atoms
    else:
        next_quantiles = rng.normal(100.0, 20.0, (B, 32)).astype(np.float32)
        next_mean = next_quantiles.astype(np.float64).mean(1)
        target = m.quantile_target(f(next_quantiles), f(rewards), f(dones), f(discounts))
        mean = (np.asarray(target, np.float64) - shift[:, None]).mean(1)
    scalar = (
        rewards
        + discounts * (1.0 - dones) * next_mean
        - alpha * (q_obs.max(1) - q_obs[np.arange(B), actions])
    )
    np.testing.assert_allclose(mean, scalar, rtol=1e-4, atol=1e-2)
    assert (shift > 0).any()  # the check is not vacuous: some samples took a non-greedy action


@pytest.mark.parametrize("name", DIST_PAIRS)
def test_shift_twin_parity(name):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(64, 3)).astype(np.float32) * 10
    actions = rng.integers(0, 3, size=64)
    for alpha in (0.0, 0.5, 0.9):
        np.testing.assert_allclose(
            al_shift(f"algos/{name}_torch.py", q, actions, alpha),
            al_shift(f"algos/{name}_jax.py", q, actions, alpha),
            atol=1e-5,
            rtol=1e-5,
        )


@pytest.mark.parametrize("script", SCRIPTS + DIST_SCRIPTS)
def test_default_and_bad_alpha_refused(script):
    m = load_script(script)
    assert m.Args().al_alpha == DEFAULT_ALPHA[script.split("/")[1].rsplit("_", 1)[0]]
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="al[-_]alpha"):
            m.check_args(m.Args(al_alpha=bad))


def _saved_weights(path):
    if path.endswith(".pt"):
        import torch

        return np.concatenate([t.numpy().ravel() for t in torch.load(path, map_location="cpu").values()])
    import flax.serialization
    import jax

    tree = flax.serialization.msgpack_restore(open(path, "rb").read())
    return np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(tree)])


@pytest.mark.parametrize("script", SCRIPTS + DIST_SCRIPTS)
def test_training_loop_uses_the_flag(script, tmp_path):
    m = load_script(script)
    assert m.Args().al_alpha == 0.0 and "al_alpha" not in m.SMOKE_ARGS  # the smoke run is the plain target
    plain = smoke_run(script)
    al = run_train(script, tmp_path / "al", seed=1, al_alpha=0.9, **m.SMOKE_ARGS)
    assert all_finite(al)
    w_plain, w_al = _saved_weights(plain["model_path"]), _saved_weights(al["model_path"])
    assert np.isfinite(w_al).all() and w_al.shape == w_plain.shape
    assert np.abs(w_al - w_plain).max() > 1e-6  # the same seed and data order, another target: other weights
