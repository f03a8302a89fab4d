"""Tier 1 for IQL: the expectile loss on hand numbers and its minimiser equal to the tau-expectile of a
known sample (tau 0.5 the mean, tau -> 1 towards the max, never past it), the clamped advantage weights,
the advantage-weighted actor loss and the Gaussian log-density by hand, the critic's done flag (terminals,
not timeouts), the deterministic evaluation playing the mean, and the bad-input checks, in both twins."""

import jax
import numpy as np
import pytest
import torch

from helpers import conv, load_script, run_train

TWINS = ["algos/iql_torch.py", "algos/iql_jax.py"]


def fw(script):
    return "torch" if script.endswith("torch.py") else "jax"


# Worked problem (docs: "IQL's expectile by hand"). The sample X = {0, 1, 2, 10} (mean 3.25, max 10).
# The tau-expectile v solves  tau * sum_{x > v} (x - v) = (1 - tau) * sum_{x < v} (v - x).
#   tau 0.7, v in (2, 10): 0.7 (10 - v) = 0.3 ((v - 0) + (v - 1) + (v - 2)) = 0.3 (3v - 3)
#                          7 - 0.7 v = 0.9 v - 0.9  ->  v = 7.9 / 1.6 = 4.9375
#   tau 0.5: both sides weigh 1/2, so sum (x - v) = 0: v = mean = 3.25
#   tau 0.99: 0.99 (10 - v) = 0.01 (3v - 3) -> 9.93 = 1.02 v -> v = 9.735294 (below the max 10: the
#             expectile climbs towards the largest value in the sample, never past it)
#   tau 0.3 (a lower expectile), v in (2, 10): 0.3 (10 - v) = 0.7 (3v - 3) -> 5.1 = 2.4 v -> v = 2.125
SAMPLE = [0.0, 1.0, 2.0, 10.0]
EXPECTILES = {0.7: 4.9375, 0.5: 3.25, 0.99: 9.93 / 1.02, 0.3: 2.125}


def minimise_expectile_loss(script, sample, expectile, steps=3000, lr=0.4):
    """Gradient descent on the script's own expectile_loss over a scalar v (V's output for one state
    whose Q-values over the data's actions are `sample`)."""
    m = load_script(script)
    x = np.asarray(sample, dtype=np.float32)
    if fw(script) == "torch":
        v = torch.zeros((), requires_grad=True)
        opt = torch.optim.SGD([v], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            m.expectile_loss(torch.as_tensor(x) - v, expectile).backward()
            opt.step()
        return float(v.detach())
    grad = jax.jit(jax.grad(lambda v: m.expectile_loss(x - v, expectile)))
    v = np.float32(0.0)
    for _ in range(steps):
        v = v - lr * grad(v)
    return float(v)


@pytest.mark.parametrize("script", TWINS)
def test_expectile_loss_by_hand(script):
    m, c = load_script(script), conv(script)
    # u = [2, -1, 0.5], tau 0.7: weights [0.7, 0.3, 0.7]; (0.7 * 4 + 0.3 * 1 + 0.7 * 0.25) / 3 = 3.275 / 3
    assert float(m.expectile_loss(c([2.0, -1.0, 0.5]), 0.7)) == pytest.approx(3.275 / 3, abs=1e-6)
    # tau 0.5 is half the mean squared error
    assert float(m.expectile_loss(c([2.0, -1.0, 0.5]), 0.5)) == pytest.approx(0.5 * 5.25 / 3, abs=1e-6)


def test_hand_expectiles_solve_the_balance_equation():
    x = np.array(SAMPLE)
    for tau, v in EXPECTILES.items():
        assert tau * np.clip(x - v, 0, None).sum() == pytest.approx((1 - tau) * np.clip(v - x, 0, None).sum())


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("tau", sorted(EXPECTILES))
def test_expectile_loss_minimiser_is_the_expectile(script, tau):
    v = minimise_expectile_loss(script, SAMPLE, tau)
    assert v == pytest.approx(EXPECTILES[tau], abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_expectile_half_is_the_mean_and_near_one_the_max(script):
    rng = np.random.default_rng(0)
    sample = rng.normal(size=20).astype(np.float32)
    assert minimise_expectile_loss(script, sample, 0.5) == pytest.approx(float(sample.mean()), abs=1e-4)
    v = [minimise_expectile_loss(script, sample, tau, steps=6000, lr=0.5) for tau in (0.7, 0.9, 0.99)]
    assert sample.mean() < v[0] < v[1] < v[2] <= sample.max() + 1e-5  # climbs towards the max, never past it
    assert v[2] > np.sort(sample)[-2]  # tau 0.99 sits above every value but the largest


@pytest.mark.parametrize("script", TWINS)
def test_advantage_weights_are_clamped_and_constant_to_the_gradient(script):
    m, c = load_script(script), conv(script)
    # beta 3: exp(-3) = 0.049787, exp(0) = 1, exp(3) = 20.085537, exp(6) = 403.4 -> 100,
    # exp(3000) = inf -> 100
    adv = [-1.0, 0.0, 1.0, 2.0, 1000.0]
    w = np.asarray(m.advantage_weights(c(adv), 3.0, 100.0))
    np.testing.assert_allclose(w, [0.049787, 1.0, 20.085537, 100.0, 100.0], rtol=1e-5)
    assert np.all(np.isfinite(w))
    if fw(script) == "torch":
        a = torch.tensor(adv, requires_grad=True)
        assert not m.advantage_weights(a, 3.0, 100.0).requires_grad
    else:
        g = jax.grad(lambda a: m.advantage_weights(a, 3.0, 100.0).sum())(np.asarray(adv, np.float32))
        np.testing.assert_array_equal(np.asarray(g), 0.0)


@pytest.mark.parametrize("script", TWINS)
def test_awr_actor_loss_and_gradient_by_hand(script):
    m = load_script(script)
    # beta 1, A = [0, ln 2, 10]: weights [1, 2, min(e^10, 5) = 5] (max_weight 5); log pi = [-1, -2, -0.5]
    # loss = -(1 * -1 + 2 * -2 + 5 * -0.5) / 3 = 7.5 / 3 = 2.5; mean weight 8 / 3; d loss / d log pi = -w / 3
    logp = np.array([-1.0, -2.0, -0.5], np.float32)
    adv = np.array([0.0, np.log(2.0), 10.0], np.float32)
    if fw(script) == "torch":
        lp = torch.tensor(logp, requires_grad=True)
        loss, mean_weight = m.awr_actor_loss(lp, torch.as_tensor(adv), 1.0, 5.0)
        loss.backward()
        grad = lp.grad.numpy()
    else:
        (loss, mean_weight), grad = jax.value_and_grad(
            lambda lp: m.awr_actor_loss(lp, adv, 1.0, 5.0), has_aux=True
        )(logp)
    assert float(loss) == pytest.approx(2.5, abs=1e-5)
    assert float(mean_weight) == pytest.approx(8 / 3, abs=1e-5)
    np.testing.assert_allclose(np.asarray(grad), [-1 / 3, -2 / 3, -5 / 3], atol=1e-6)
    # beta 0: every weight is 1, plain behaviour cloning (mean log-likelihood)
    loss0, w0 = m.awr_actor_loss(conv(script)(logp), conv(script)(adv), 0.0, 100.0)
    assert float(loss0) == pytest.approx(3.5 / 3, abs=1e-6) and float(w0) == pytest.approx(1.0)


@pytest.mark.parametrize("script", TWINS)
def test_gaussian_log_prob_by_hand(script):
    m, c = load_script(script), conv(script)
    # dim 1: mean 0, log_std 0, a = 1: -1/2 - log sqrt(2 pi) = -0.5 - 0.918939 = -1.418939
    # dim 2: mean 0, log_std ln 2, a = 2: z = 1: -0.5 - 0.693147 - 0.918939 = -2.112086; sum -3.531024
    lp = m.gaussian_log_prob(c([[0.0, 0.0]]), c([0.0, np.log(2.0)]), c([[1.0, 2.0]]))
    np.testing.assert_allclose(np.asarray(lp), [-3.531024], atol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_prepare_dataset_and_target_bootstrap_through_timeouts(script):
    m, c = load_script(script), conv(script)
    obs = np.array([[0.0, 10.0], [2.0, 10.0], [4.0, 10.0]], dtype=np.float32)
    data = {
        "observations": obs,
        "next_observations": obs[::-1].copy(),
        "actions": np.zeros((3, 1), np.float32),
        "rewards": np.array([1.0, 0.5, 2.0], np.float32),
        "terminals": np.array([0.0, 1.0, 0.0], np.float32),
        "timeouts": np.array([0.0, 0.0, 1.0], np.float32),
    }
    arrays = m.prepare_dataset(data, *m.state_normalizer(obs))
    np.testing.assert_array_equal(arrays["terminals"], [0.0, 1.0, 0.0])
    # gamma 0.9, V(s') = [4, -2, 6]: 1 + 0.9 * 4 = 4.6; terminal: 0.5; timeout: 2 + 0.9 * 6 = 7.4
    target = m.iql_target(c(arrays["rewards"]), c(arrays["terminals"]), c([4.0, -2.0, 6.0]), 0.9)
    np.testing.assert_allclose(np.asarray(target), [4.6, 0.5, 7.4], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_saved_model_plays_the_mean_again(script, tmp_path):
    """The evaluation is deterministic (the Gaussian's mean): the reloaded policy, normalising with the
    saved statistics, plays the last evaluation's episodes again with the same return."""
    m = load_script(script)
    s = run_train(script, tmp_path, seed=1, **{**m.SMOKE_ARGS, "eval_episodes": 3})
    assert s["eval_mean_return"] == pytest.approx(s["final_mean_return"], abs=1e-3)
    assert set(s["losses"]) >= {"value_loss", "qf1_loss", "qf2_loss", "actor_loss", "mean_weight"}


@pytest.mark.parametrize("script", TWINS)
def test_stitch_dataset_runs(script, tmp_path):
    m = load_script(script)
    s = run_train(script, tmp_path, seed=1, dataset="pointmaze-stitch", **m.SMOKE_ARGS)
    assert len(s["episodic_returns"]) == 2 and 0.0 <= s["final_mean_return"] <= 1.0


@pytest.mark.parametrize("script", TWINS)
def test_discrete_dataset_is_refused_naming_cql_discrete(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=f"algos/cql_{fw(script)}.py --discrete"):
        m.train(m.Args(dataset="cartpole-medium", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(dataset="hopper-medium"), "pointmaze-stitch"),
        (dict(total_steps=-1), "--total-steps"),
        (dict(batch_size=0), "--batch-size"),
        (dict(eval_every=0), "--eval-every"),
        (dict(eval_episodes=0), "--eval-episodes"),
        (dict(expectile=1.0), "--expectile"),
        (dict(expectile=0.0), "--expectile"),
        (dict(beta=-1.0), "--beta"),
        (dict(max_weight=0.0), "--max-weight"),
        (dict(gamma=1.5), "--gamma"),
    ],
)
def test_bad_input_is_refused_before_a_run_directory(script, bad, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **bad))
    assert not any(tmp_path.iterdir())
