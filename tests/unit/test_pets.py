"""Tier 1 for PETS: worked problem 20, the Gaussian NLL and the soft log-variance bounds
(docs/worked_problems.md), by hand, the Pendulum reward against the environment's, CEM on a known
quadratic, MPC with a known model driving a 1-D point mass to 0, the ensemble disagreeing more off
the data than on it (1-D regression), and bad input; every check in both twins, through the
scripts' own functions."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import is_torch, load_script

TWINS = ["algos/pets_torch.py", "algos/pets_jax.py"]


def conv(script):
    """float32 numpy -> the twin's array type."""
    if is_torch(script):
        return lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32))
    return lambda x: jnp.asarray(np.asarray(x, dtype=np.float32))


# ----------------------------------------------------------------------------- the Gaussian NLL
@pytest.mark.parametrize("script", TWINS)
def test_gaussian_nll_by_hand(script):
    m, c = load_script(script), conv(script)
    mean = c([[0.0, 1.0], [2.0, -1.0]])
    logvar = c([[0.0, np.log(4.0)], [0.0, 0.0]])
    target = c([[1.0, 3.0], [2.0, -1.0]])
    # row 1, dim 1: (1 - 0)^2 / 1 + 0 + log(2 pi) = 1 + 1.8378771 = 2.8378771, half: 1.4189385
    # row 1, dim 2: (3 - 1)^2 / 4 + log 4 + log(2 pi) = 1 + 1.3862944 + 1.8378771 = 4.2241715, half: 2.1120857
    # row 1: 1.4189385 + 2.1120857 = 3.5310242 (summed over the output dims)
    # row 2: target = mean, logvar 0: 2 * 0.5 * log(2 pi) = 1.8378771
    # mean over rows: (3.5310242 + 1.8378771) / 2 = 2.6844506
    np.testing.assert_allclose(float(m.gaussian_nll(mean, logvar, target)), 2.6844506, atol=1e-6)
    # the bound penalty: 0.01 * (sum max - sum min) = 0.01 * ((0.5 + 0.5) - (-10 - 10)) = 0.21
    loss = m.ensemble_loss(mean, logvar, target, c([0.5, 0.5]), c([-10.0, -10.0]), 0.01)
    np.testing.assert_allclose(float(loss), 2.6844506 + 0.21, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_soft_logvar_bounds_by_hand(script):
    m, c = load_script(script), conv(script)
    out = np.asarray(m.soft_bound_logvar(c([-100.0, 0.5, 100.0]), c([0.5]), c([-10.0])))
    # raw = 0.5 = max: 0.5 - softplus(0) = 0.5 - log 2 = -0.1931472; then
    # -10 + softplus(9.8068528) = -10 + 9.8068528 + log(1 + e^-9.8068528)
    #   = -0.1931472 + 0.0000551 = -0.1930921
    # raw far below: pinned at min (-10 + softplus(-89.5) = -10); far above: 0.5 - softplus(-99.5) = 0.5,
    # then -10 + softplus(10.5) = 0.5 + log(1 + e^-10.5) = 0.5000275 (the min bound's soft tail)
    np.testing.assert_allclose(out, [-10.0, -0.1930921, 0.5000275], atol=2e-6)


# ----------------------------------------------------------------------------- the known reward
@pytest.mark.parametrize("script", TWINS)
def test_pendulum_reward_equals_the_environments(script):
    m, c = load_script(script), conv(script)
    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for th, thdot, u in [
        (0.0, 0.0, 0.0),
        (np.pi, 0.0, 2.0),
        (3.0, -7.5, -1.3),
        (-2.5, 4.0, 0.7),
        (7.0, 8.0, 3.0),
    ] + [tuple(rng.uniform([-4, -8, -2.5], [4, 8, 2.5])) for _ in range(5)]:
        env.unwrapped.state = np.array([th, thdot])
        obs = env.unwrapped._get_obs()
        _, reward, _, _, _ = env.step(np.array([u], dtype=np.float32))
        ours = float(m.pendulum_reward(c(obs[None]), c([[u]]))[0])
        # th = 7.0 wraps to 7 - 2 pi = 0.7168; u = 3.0 is clipped to 2 by the env and by us
        np.testing.assert_allclose(ours, reward, rtol=1e-5, atol=1e-4)
    env.close()


# ----------------------------------------------------------------------------- CEM and MPC
@pytest.mark.parametrize("script", TWINS)
def test_cem_finds_the_optimum_of_a_known_quadratic(script):
    """Maximise -sum_t (a_t - a*_t)^2 over a 3-step sequence in [-1, 1], a* = (0.5, -0.3, 0.8):
    from mean 0, std 0.5, population 100, 10 elites, 5 iterations reach a* within 0.05."""
    m, c = load_script(script), conv(script)
    target = c([[0.5], [-0.3], [0.8]])
    noise = c(np.random.default_rng(0).normal(size=(5, 100, 3, 1)))
    objective = lambda samples, i: -((samples - target) ** 2).sum((1, 2))
    mean = m.cem_optimize(
        objective, c(np.zeros((3, 1))), c(np.full((3, 1), 0.5)), c([-1.0]), c([1.0]), noise, 10, 0.1
    )
    np.testing.assert_allclose(np.asarray(mean)[:, 0], [0.5, -0.3, 0.8], atol=0.05)


@pytest.mark.parametrize("script", TWINS)
def test_mpc_with_a_known_model_drives_a_point_mass_to_zero(script):
    """Point mass: v' = v + 0.1 u, x' = x + 0.1 v', u in [-1, 1]; reward -(x^2 + 0.1 v^2). MPC:
    CEM over 10 steps through the exact model, first action executed, warm start shifted. From x = 1,
    v = 0, after 80 steps |x| < 0.05 and |v| < 0.1."""
    m, c = load_script(script), conv(script)
    rng = np.random.default_rng(0)
    x, v = 1.0, 0.0
    mean = c(np.zeros((10, 1)))

    def objective_from(x0, v0):
        def objective(samples, i):
            xs, vs, total = x0, v0, 0.0
            for t in range(samples.shape[1]):
                vs = vs + 0.1 * samples[:, t, 0]
                xs = xs + 0.1 * vs
                total = total - (xs**2 + 0.1 * vs**2)
            return total

        return objective

    for _ in range(80):
        noise = c(rng.normal(size=(4, 64, 10, 1)))
        plan = m.cem_optimize(
            objective_from(x, v), mean, c(np.full((10, 1), 0.5)), c([-1.0]), c([1.0]), noise, 8, 0.1
        )
        u = float(np.asarray(plan)[0, 0])
        v = v + 0.1 * u
        x = x + 0.1 * v
        mean = m.shift_mean(plan, c([0.0]))
    assert abs(x) < 0.05 and abs(v) < 0.1, (x, v)


# ----------------------------------------------------------------------------- the ensemble
@pytest.mark.parametrize("script", TWINS)
def test_ensemble_disagrees_more_off_the_data_than_on_it(script):
    """1-D regression y = sin(3x) + 0.05 noise on x in [-1, 1]: after fitting, the std of the five
    members' predicted means is several times larger at x in [2.5, 3.5] than on the data."""
    m = load_script(script)
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1.0, 1.0, size=(200, 1)).astype(np.float32)
    ys = (np.sin(3.0 * xs) + 0.05 * rng.normal(size=xs.shape)).astype(np.float32)
    on, off = (
        np.linspace(-1, 1, 50, dtype=np.float32)[:, None],
        np.linspace(2.5, 3.5, 50, dtype=np.float32)[:, None],
    )
    if is_torch(script):
        torch.manual_seed(0)
        model = m.ProbabilisticEnsemble(5, 1, 1, 32)
        m.fit_ensemble(model, torch.optim.Adam(model.parameters(), lr=3e-3), xs, ys, 1500, 32, 0.01, rng)

        def member_means(x):
            with torch.no_grad():
                mean, _ = model(((torch.as_tensor(x) - model.in_mean) / model.in_std).expand(5, -1, -1))
                return (model.out_mean + model.out_std * mean).numpy()[..., 0]
    else:
        model = m.ProbabilisticEnsemble(5, 1, 32)
        params = model.init(jax.random.PRNGKey(0), jnp.zeros((5, 1, 1)))
        optimizer = optax_adam(3e-3)
        fit = m.make_fit(model, optimizer, 0.01)
        params, _, norm, _ = m.fit_ensemble(model, fit, params, optimizer.init(params), xs, ys, 1500, 32, rng)

        def member_means(x):
            mean, _ = model.apply(
                params, jnp.broadcast_to((x - norm["in_mean"]) / norm["in_std"], (5,) + x.shape)
            )
            return np.asarray(norm["out_mean"] + norm["out_std"] * mean)[..., 0]

    fit_error = np.abs(member_means(on).mean(0) - np.sin(3.0 * on[:, 0])).mean()
    assert fit_error < 0.1, fit_error
    on_std, off_std = member_means(on).std(0).mean(), member_means(off).std(0).mean()
    assert off_std > 3.0 * on_std, (on_std, off_std)


def optax_adam(lr):
    import optax

    return optax.adam(lr)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(ensemble_size=0), r"^--ensemble-size must be >= 1 \(got 0\)$"),
        (dict(horizon=0), r"^--horizon must be >= 1 \(got 0\)$"),
        (dict(num_elites=0), r"^--num-elites must be >= 1 \(got 0\)$"),
        (dict(num_elites=101), r"^--num-elites must be <= --population \(got 101\)$"),
        (dict(population=101), r"^--population must be such that --population \* --particles is a multiple"),
        (dict(cem_smoothing=1.0), r"^--cem-smoothing must be in \[0, 1\) \(got 1.0\)$"),
        (dict(env_id="MountainCarContinuous-v0"), r"^--env-id MountainCarContinuous-v0: .*known reward"),
    ],
)
def test_bad_input_is_refused_before_any_run_directory(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_is_refused_naming_the_right_scripts(script, tmp_path):
    m = load_script(script)
    fw = "torch" if is_torch(script) else "jax"
    with pytest.raises(ValueError, match=f"algos/dqn_{fw}.py or algos/ppo_{fw}.py"):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
