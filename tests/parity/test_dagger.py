"""Tier 2 for DAgger: on identical random inputs, the twins' squashing, MSE and cross-entropy losses
and their gradients agree within 1e-5; the numpy parts (beta schedule, mixture, aggregate, the
labelled rollout with the same learner) give identical numbers; and the policy network is the same
function on the same weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_to_flax_params

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, A, N = 256, 2, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    low, high = f32(-rng.uniform(0.5, 3.0, size=A)), f32(rng.uniform(0.5, 3.0, size=A))
    return {
        "pre_tanh": f32(rng.normal(scale=2.0, size=(B, A))),
        "scale": f32((high - low) / 2),
        "bias": f32((high + low) / 2),
        "actions": f32(rng.uniform(low, high, size=(B, A))),
        "logits": f32(rng.normal(scale=2.0, size=(B, N))),
        "labels": rng.integers(0, N, size=B),
        "coins": rng.random(B),
        "beta": float(rng.random()),
    }


def test_losses_and_gradients(twins, batch):
    pt, jx = twins
    x = torch.tensor(batch["pre_tanh"], requires_grad=True)
    loss_t = pt.bc_mse_loss(
        pt.squash_actions(x, torch.as_tensor(batch["scale"]), torch.as_tensor(batch["bias"])),
        torch.as_tensor(batch["actions"]),
    )
    loss_t.backward()
    f = lambda x: jx.bc_mse_loss(jx.squash_actions(x, batch["scale"], batch["bias"]), batch["actions"])
    loss_j, grad_j = jax.value_and_grad(f)(batch["pre_tanh"])
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(x.grad.numpy(), np.asarray(grad_j), atol=TOL, rtol=TOL)

    x = torch.tensor(batch["logits"], requires_grad=True)
    loss_t = pt.bc_cross_entropy_loss(x, torch.as_tensor(batch["labels"]))
    loss_t.backward()
    loss_j, grad_j = jax.value_and_grad(jx.bc_cross_entropy_loss)(
        batch["logits"], jnp.asarray(batch["labels"])
    )
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(float(loss_j)))
    np.testing.assert_allclose(x.grad.numpy(), np.asarray(grad_j), atol=TOL, rtol=TOL)
    np.testing.assert_array_equal(
        pt.greedy_actions(torch.as_tensor(batch["logits"])).numpy(),
        np.asarray(jx.greedy_actions(batch["logits"])),
    )


def test_numpy_parts_agree(twins, batch):
    pt, jx = twins
    for decay in (0.0, 0.3, 1.0):
        assert [pt.beta_schedule(i, decay) for i in range(5)] == [
            jx.beta_schedule(i, decay) for i in range(5)
        ]
    np.testing.assert_array_equal(
        pt.mixture_actions(batch["actions"], -batch["actions"], batch["coins"], batch["beta"]),
        jx.mixture_actions(batch["actions"], -batch["actions"], batch["coins"], batch["beta"]),
    )
    bufs = [(np.zeros((512, 2), np.float32), np.zeros((512, 2), np.float32)) for _ in range(2)]
    sizes = [m.aggregate(*b, 100, batch["pre_tanh"], batch["actions"]) for m, b in zip(twins, bufs)]
    assert sizes == [356, 356]
    np.testing.assert_array_equal(bufs[0][0], bufs[1][0])
    np.testing.assert_array_equal(bufs[0][1], bufs[1][1])


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1", "PointMazeStitch-v0"])
def test_labelled_rollouts_agree(twins, env_id):
    pt, jx = twins
    expert = pt.offline_data.expert_policy(env_id)
    env = pt.offline_data.make_env(env_id)
    space = env.action_space
    learner = lambda o: np.asarray([space.sample()])  # the same draws: the space is reseeded below
    outs = []
    for m in twins:
        space.seed(0)
        outs.append(m.rollout_and_label(env, learner, expert, 0.5, 120, np.random.default_rng(3), 11))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("out_dim", [1, 2])
def test_policy_network_agrees_on_the_same_weights(twins, out_dim):
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, hidden, B = 4, 32, 64
    t_policy = pt.Policy(obs_dim, out_dim, hidden)
    params = torch_to_flax_params(t_policy)
    obs = np.random.default_rng(0).normal(size=(B, obs_dim)).astype(np.float32)
    with torch.no_grad():
        out_t = t_policy(torch.as_tensor(obs)).numpy()
    out_j = np.asarray(jx.Policy(out_dim, hidden).apply(params, obs))
    np.testing.assert_allclose(out_t, out_j, atol=TOL, rtol=TOL)
