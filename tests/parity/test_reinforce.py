"""Tier 2 for REINFORCE: the twins' module-level math agrees within 1e-5 on identical random
batches (with episode ends), values and gradients, and the estimator variance from output-layer scores."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    T, N, A = 64, 8, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "rewards": f32(rng.normal(size=(T, N))),
        "dones": f32(rng.random((T, N)) < 0.1),
        "logits": f32(rng.normal(size=(T, N, A))),
        "actions": rng.integers(0, A, size=(T, N)),
        "weights": f32(rng.normal(size=(T, N))),
        "mask": f32(rng.random((T, N)) < 0.8),
    }


def test_batch_has_episode_ends(batch):
    assert batch["dones"].sum() > 10


def test_returns_to_go_parity(twins, batch):
    pt, jx = twins
    g_t = pt.returns_to_go(torch.as_tensor(batch["rewards"]), torch.as_tensor(batch["dones"]), 0.99)
    g_j = jx.returns_to_go(batch["rewards"], batch["dones"], 0.99)
    np.testing.assert_allclose(g_t.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_log_prob_and_loss_parity_with_gradients(twins, batch):
    pt, jx = twins
    logits = torch.tensor(batch["logits"], requires_grad=True)
    logp_t = pt.categorical_log_prob(logits, torch.as_tensor(batch["actions"]))
    loss_t = pt.reinforce_loss(logp_t, torch.as_tensor(batch["weights"]), torch.as_tensor(batch["mask"]))
    loss_t.backward()

    def f(lg):
        logp = jx.categorical_log_prob(lg, jnp.asarray(batch["actions"]))
        return jx.reinforce_loss(logp, batch["weights"], batch["mask"]), logp

    (loss_j, logp_j), g_j = jax.value_and_grad(f, has_aux=True)(batch["logits"])
    np.testing.assert_allclose(logp_t.detach().numpy(), np.asarray(logp_j), atol=TOL, rtol=TOL)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(logits.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_masked_normalize_parity(twins, batch):
    pt, jx = twins
    n_t = pt.masked_normalize(torch.as_tensor(batch["weights"]), torch.as_tensor(batch["mask"]))
    n_j = jx.masked_normalize(batch["weights"], batch["mask"])
    np.testing.assert_allclose(n_t.numpy(), np.asarray(n_j), atol=TOL, rtol=TOL)


def test_output_layer_score_and_estimator_variance_parity(twins, batch):
    """The per-step output-layer scores and, from them, the variance across the batch's episodes
    (columns) of the single-episode gradient estimate, for the raw and the reward-to-go weights."""
    pt, jx = twins
    hidden = np.tanh(np.random.default_rng(7).normal(size=batch["logits"].shape[:2] + (5,))).astype(
        np.float32
    )
    s_t = pt.output_layer_score(
        torch.as_tensor(hidden), torch.as_tensor(batch["logits"]), torch.as_tensor(batch["actions"])
    )
    s_j = jx.output_layer_score(hidden, batch["logits"], batch["actions"])
    np.testing.assert_allclose(s_t.numpy(), np.asarray(s_j), atol=TOL, rtol=TOL)
    returns = jx.returns_to_go(batch["rewards"], batch["dones"], 0.99)
    for w in (batch["weights"], np.array(returns)):
        v_t = pt.estimator_variance(s_t, torch.as_tensor(w), torch.as_tensor(batch["mask"])).item()
        v_j = float(jx.estimator_variance(s_j, w, batch["mask"]))
        assert abs(v_t - v_j) <= TOL * max(1.0, abs(v_t)), (v_t, v_j)
