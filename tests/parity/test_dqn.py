"""Tier 2 for DQN: the twins' module-level math agrees within 1e-5 on identical random batches
(with terminations), values and gradients, and the two Q-networks are the same function."""

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
    B, A = 128, 3
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "next_q": f32(rng.normal(size=(B, A)) * 5),
        "rewards": f32(rng.normal(size=B)),
        "dones": f32(rng.random(B) < 0.2),
        "q_taken": f32(rng.normal(size=B) * 3),  # errors on both sides of the Huber kink
        "targets": f32(rng.normal(size=B) * 3),
    }


def test_batch_has_terminations(batch):
    assert 5 < batch["dones"].sum() < 128


def test_max_q_target_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("next_q", "rewards", "dones")]
    y_t = pt.max_q_target(*map(torch.as_tensor, args), 0.99)
    y_j = jx.max_q_target(*args, 0.99)
    np.testing.assert_allclose(y_t.numpy(), np.asarray(y_j), atol=TOL, rtol=TOL)


def test_td_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    q = torch.tensor(batch["q_taken"], requires_grad=True)
    loss_t = pt.td_loss(q, torch.as_tensor(batch["targets"]))
    loss_t.backward()
    loss_j, g_j = jax.value_and_grad(lambda q: jx.td_loss(q, batch["targets"]))(batch["q_taken"])
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(q.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_linear_schedule_parity(twins):
    pt, jx = twins
    for t in (0, 1, 250, 999, 1000, 10_000):
        assert pt.linear_schedule(1.0, 0.05, 1000, t) == pytest.approx(
            jx.linear_schedule(1.0, 0.05, 1000, t), abs=1e-12
        )


@pytest.mark.parametrize("layer_norm", [False, True])
def test_networks_and_loss_agree_on_the_same_weights(twins, batch, layer_norm):
    """Same weights, same batch: the same Q-values, the same TD loss through the max target, and
    the same gradient of the loss with respect to every weight (the 2015 network, and with
    --layer-norm)."""
    pt, jx = twins
    torch.manual_seed(0)
    t_net, t_target = pt.QNetwork(4, 3, layer_norm=layer_norm), pt.QNetwork(4, 3, layer_norm=layer_norm)
    j_net = jx.QNetwork(3, layer_norm=layer_norm)
    params, target_params = torch_to_flax_params(t_net), torch_to_flax_params(t_target)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(128, 4)).astype(np.float32)
    next_obs = rng.normal(size=(128, 4)).astype(np.float32)
    actions = rng.integers(0, 3, size=128)
    np.testing.assert_allclose(
        t_net(torch.as_tensor(obs)).detach().numpy(), np.asarray(j_net.apply(params, obs)), atol=TOL, rtol=TOL
    )

    with torch.no_grad():
        y = pt.max_q_target(
            t_target(torch.as_tensor(next_obs)),
            torch.as_tensor(batch["rewards"]),
            torch.as_tensor(batch["dones"]),
            0.99,
        )
    q_taken = t_net(torch.as_tensor(obs)).gather(1, torch.as_tensor(actions)[:, None]).squeeze(1)
    loss_t = pt.td_loss(q_taken, y)
    loss_t.backward()

    def loss_j(params):
        y = jx.max_q_target(j_net.apply(target_params, next_obs), batch["rewards"], batch["dones"], 0.99)
        q = jnp.take_along_axis(j_net.apply(params, obs), jnp.asarray(actions)[:, None], axis=-1).squeeze(-1)
        return jx.td_loss(q, y)

    value, grads = jax.value_and_grad(loss_j)(params)
    assert abs(loss_t.item() - float(value)) < TOL
    layers = [l for l in t_net.modules() if isinstance(l, torch.nn.Linear)]
    for i, l in enumerate(layers):
        g = grads["params"][f"Dense_{i}"]
        np.testing.assert_allclose(l.weight.grad.numpy().T, np.asarray(g["kernel"]), atol=TOL, rtol=TOL)
        np.testing.assert_allclose(l.bias.grad.numpy(), np.asarray(g["bias"]), atol=TOL, rtol=TOL)
    norms = [l for l in t_net.modules() if isinstance(l, torch.nn.LayerNorm)]
    assert len(norms) == (2 if layer_norm else 0)  # --layer-norm: a LayerNorm before each hidden ReLU
    for i, l in enumerate(norms):
        g = grads["params"][f"LayerNorm_{i}"]
        np.testing.assert_allclose(l.weight.grad.numpy(), np.asarray(g["scale"]), atol=TOL, rtol=TOL)
        np.testing.assert_allclose(l.bias.grad.numpy(), np.asarray(g["bias"]), atol=TOL, rtol=TOL)
