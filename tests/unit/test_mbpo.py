"""Tier 1 for MBPO: the worked problem "MBPO's schedule, batch mix and model NLL" (docs/algorithms/mbpo.md)
in both twins through the scripts' own functions: the rollout-length schedule and the real/model split
on hand numbers, the Gaussian NLL and the log-variance bounds by hand, a branched rollout from given
start states through a known stub model (shapes, the member picked per step, no termination on
Pendulum), ensemble members that disagree more off the data than on it (1-D regression), bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import is_torch, load_script

TWINS = ["algos/mbpo_torch.py", "algos/mbpo_jax.py"]


def conv(script):
    return (
        (lambda x: torch.as_tensor(np.asarray(x)))
        if is_torch(script)
        else (lambda x: jnp.asarray(np.asarray(x)))
    )


@pytest.mark.parametrize("script", TWINS)
def test_rollout_length_schedule_by_hand(script):
    """1 -> 5 between epochs 2 and 10: k(e) = floor(1 + (e - 2) / 8 * 4) = floor(1 + (e - 2) / 2)."""
    m = load_script(script)
    k = [m.rollout_length(e, 1, 5, 2, 10) for e in range(13)]
    # e <= 2: 1; e = 3: 1.5 -> 1; e = 4: 2; 5: 2.5 -> 2; 6: 3; 7: 3; 8: 4; 9: 4; e >= 10: 5
    assert k == [1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5]
    # the paper's HalfCheetah-style 1 -> 15 over epochs 20..100: epoch 60 is half way, 1 + 7 = 8
    assert m.rollout_length(60, 1, 15, 20, 100) == 8
    assert m.rollout_length(7, 1, 1, 0, 10) == 1  # a constant schedule


@pytest.mark.parametrize("script", TWINS)
def test_real_model_split_counts(script):
    m = load_script(script)
    assert m.real_model_split(256, 0.05) == (12, 244)  # int(12.8) = 12 real, 256 - 12 model
    assert m.real_model_split(256, 0.5) == (128, 128)
    assert m.real_model_split(100, 0.0) == (0, 100)  # model only
    assert m.real_model_split(100, 1.0) == (100, 0)  # plain SAC on real data


@pytest.mark.parametrize("script", TWINS)
def test_gaussian_nll_by_hand(script):
    """0.5 ((t - mu)^2 e^{-lv} + lv) per element, averaged over (batch, output).
    Member 0: (mu, lv, t) = (0, 0, 1) -> 0.5; (1, log 4, 3) -> 0.5 (4 / 4 + 1.386294) = 1.193147;
    mean 0.846574. Member 1: (2, 0, 2) -> 0; (0, -log 2, 0) -> 0.5 (0 - 0.693147) = -0.346574;
    mean -0.173287."""
    m = load_script(script)
    c = conv(script)
    mean = c(np.array([[[0.0], [1.0]], [[2.0], [0.0]]], np.float32))
    log_var = c(np.array([[[0.0], [np.log(4.0)]], [[0.0], [-np.log(2.0)]]], np.float32))
    target = c(np.array([[[1.0], [3.0]], [[2.0], [0.0]]], np.float32))
    np.testing.assert_allclose(
        np.asarray(m.gaussian_nll(mean, log_var, target)), [0.846574, -0.173287], atol=1e-6
    )
    # the training loss: the sum over members plus 0.01 (sum max - sum min) = 0.673287 + 0.01 (0.5 + 10)
    loss = m.model_loss(mean, log_var, target, c(np.float32([0.5])), c(np.float32([-10.0])))
    np.testing.assert_allclose(float(loss), 0.673287 + 0.105, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_log_variance_bounds(script):
    """Soft bounds max 0.5, min -10: raw 0 -> 0.5 - softplus(0.5) = -0.474077, then
    -10 + softplus(9.525923) = -0.474004; far out the bounds hold, softly: raw 100 gives
    0.5 + softplus(-10.5) = 0.5 + 2.8e-5, raw -100 gives -10 + softplus(-110) = -10 + 1e-48."""
    m = load_script(script)
    c = conv(script)
    lv = np.asarray(
        m.bound_log_var(c(np.float32([0.0, 100.0, -100.0])), c(np.float32(0.5)), c(np.float32(-10.0)))
    )
    np.testing.assert_allclose(lv[0], -0.474004, atol=1e-5)
    np.testing.assert_allclose(lv[1:], [0.5 + 2.75e-5, -10.0], atol=2e-6)


@pytest.mark.parametrize("script", TWINS)
def test_elites_are_the_lowest_held_out_losses(script):
    m = load_script(script)
    assert list(m.select_elites([0.3, 0.1, 0.5, 0.2, 0.4], 3)) == [1, 3, 0]


@pytest.mark.parametrize("script", TWINS)
def test_branched_rollout_through_a_stub_model(script):
    """Stub model with E = 3 members: member e predicts the state change (e + 1) * [1, 0, 0] and the
    reward -(e + 1), with log-variance log(1e-12) (noise ~1e-6); the stub policy returns its noise.
    From s0 = 0, members [[0, 2], [1, 1], [2, 0]] over 3 steps: rollout 0 moves 1 + 2 + 3 = 6 with
    rewards -1, -2, -3; rollout 1 moves 3 + 2 + 1 = 6 with rewards -3, -2, -1. Pendulum's rule never
    terminates, so every step stays valid."""
    m = load_script(script)
    c = conv(script)
    E, N, D, A, T = 3, 2, 3, 1, 3
    scale = np.arange(1, E + 1, dtype=np.float32)[:, None, None]
    direction = np.array([1.0, 0.0, 0.0, -1.0], np.float32)  # [ds, r] per unit of member scale
    fw = torch if is_torch(script) else jnp

    def model_fn(obs, actions):
        mean = c(scale * direction) * fw.ones((E, obs.shape[0], 1))
        return mean, fw.full((E, obs.shape[0], D + 1), float(np.log(1e-12)))

    policy_fn = lambda obs, noise: noise
    members = np.array([[0, 2], [1, 1], [2, 0]])
    action_noise = np.arange(T * N * A, dtype=np.float32).reshape(T, N, A)
    out = m.model_rollout(
        model_fn,
        policy_fn,
        c(np.zeros((N, D), np.float32)),
        c(members),
        c(np.ones((T, N, D + 1), np.float32)),
        c(action_noise),
        m.TERMINATION_FNS["Pendulum-v1"],
    )
    out = {k: np.asarray(v) for k, v in out.items()}
    assert out["obs"].shape == (T, N, D) and out["next_obs"].shape == (T, N, D)
    assert out["actions"].shape == (T, N, A) and out["rewards"].shape == (T, N)
    np.testing.assert_allclose(out["rewards"], -(members + 1), atol=1e-5)  # the member picked per step
    np.testing.assert_allclose(out["next_obs"][:, :, 0], np.cumsum(members + 1, 0), atol=1e-5)
    np.testing.assert_allclose(out["obs"][1:], out["next_obs"][:-1])  # chained from the start states
    np.testing.assert_allclose(out["obs"][0], 0.0)
    np.testing.assert_allclose(out["actions"], action_noise)
    assert not out["terminated"].any() and out["valid"].all()


@pytest.mark.parametrize("script", TWINS)
def test_termination_stops_a_rollout(script):
    """A termination hook that ends rollouts whose next state passes 2.5: rollout 0 (steps of 1)
    ends at step 2 (3 > 2.5), so its step 3 is not valid; rollout 1 (steps of 3) ends at step 0."""
    m = load_script(script)
    c = conv(script)
    fw = torch if is_torch(script) else jnp
    model_fn = lambda obs, actions: (
        c(np.float32([[[1, 0, 0, 0], [3, 0, 0, 0]]])) * fw.ones((1, 2, 1)),
        fw.full((1, 2, 4), float(np.log(1e-12))),
    )
    term = lambda obs, actions, next_obs: next_obs[:, 0] > 2.5
    out = m.model_rollout(
        model_fn,
        lambda o, n: n,
        c(np.zeros((2, 3), np.float32)),
        c(np.zeros((4, 2), np.int64)),
        c(np.zeros((4, 2, 4), np.float32)),
        c(np.zeros((4, 2, 1), np.float32)),
        term,
    )
    np.testing.assert_array_equal(np.asarray(out["valid"]), [[1, 1], [1, 0], [1, 0], [0, 0]])
    np.testing.assert_array_equal(np.asarray(out["terminated"])[:, 0], [0, 0, 1, 1])


def fit_1d_ensemble(script, steps=600):
    """An ensemble of 5 members fitted to y = sin(x) + noise on x in [-1, 1] with the script's own
    network, Gaussian NLL and normaliser; returns the members' mean predictions on a grid [-4, 4]."""
    m = load_script(script)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(256, 1)).astype(np.float32)
    y = (np.sin(x) + 0.05 * rng.normal(size=x.shape)).astype(np.float32)
    grid = np.linspace(-4, 4, 81, dtype=np.float32)[:, None]
    E = 5
    idx = rng.integers(0, 256, size=(steps, E, 64))
    if is_torch(script):
        torch.manual_seed(0)
        model = m.DynamicsEnsemble(E, 1, 1, 32, 2)
        model.input_mean, model.input_std = m.fit_normaliser(torch.as_tensor(x))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        for i in range(steps):
            mean, log_var = model(torch.as_tensor(x[idx[i]]))
            loss = m.model_loss(
                mean, log_var, torch.as_tensor(y[idx[i]]), model.max_log_var, model.min_log_var
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            return model(torch.as_tensor(grid))[0].numpy()[..., 0], grid[:, 0]
    import optax

    model = m.DynamicsEnsemble(E, 1, 1, 32, 2)
    params = model.init(jax.random.PRNGKey(0))
    mu, sd = m.fit_normaliser(jnp.asarray(x))
    norm = {"mean": mu, "std": sd}
    opt = optax.adam(3e-3)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state, xb, yb):
        def loss_fn(p):
            mean, log_var = model.apply(p, norm, xb)
            return m.model_loss(mean, log_var, yb, p["max_log_var"], p["min_log_var"])

        grads = jax.grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state

    for i in range(steps):
        params, opt_state = step(params, opt_state, x[idx[i]], y[idx[i]])
    return np.asarray(model.apply(params, norm, grid)[0])[..., 0], grid[:, 0]


@pytest.mark.parametrize("script", TWINS)
def test_members_disagree_more_off_the_data(script):
    """Epistemic uncertainty: the members' spread (std of their means) on |x| >= 3, far from the
    data in [-1, 1], is several times their spread on the data; on the data they fit sin(x)."""
    preds, grid = fit_1d_ensemble(script)
    spread = preds.std(0)
    on, off = spread[np.abs(grid) <= 1].mean(), spread[np.abs(grid) >= 3].mean()
    assert off > 3 * on, (on, off)
    np.testing.assert_allclose(preds.mean(0)[np.abs(grid) <= 1], np.sin(grid[np.abs(grid) <= 1]), atol=0.1)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "override, match",
    [
        (dict(ensemble_size=0), "--ensemble-size must be >= 1"),
        (dict(rollout_min_length=0), "--rollout-min-length must be >= 1"),
        (dict(rollout_max_length=0), "--rollout-max-length must be >= 1"),
        (dict(num_elites=8), "--num-elites must be <= --ensemble-size"),
        (dict(real_ratio=1.5), "--real-ratio must be in"),
        (dict(env_id="MountainCarContinuous-v0"), "TERMINATION_FNS"),
    ],
)
def test_bad_input_is_refused_before_any_run(script, override, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **override))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    fw = "torch" if is_torch(script) else "jax"
    with pytest.raises(ValueError, match=f"algos/dqn_{fw}.py or algos/ppo_{fw}.py"):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
