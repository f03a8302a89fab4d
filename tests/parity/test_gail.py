"""Tier 2 for GAIL: the twins' module-level math agrees within 1e-5 on identical random inputs
(with episode ends), values and gradients; the actor-critic and the discriminator networks are the
same function on the same weights, and so are the discriminator loss's parameter gradients."""

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
    B = 96
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "learner_logits": f32(3 * rng.normal(size=B)),
        "expert_logits": f32(3 * rng.normal(size=B // 2)),  # sets of different sizes
        "obs": f32(rng.normal(size=(B, 4))),
        "actions": rng.integers(0, 2, size=B),
        "expert_obs": f32(rng.normal(size=(B // 2, 4))),
        "expert_actions": rng.integers(0, 2, size=B // 2),
    }


def test_discriminator_inputs_parity(twins, batch):
    pt, jx = twins
    x_t = pt.discriminator_inputs(torch.as_tensor(batch["obs"]), torch.as_tensor(batch["actions"]), 3)
    x_j = jx.discriminator_inputs(jnp.asarray(batch["obs"]), jnp.asarray(batch["actions"]), 3)
    np.testing.assert_allclose(x_t.numpy(), np.asarray(x_j), atol=TOL, rtol=TOL)


def test_discriminator_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    lo = torch.tensor(batch["learner_logits"], requires_grad=True)
    ex = torch.tensor(batch["expert_logits"], requires_grad=True)
    loss_t = pt.discriminator_loss(lo, ex)
    loss_t.backward()
    loss_j, (g_lo, g_ex) = jax.value_and_grad(jx.discriminator_loss, argnums=(0, 1))(
        batch["learner_logits"], batch["expert_logits"]
    )
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(lo.grad.numpy(), np.asarray(g_lo), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(ex.grad.numpy(), np.asarray(g_ex), atol=TOL, rtol=TOL)


def test_gail_reward_and_gradient_parity(twins, batch):
    pt, jx = twins
    lo = torch.tensor(batch["learner_logits"], requires_grad=True)
    r_t = pt.gail_reward(lo)
    r_t.sum().backward()
    r_j, vjp = jax.vjp(jx.gail_reward, jnp.asarray(batch["learner_logits"]))
    (g_j,) = vjp(jnp.ones_like(r_j))
    np.testing.assert_allclose(r_t.detach().numpy(), np.asarray(r_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(lo.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def copy_mlp(seq):
    """A torch MLP's Linear layers as a flax MLP's params subtree (kernel = weight transposed)."""
    return torch_to_flax_params(seq)["params"]


def test_agent_networks_agree_on_the_same_weights(twins):
    pt, jx = twins
    torch.manual_seed(0)
    t_agent, j_agent = pt.Agent(4, 2), jx.Agent(4, 2)
    params = {"actor": {"params": copy_mlp(t_agent.actor)}, "critic": {"params": copy_mlp(t_agent.critic)}}
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions = np.random.default_rng(1).integers(0, 2, size=16)
    logp_t, ent_t, v_t = t_agent.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    logp_j, ent_j, v_j = j_agent.evaluate_actions(params, jnp.asarray(obs), jnp.asarray(actions))
    for a, b in ((logp_t, logp_j), (ent_t, ent_j), (v_t, v_j)):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)


def test_discriminator_and_its_loss_gradients_agree_on_the_same_weights(twins, batch):
    """Same weights -> same logits, same discriminator loss and the same gradient for every weight."""
    pt, jx = twins
    torch.manual_seed(0)
    t_disc, j_disc = pt.Discriminator(4, 2), jx.Discriminator(2)
    params = {"params": {"MLP_0": copy_mlp(t_disc.net)}}
    obs, actions = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["actions"])
    e_obs, e_actions = torch.as_tensor(batch["expert_obs"]), torch.as_tensor(batch["expert_actions"])
    logits_t = t_disc(obs, actions)
    loss_t = pt.discriminator_loss(logits_t, t_disc(e_obs, e_actions))
    loss_t.backward()

    def loss_j(params):
        return jx.discriminator_loss(
            j_disc.apply(params, batch["obs"], batch["actions"]),
            j_disc.apply(params, batch["expert_obs"], batch["expert_actions"]),
        )

    logits_j = j_disc.apply(params, batch["obs"], batch["actions"])
    np.testing.assert_allclose(logits_t.detach().numpy(), np.asarray(logits_j), atol=TOL, rtol=TOL)
    value_j, grads_j = jax.value_and_grad(loss_j)(params)
    assert abs(loss_t.item() - float(value_j)) < TOL
    layers = [m for m in t_disc.net if isinstance(m, torch.nn.Linear)]
    for i, layer in enumerate(layers):
        g = grads_j["params"]["MLP_0"][f"Dense_{i}"]
        np.testing.assert_allclose(layer.weight.grad.numpy().T, np.asarray(g["kernel"]), atol=TOL, rtol=TOL)
        np.testing.assert_allclose(layer.bias.grad.numpy(), np.asarray(g["bias"]), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_load_expert_pairs_parity(twins, k):
    pt, jx = twins
    for a, b in zip(pt.load_expert_pairs("cartpole-expert", k), jx.load_expert_pairs("cartpole-expert", k)):
        np.testing.assert_array_equal(a, b)
