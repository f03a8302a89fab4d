"""Tier 1 for ICM (curiosity on top of PPO): the worked problem (docs/worked_problems.md) in both
twins -- the inverse and forward losses and the curiosity reward on a two-transition batch by hand,
the detached forward target checked by gradients (through the loss and through the module), the
frozen random features -- plus the PPO base on hand numbers and the bad-input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import gae_on_column as gae
from helpers import is_torch, load_script

TWINS = ["algos/icm_torch.py", "algos/icm_jax.py"]

# The worked problem: two transitions, two actions, two feature dimensions.
LOGITS = [[0.0, np.log(3.0)], [0.0, 0.0]]  # p(a=1) = 3/4 for the first, 1/2 for the second
ACTIONS = [1, 0]
PHI_NEXT_PRED = [[1.0, 2.0], [0.0, 0.0]]  # the forward model's phi_hat(s')
PHI_NEXT = [[1.0, 0.0], [3.0, 4.0]]  # the encoder's phi(s')
INVERSE = (-np.log(0.75) + np.log(2.0)) / 2  # 0.490415: mean cross-entropy
FORWARD = (0.5 * 4.0 + 0.5 * 25.0) / 2  # 7.25: mean of 1/2 ||error||^2 = (2 + 12.5) / 2


def losses_and_grads(script, beta):
    """(loss, inverse, forward) and d(forward_loss)/d(phi_next_pred), d(forward_loss)/d(phi_next)."""
    m = load_script(script)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    if is_torch(script):
        pred = torch.tensor(f32(PHI_NEXT_PRED), requires_grad=True)
        target = torch.tensor(f32(PHI_NEXT), requires_grad=True)
        loss, inverse, forward = m.icm_losses(
            torch.tensor(f32(LOGITS)), torch.tensor(ACTIONS), pred, target, beta
        )
        forward.backward()
        g_target = np.zeros((2, 2)) if target.grad is None else target.grad.numpy()  # None: not in the graph
        return (loss.item(), inverse.item(), forward.item()), pred.grad.numpy(), g_target
    fwd = lambda p, t: m.icm_losses(jnp.asarray(f32(LOGITS)), jnp.asarray(ACTIONS), p, t, beta)[2]
    g_pred, g_target = jax.grad(fwd, argnums=(0, 1))(
        jnp.asarray(f32(PHI_NEXT_PRED)), jnp.asarray(f32(PHI_NEXT))
    )
    loss, inverse, forward = m.icm_losses(
        jnp.asarray(f32(LOGITS)),
        jnp.asarray(ACTIONS),
        jnp.asarray(f32(PHI_NEXT_PRED)),
        jnp.asarray(f32(PHI_NEXT)),
        beta,
    )
    return (float(loss), float(inverse), float(forward)), np.asarray(g_pred), np.asarray(g_target)


@pytest.mark.parametrize("script", TWINS)
def test_icm_losses_by_hand(script):
    (loss, inverse, forward), _, _ = losses_and_grads(script, beta=0.2)
    assert inverse == pytest.approx(0.490415, abs=1e-6)
    assert forward == pytest.approx(7.25, abs=1e-6)
    # (1 - beta) L_I + beta L_F = 0.8 * 0.490415 + 0.2 * 7.25 = 0.392332 + 1.45
    assert loss == pytest.approx(0.8 * INVERSE + 0.2 * FORWARD, abs=1e-6)
    assert loss == pytest.approx(1.842332, abs=1e-6)
    # beta = 0: the inverse loss alone; beta = 1: the forward loss alone
    assert losses_and_grads(script, beta=0.0)[0][0] == pytest.approx(INVERSE, abs=1e-6)
    assert losses_and_grads(script, beta=1.0)[0][0] == pytest.approx(FORWARD, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_curiosity_reward_by_hand(script):
    m = load_script(script)
    to = lambda x: torch.tensor(np.float32(x)) if is_torch(script) else jnp.asarray(np.float32(x))
    # eta / 2 * ||phi_hat - phi||^2 = 0.1 / 2 * [4, 25]
    r = m.curiosity_reward(to(PHI_NEXT_PRED), to(PHI_NEXT), 0.1)
    np.testing.assert_allclose(np.asarray(r), [0.2, 1.25], atol=1e-6)
    # eta = 0: the baseline, no bonus at all
    np.testing.assert_allclose(
        np.asarray(m.curiosity_reward(to(PHI_NEXT_PRED), to(PHI_NEXT), 0.0)), [0.0, 0.0]
    )


@pytest.mark.parametrize("script", TWINS)
def test_forward_target_is_detached(script):
    _, g_pred, g_target = losses_and_grads(script, beta=0.2)
    # d L_F / d phi_hat = (phi_hat - phi) / batch = [[0, 2], [-3, -4]] / 2
    np.testing.assert_allclose(g_pred, [[0.0, 1.0], [-1.5, -2.0]], atol=1e-6)
    # ... and nothing into the target: a stop-gradient, so phi cannot collapse to make L_F trivial
    np.testing.assert_array_equal(g_target, np.zeros((2, 2)))


def module_input_grads(script, features, which):
    """Gradients of the module's forward (or inverse) loss with respect to the raw observations s
    and s' and to the encoder's parameters, on a random batch of DeepSea-like one-hots."""
    m = load_script(script)
    rng = np.random.default_rng(0)
    obs = np.eye(9, dtype=np.float32)[rng.integers(0, 9, 6)]
    next_obs = np.eye(9, dtype=np.float32)[rng.integers(0, 9, 6)]
    actions = rng.integers(0, 2, 6)
    pick = {"inverse": 1, "forward": 2}[which]
    if is_torch(script):
        torch.manual_seed(0)
        icm = m.ICM(9, 2, 4, features)
        o, o2 = torch.tensor(obs, requires_grad=True), torch.tensor(next_obs, requires_grad=True)
        out = icm(o, o2, torch.tensor(actions))
        m.icm_losses(out[0], torch.tensor(actions), out[1], out[2], 0.2)[pick].backward()
        enc = [] if icm.encoder is None else [p.grad for p in icm.encoder.parameters()]
        enc = [np.zeros(1) if g is None else g.numpy() for g in enc]
        grad = lambda t: np.zeros(1) if t.grad is None else t.grad.numpy()
        return grad(o), grad(o2), enc
    icm = m.ICM(9, 2, 4, features)
    params = icm.init(jax.random.PRNGKey(0))

    def f(params, o, o2):
        out = icm(params, o, o2, jnp.asarray(actions))
        return m.icm_losses(out[0], jnp.asarray(actions), out[1], out[2], 0.2)[pick]

    g_params, g_o, g_o2 = jax.grad(f, argnums=(0, 1, 2))(params, jnp.asarray(obs), jnp.asarray(next_obs))
    enc = [np.asarray(x) for x in jax.tree.leaves(g_params.get("encoder", {}))]
    return np.asarray(g_o), np.asarray(g_o2), enc


@pytest.mark.parametrize("script", TWINS)
def test_forward_loss_has_no_gradient_into_the_target_branch(script):
    # s' enters the forward loss only through the target phi(s'): its gradient is exactly zero,
    # while s (the forward model's input phi(s)) gets one
    g_obs, g_next, enc = module_input_grads(script, "inverse", "forward")
    assert np.all(g_next == 0.0)
    assert np.abs(g_obs).sum() > 1e-6
    # the inverse loss, which is what shapes phi, reaches both branches and the encoder
    g_obs, g_next, enc = module_input_grads(script, "inverse", "inverse")
    assert np.abs(g_next).sum() > 1e-6 and np.abs(g_obs).sum() > 1e-6
    assert sum(np.abs(g).sum() for g in enc) > 1e-8


@pytest.mark.parametrize("script", TWINS)
def test_random_features_stay_frozen(script):
    # --features random: phi is never trained, by either loss
    for which in ("inverse", "forward"):
        _, _, enc = module_input_grads(script, "random", which)
        assert all(np.all(g == 0.0) for g in enc)


@pytest.mark.parametrize("script", TWINS)
def test_gae_base_by_hand(script):
    # the PPO base (worked problem 3): deltas [0.86, -0.4, 1.67, 0.88], episode end at t = 1
    adv, ret = gae(script, [1, 0, 2, 1], [0.5, 0.4, 0.6, 0.3], [0, 1, 0, 0], 0.2, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.572, -0.4, 2.3036, 0.88], atol=1e-6)
    np.testing.assert_allclose(ret, [1.072, 0.0, 2.9036, 1.18], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_clipped_surrogate_base_by_hand(script):
    # worked problem 8: ratios [1.5, 0.5, 1.6, 0.7], advantages [1, 1, -1, -1], eps 0.2:
    # per-sample objective [1.2, 0.5, -1.6, -0.8], mean -0.175, so the loss is 0.175
    m = load_script(script)
    ratios = np.float32([1.5, 0.5, 1.6, 0.7])
    adv = np.float32([1.0, 1.0, -1.0, -1.0])
    if is_torch(script):
        loss = m.ppo_policy_loss(
            torch.log(torch.tensor(ratios)), torch.zeros(4), torch.tensor(adv), 0.2
        ).item()
    else:
        loss = float(m.ppo_policy_loss(jnp.log(ratios), jnp.zeros(4), jnp.asarray(adv), 0.2))
    assert loss == pytest.approx(0.175, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"bonus_scale": -0.1}, "--bonus-scale must be >= 0"),
        ({"env_id": "DeepSea0-v0"}, "size N = 0"),
        ({"env_id": "DeepSea-3-v0"}, "size N = -3"),
        ({"env_id": "NoisyTVDeepSea65-v0"}, "size N = 65"),
        ({"icm_beta": 1.5}, "--icm-beta must be in"),
        ({"features": "pixels"}, "--features 'pixels' is unknown"),
        ({"feature_dim": 0}, "--feature-dim must be >= 1"),
        ({"num_minibatches": 3}, "--num-minibatches must be a divisor"),
        ({"total_timesteps": 100}, "--total-timesteps must be >= one rollout"),
    ],
)
def test_bad_input_is_refused_before_any_run_directory(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_continuous_env_is_refused_naming_the_right_script(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="ppo_continuous"):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
