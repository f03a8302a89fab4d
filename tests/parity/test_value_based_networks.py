"""Tier 2 for the value-based family's two shared options (the n-step target and LayerNorm):
each pair's Q-networks are the same function in both twins, with and without LayerNorm (its scale
and bias drawn at random, so a swapped or missing affine would show), and each pair's target takes
the same per-sample discounts gamma^k in both twins."""

import jax
import numpy as np
import pytest
import torch

from helpers import load_script, torch_to_flax_params

TOL = 1e-5
PAIRS = ["dqn", "double_dqn", "dueling_dqn", "per_dqn", "c51", "qr_dqn"]
# the extra constructor arguments after (obs_dim, num_actions) / (num_actions)
EXTRA = {"c51": (11, -10.0, 10.0), "qr_dqn": (7,)}


def twins(name):
    return load_script(f"algos/{name}_torch.py"), load_script(f"algos/{name}_jax.py")


@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("name", PAIRS)
def test_q_networks_agree_with_and_without_layer_norm(name, layer_norm):
    pt, jx = twins(name)
    torch.manual_seed(0)
    t_net = pt.QNetwork(4, 3, *EXTRA.get(name, ()), layer_norm=layer_norm)
    j_net = jx.QNetwork(3, *EXTRA.get(name, ()), layer_norm=layer_norm)
    norms = [l for l in t_net.modules() if isinstance(l, torch.nn.LayerNorm)]
    assert len(norms) == (2 if layer_norm else 0)
    with torch.no_grad():
        for l in norms:
            assert l.eps == 1e-6  # flax's default epsilon
            l.weight.uniform_(0.5, 1.5)
            l.bias.uniform_(-0.5, 0.5)
    params = torch_to_flax_params(t_net)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32) * 3
    j_init = j_net.init(jax.random.PRNGKey(0), obs)
    # the copied pytree has exactly the flax module's structure (same layer names and shapes)
    assert jax.tree_util.tree_structure(j_init) == jax.tree_util.tree_structure(params)
    np.testing.assert_allclose(
        t_net(torch.as_tensor(obs)).detach().numpy(),
        np.asarray(j_net.apply(params, obs)),
        atol=TOL,
        rtol=1e-4,
    )


def test_layer_norm_normalises_the_hidden_layers():
    """With LayerNorm at its initial affine (scale 1, bias 0), each hidden layer's pre-ReLU vector has
    mean 0 and variance 1 per sample, whatever the input's scale: torch's net, checked with hooks."""
    pt, _ = twins("dqn")
    torch.manual_seed(0)
    t_net = pt.QNetwork(4, 2, layer_norm=True)
    seen = []
    for l in t_net.modules():
        if isinstance(l, torch.nn.LayerNorm):
            l.register_forward_hook(lambda mod, inp, out: seen.append(out.detach()))
    t_net(torch.randn(8, 4) * 100.0)
    assert len(seen) == 2
    for out in seen:
        np.testing.assert_allclose(out.mean(-1).numpy(), 0.0, atol=1e-5)
        np.testing.assert_allclose(out.var(-1, unbiased=False).numpy(), 1.0, atol=1e-4)


@pytest.mark.parametrize("name", ["dqn", "dueling_dqn", "per_dqn", "double_dqn", "c51", "qr_dqn"])
def test_targets_with_per_sample_discounts_agree(name):
    pt, jx = twins(name)
    rng = np.random.default_rng(1)
    B = 64
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    rewards, dones = f32(rng.normal(size=B) * 2), f32(rng.random(B) < 0.2)
    discounts = f32(0.99 ** rng.integers(1, 4, size=B))  # gamma^k, k = 1..3
    if name == "c51":
        atoms = f32(np.linspace(-10, 10, 11))
        probs = rng.random((B, 11))
        probs = f32(probs / probs.sum(-1, keepdims=True))
        args = (probs, rewards, dones, discounts, atoms)
        out_t = pt.categorical_projection(*map(torch.as_tensor, args))
        out_j = jx.categorical_projection(*args)
    elif name == "qr_dqn":
        args = (f32(rng.normal(size=(B, 7)) * 5), rewards, dones, discounts)
        out_t = pt.quantile_target(*map(torch.as_tensor, args))
        out_j = jx.quantile_target(*args)
    elif name == "double_dqn":
        q_online, q_target = f32(rng.normal(size=(B, 3))), f32(rng.normal(size=(B, 3)))
        args = (q_online, q_target, rewards, dones, discounts)
        out_t = pt.double_q_target(*map(torch.as_tensor, args))
        out_j = jx.double_q_target(*args)
    else:
        next_q = f32(rng.normal(size=(B, 3)) * 5)
        args = (next_q, rewards, dones, discounts)
        out_t = pt.max_q_target(*map(torch.as_tensor, args))
        out_j = jx.max_q_target(*args)
    np.testing.assert_allclose(out_t.numpy(), np.asarray(out_j), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("name", PAIRS)
def test_n_step_transition_is_the_same_in_both_twins(name):
    pt, jx = twins(name)
    o = [np.full(3, k, dtype=np.float32) for k in range(4)]
    window = [(o[0], 1, 0.5, o[1], False), (o[1], 0, -1.0, o[2], False), (o[2], 2, 2.0, o[3], True)]
    a, b = pt.n_step_transition(window, 0.97), jx.n_step_transition(window, 0.97)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
