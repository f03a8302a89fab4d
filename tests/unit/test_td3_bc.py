"""Tier 1 for TD3+BC: the actor loss and lambda on hand numbers (worked problem), the scale-free
lambda, the state normaliser's mean and std, the critic's done flag (terminals, not timeouts), the
saved model carrying its state statistics, and the bad-input checks, in both twins."""

import jax
import numpy as np
import pytest
import torch

from helpers import conv, load_script, smoke_run

TWINS = ["algos/td3_bc_torch.py", "algos/td3_bc_jax.py"]


def fw(script):
    return "torch" if script.endswith("torch.py") else "jax"


# Worked problem (docs: "TD3+BC's actor loss by hand"). Batch of 3, one action dimension, alpha 2.5:
#   Q(s, pi(s)) = [2, -1, 5]: mean |Q| = 8/3, lambda = 2.5 / (8/3) = 0.9375; mean Q = 2
#   pi(s) = [0.5, -0.2, 1.0], a = [0.0, 0.3, 1.5]: pi - a = [0.5, -0.5, -0.5], BC term = mean 0.25 = 0.25
#   loss = -0.9375 * 2 + 0.25 = -1.625
#   dloss/dQ_i = -lambda / 3 = -0.3125 (lambda is a constant to the gradient)
#   dloss/dpi_i = 2 (pi_i - a_i) / 3 = [1/3, -1/3, -1/3]
#   --no-bc: loss = -mean Q = -2
Q = [2.0, -1.0, 5.0]
PI = [[0.5], [-0.2], [1.0]]
A = [[0.0], [0.3], [1.5]]


@pytest.mark.parametrize("script", TWINS)
def test_lambda_and_actor_loss_by_hand(script):
    m, c = load_script(script), conv(script)
    assert float(m.bc_lambda(c(Q), 2.5)) == pytest.approx(0.9375)
    loss, bc_loss = m.td3_bc_actor_loss(c(Q), c(PI), c(A), 2.5)
    assert float(loss) == pytest.approx(-1.625, abs=1e-6)
    assert float(bc_loss) == pytest.approx(0.25, abs=1e-6)
    loss, bc_loss = m.td3_bc_actor_loss(c(Q), c(PI), c(A), 2.5, bc=False)
    assert float(loss) == pytest.approx(-2.0, abs=1e-6)
    assert float(bc_loss) == pytest.approx(0.25, abs=1e-6)


def actor_loss_grads(script, q, pi, a, alpha, bc=True):
    m = load_script(script)
    q, pi, a = (np.asarray(x, dtype=np.float32) for x in (q, pi, a))
    if fw(script) == "torch":
        tq, tpi = torch.tensor(q, requires_grad=True), torch.tensor(pi, requires_grad=True)
        m.td3_bc_actor_loss(tq, tpi, torch.as_tensor(a), alpha, bc)[0].backward()
        return tq.grad.numpy(), (tpi.grad if tpi.grad is not None else torch.zeros_like(tpi)).numpy()
    g = jax.grad(lambda q_, pi_: m.td3_bc_actor_loss(q_, pi_, a, alpha, bc)[0], argnums=(0, 1))(q, pi)
    return np.asarray(g[0]), np.asarray(g[1])


@pytest.mark.parametrize("script", TWINS)
def test_actor_loss_gradients_by_hand(script):
    gq, gpi = actor_loss_grads(script, Q, PI, A, 2.5)
    np.testing.assert_allclose(gq, [-0.3125] * 3, atol=1e-6)  # lambda detached: no d|Q|/dQ term
    np.testing.assert_allclose(gpi, [[1 / 3], [-1 / 3], [-1 / 3]], atol=1e-6)
    gq, gpi = actor_loss_grads(script, Q, PI, A, 2.5, bc=False)
    np.testing.assert_allclose(gq, [-1 / 3] * 3, atol=1e-6)
    np.testing.assert_allclose(gpi, [[0.0]] * 3, atol=1e-6)  # no BC term, no pull towards a


@pytest.mark.parametrize("script", TWINS)
def test_lambda_makes_alpha_scale_free(script):
    """Q * 100 (rewards 100 times larger): lambda / 100, so the Q term and the gradient through pi are
    unchanged."""
    m, c = load_script(script), conv(script)
    q = np.array(Q, dtype=np.float32)
    for scale in (0.01, 100.0):
        assert float(m.bc_lambda(c(q * scale), 2.5)) == pytest.approx(0.9375 / scale, rel=1e-6)
        loss, _ = m.td3_bc_actor_loss(c(q * scale), c(PI), c(A), 2.5)
        assert float(loss) == pytest.approx(-1.625, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_state_normalizer_by_hand(script):
    m = load_script(script)
    # column 0: [0, 2, 4] -> mean 2, population std sqrt(8/3) = 1.632993, + 1e-3 = 1.633993
    # column 1: constant 10 -> mean 10, std 0 + 1e-3 (no division by zero; the normalised value is 0)
    obs = np.array([[0.0, 10.0], [2.0, 10.0], [4.0, 10.0]], dtype=np.float32)
    mean, std = m.state_normalizer(obs)
    np.testing.assert_allclose(mean, [2.0, 10.0], atol=1e-6)
    np.testing.assert_allclose(std, [1.633993, 0.001], atol=1e-6)
    assert mean.dtype == np.float32 and std.dtype == np.float32


@pytest.mark.parametrize("script", TWINS)
def test_prepare_dataset_normalises_and_bootstraps_through_timeouts(script):
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
    mean, std = m.state_normalizer(obs)
    arrays = m.prepare_dataset(data, mean, std)
    np.testing.assert_allclose(arrays["obs"][:, 0], [-2 / 1.633993, 0.0, 2 / 1.633993], atol=1e-5)
    np.testing.assert_allclose(arrays["obs"][:, 1], 0.0, atol=1e-6)
    np.testing.assert_allclose(arrays["next_obs"][:, 0], [2 / 1.633993, 0.0, -2 / 1.633993], atol=1e-5)
    np.testing.assert_array_equal(arrays["terminals"], [0.0, 1.0, 0.0])
    # targets, gamma 0.9, min(Q1', Q2') = [4, -2, 6]: 1 + 0.9 * 4 = 4.6; terminal: 0.5;
    # timeout: 2 + 0.9 * 6 = 7.4
    target = m.td3_target(
        c(arrays["rewards"]), c(arrays["terminals"]), c([5.0, -2.0, 7.0]), c([4.0, 3.0, 6.0]), 0.9
    )
    np.testing.assert_allclose(np.asarray(target), [4.6, 0.5, 7.4], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_target_smoothing_is_clipped_and_stays_in_bounds(script):
    m, c = load_script(script), conv(script)
    # Box [-2, 2] x [0, 1]: scale (2, 0.5). noise 0.3 -> 0.6; 0.9 clipped to 0.5 -> 1.0; -0.9 -> -0.25;
    # 1.15 -> 1
    out = m.smoothed_target_actions(
        c([[0.5, 0.9], [1.5, 0.2], [0.0, 0.9]]),
        c([[0.3, 0.5], [0.9, -0.9], [-0.1, 0.5]]),
        0.5,
        c([2.0, 0.5]),
        c([-2.0, 0.0]),
        c([2.0, 1.0]),
    )
    np.testing.assert_allclose(np.asarray(out), [[1.1, 1.0], [2.0, 0.0], [-0.2, 1.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_saved_model_carries_the_state_statistics(script, tmp_path):
    m = load_script(script)
    s = smoke_run(script)
    if fw(script) == "torch":
        saved = torch.load(s["model_path"], map_location="cpu")
        mean, std = saved["state_mean"].numpy(), saved["state_std"].numpy()
    else:
        import flax.serialization

        with open(s["model_path"], "rb") as f:
            saved = flax.serialization.msgpack_restore(f.read())
        mean, std = np.asarray(saved["state_mean"]), np.asarray(saved["state_std"])
    import offline_data

    want_mean, want_std = m.state_normalizer(offline_data.load_dataset("pendulum-medium")["observations"])
    np.testing.assert_allclose(mean, want_mean, atol=1e-6)
    np.testing.assert_allclose(std, want_std, atol=1e-6)
    # the reloaded policy, normalising with the saved statistics, plays the last evaluation's episodes again
    assert s["eval_mean_return"] == pytest.approx(s["final_mean_return"], abs=1e-3)


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
        (dict(dataset="hopper-medium"), "pendulum-medium"),
        (dict(total_steps=-1), "--total-steps"),
        (dict(batch_size=0), "--batch-size"),
        (dict(eval_every=0), "--eval-every"),
        (dict(alpha=0.0), "--alpha"),
        (dict(gamma=1.5), "--gamma"),
    ],
)
def test_bad_input_is_refused_before_a_run_directory(script, bad, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **bad))
    assert not any(tmp_path.iterdir())
