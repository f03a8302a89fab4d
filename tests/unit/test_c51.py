"""Tier 1 for C51: the categorical projection against hand-computed cases (mass conservation,
rewards between atoms, rewards outside [v_min, v_max], terminal transitions), the cross-entropy
by hand, the defaults (the paper's algorithm), and the bad-input checks."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["algos/c51_torch.py", "algos/c51_jax.py"]
ATOMS = [-10.0, -5.0, 0.0, 5.0, 10.0]  # five atoms, dz = 5


def project(script, next_probs, rewards, dones, gamma, atoms=ATOMS):
    m = load_script(script)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    args = [f32(x) for x in (next_probs, rewards, dones)] + [gamma, f32(atoms)]
    if script.endswith("torch.py"):
        args = [torch.as_tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        return m.categorical_projection(*args).numpy()
    return np.asarray(m.categorical_projection(*args))


@pytest.mark.parametrize("script", TWINS)
def test_uniform_distribution_shrinks_by_gamma(script):
    # r = 0, gamma = 0.5: atoms move to -5, -2.5, 0, 2.5, 5; the two halfway atoms split evenly
    out = project(script, [[0.2] * 5], [0.0], [0.0], 0.5)
    np.testing.assert_allclose(out, [[0.0, 0.3, 0.4, 0.3, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_reward_between_atoms_goes_to_the_two_nearest(script):
    # all mass at z = 0; r = 1 lands a fifth of the way from atom 0 to atom 5: 0.8 / 0.2
    out = project(script, [[0, 0, 1, 0, 0]], [1.0], [0.0], 0.9)
    np.testing.assert_allclose(out, [[0.0, 0.0, 0.8, 0.2, 0.0]], atol=1e-6)
    # r = -3.5: 0.7 of the way from atom 0 down to atom -5
    out = project(script, [[0, 0, 1, 0, 0]], [-3.5], [0.0], 0.9)
    np.testing.assert_allclose(out, [[0.0, 0.7, 0.3, 0.0, 0.0]], atol=1e-6)
    # r = 5 exactly: all mass on one atom, nothing on its neighbours
    out = project(script, [[0, 0, 1, 0, 0]], [5.0], [0.0], 0.9)
    np.testing.assert_allclose(out, [[0.0, 0.0, 0.0, 1.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_rewards_outside_the_support_are_clipped_to_its_ends(script):
    out = project(script, [[0.2] * 5, [0.2] * 5], [100.0, -100.0], [0.0, 0.0], 0.9)
    np.testing.assert_allclose(out, [[0, 0, 0, 0, 1.0], [1.0, 0, 0, 0, 0]], atol=1e-6)
    # only the top of the distribution overflows: 0.9 * 10 + 3 = 12 -> clipped to 10;
    # 0.9 * 5 + 3 = 7.5 -> halfway between 5 and 10
    out = project(script, [[0, 0, 0, 0.5, 0.5]], [3.0], [0.0], 0.9)
    np.testing.assert_allclose(out, [[0, 0, 0, 0.25, 0.75]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_terminal_transition_puts_all_mass_at_the_reward(script):
    # done: the next distribution is ignored, Tz_i = r for every i
    out = project(script, [[0.1, 0.2, 0.3, 0.2, 0.2]], [2.5], [1.0], 0.9)
    np.testing.assert_allclose(out, [[0.0, 0.0, 0.5, 0.5, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_projection_conserves_mass_and_the_mean_inside_the_support(script):
    rng = np.random.default_rng(0)
    atoms = np.linspace(-100, 100, 51)
    probs = rng.dirichlet(np.ones(51) * 0.3, size=256)
    rewards = rng.normal(size=256) * 20
    dones = (rng.random(256) < 0.2).astype(np.float32)
    out = project(script, probs, rewards, dones, 0.99, atoms)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)
    assert (out >= 0).all()
    # splitting between neighbours in proportion to closeness keeps the mean where nothing clips
    tz = rewards[:, None] + 0.99 * (1 - dones[:, None]) * atoms[None, :]
    inside = ((tz >= -100) & (tz <= 100)).all(-1)
    assert inside.sum() > 50
    np.testing.assert_allclose((out * atoms).sum(-1)[inside], (probs * tz).sum(-1)[inside], atol=2e-3)


@pytest.mark.parametrize("script", TWINS)
def test_cross_entropy_by_hand(script):
    m = load_script(script)
    conv = (lambda x: torch.tensor(x)) if script.endswith("torch.py") else (lambda x: jnp.asarray(x))
    # uniform prediction over 4 atoms: log 4 whatever the target
    assert float(m.categorical_loss(conv([[0.0] * 4]), conv([[0.0, 1.0, 0.0, 0.0]]))) == pytest.approx(
        np.log(4)
    )
    # logits log([0.1, 0.2, 0.3, 0.4]) against target [0, 0.5, 0.5, 0]: -(0.5 log 0.2 + 0.5 log 0.3)
    logits = np.log([[0.1, 0.2, 0.3, 0.4]]).astype(np.float32)
    loss = float(m.categorical_loss(conv(logits), conv([[0.0, 0.5, 0.5, 0.0]])))
    assert loss == pytest.approx(-(0.5 * np.log(0.2) + 0.5 * np.log(0.3)), abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_defaults_are_the_papers_algorithm(script):
    # one-step target, plain MLP, constant learning rate, no advantage learning; CleanRL's CartPole
    # support and target period (c51.py)
    a = load_script(script).Args()
    assert (a.n_step, a.layer_norm, a.anneal_lr, a.al_alpha) == (1, False, False, 0.0)
    assert (a.gamma, a.n_atoms, a.v_min, a.v_max, a.target_network_frequency) == (
        0.99,
        51,
        -100.0,
        100.0,
        500,
    )


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    suffix = "torch" if script.endswith("torch.py") else "jax"
    with pytest.raises(ValueError, match=f"sac_{suffix}.py"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_bad_support_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--v-max must be > --v-min"):
        m.train(m.Args(v_min=10.0, v_max=-10.0, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
