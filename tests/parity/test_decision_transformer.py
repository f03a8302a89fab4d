"""Tier 2 for Decision Transformer: on identical inputs (windows with left padding), the twins'
returns-to-go, windows, interleaved tokens, attention masks, masked action loss and its gradient
agree within 1e-5; and the whole transformer, with the torch weights copied into the flax pytree,
gives the same actions and the same loss gradients for every parameter within 1e-5."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-5


@pytest.fixture(scope="module")
def twins():
    return load_script("algos/decision_transformer_torch.py"), load_script(
        "algos/decision_transformer_jax.py"
    )


def make_batch(seed, B=16, K=6, obs_dim=3, action_dim=2):
    """Random windows of a random dataset, built by the scripts' own gather_windows (left padding)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, size=20)
    ends = np.cumsum(lengths)
    bounds = list(zip((ends - lengths).tolist(), ends.tolist()))
    N = int(ends[-1])
    arrays = {
        "returns_to_go": rng.normal(size=(N, 1)).astype(np.float32),
        "states": rng.normal(size=(N, obs_dim)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(N, action_dim)).astype(np.float32),
    }
    traj_start = np.concatenate([np.full(e - s, s) for s, e in bounds])
    traj_end = np.concatenate([np.full(e - s, e) for s, e in bounds])
    firsts = rng.integers(0, N, size=B)
    rewards = rng.normal(size=N).astype(np.float32)
    return arrays, bounds, rewards, traj_start[firsts], traj_end[firsts], firsts, K


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_data_functions_agree(twins, seed):
    pt, jx = twins
    arrays, bounds, rewards, starts, ends, firsts, K = make_batch(seed)
    np.testing.assert_array_equal(pt.returns_to_go(rewards, bounds), jx.returns_to_go(rewards, bounds))
    a, b = (
        pt.gather_windows(arrays, starts, ends, firsts, K),
        jx.gather_windows(arrays, starts, ends, firsts, K),
    )
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert (a["mask"] == 0).any(), "the batch has left padding"
    for best in (-1000.0, -400.0, -254.0, 0.0, 2.0):
        assert pt.primary_target((-150.0, -400.0, -800.0), best) == jx.primary_target(
            (-150.0, -400.0, -800.0), best
        )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tokens_mask_and_loss_agree(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    B, K, D, A = 8, 5, 4, 3
    r, s, a = (rng.normal(size=(B, K, D)).astype(np.float32) for _ in range(3))
    mask = (np.arange(K)[None] >= rng.integers(0, K, size=B)[:, None]).astype(np.float32)
    np.testing.assert_allclose(
        pt.interleave_tokens(*map(torch.as_tensor, (r, s, a))).numpy(),
        np.asarray(jx.interleave_tokens(r, s, a)),
        atol=TOL,
    )
    np.testing.assert_array_equal(
        pt.attention_allowed(torch.as_tensor(mask)).numpy(), np.asarray(jx.attention_allowed(mask))
    )
    pred, act = rng.normal(size=(B, K, A)).astype(np.float32), rng.normal(size=(B, K, A)).astype(np.float32)
    p = torch.tensor(pred, requires_grad=True)
    loss_t = pt.dt_action_loss(p, torch.as_tensor(act), torch.as_tensor(mask))
    loss_t.backward()
    loss_j, g = jax.value_and_grad(jx.dt_action_loss)(pred, act, mask)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(p.grad.numpy(), np.asarray(g), atol=TOL)


def torch_to_flax(model):
    """The torch parameters as the flax pytree: Linear weights transposed into kernels, LayerNorm
    weights as scales, the timestep table as an embedding; "h.0.qkv" becomes "h_0/qkv"."""
    tree = {}
    for module_name, module in model.named_modules():
        for param_name, p in module.named_parameters(recurse=False):
            w = p.detach().numpy()
            if isinstance(module, torch.nn.Linear) and param_name == "weight":
                leaf, w = "kernel", w.T
            elif isinstance(module, torch.nn.LayerNorm) and param_name == "weight":
                leaf = "scale"
            elif isinstance(module, torch.nn.Embedding):
                leaf = "embedding"
            else:
                leaf = param_name
            parts = module_name.split(".")
            path = [f"h_{parts[1]}", *parts[2:]] if parts[0] == "h" else parts
            node = tree
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = jnp.asarray(w)
    return {"params": tree}


@pytest.mark.parametrize("seed", [0, 1])
def test_transformer_agrees_on_the_same_weights(twins, seed):
    pt, jx = twins
    torch.manual_seed(seed)
    obs_dim, action_dim, embed_dim, n_layer, n_head, max_t = 3, 2, 32, 2, 2, 40
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    t_model = pt.DecisionTransformer(obs_dim, action_dim, embed_dim, n_layer, n_head, max_t, scale, bias)
    with torch.no_grad():  # away from N(0, 0.02^2) and zero biases, so that every path matters
        for p in t_model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    j_model = jx.DecisionTransformer(
        obs_dim,
        action_dim,
        embed_dim,
        n_layer,
        n_head,
        max_t,
        tuple(map(float, scale)),
        tuple(map(float, bias)),
    )
    params = torch_to_flax(t_model)
    arrays, _, _, starts, ends, firsts, K = make_batch(seed, obs_dim=obs_dim, action_dim=action_dim)
    b = pt.gather_windows(arrays, starts, ends, firsts, K)
    # the flax tree has exactly the torch model's parameters, shape for shape
    b0 = {k: v[:1] for k, v in b.items()}
    shapes = jax.eval_shape(
        j_model.init,
        jax.random.PRNGKey(0),
        b0["returns_to_go"],
        b0["states"],
        b0["actions"],
        b0["timesteps"],
        b0["mask"],
    )
    assert jax.tree.structure(shapes) == jax.tree.structure(params)
    assert all(x.shape == y.shape for x, y in zip(jax.tree.leaves(shapes), jax.tree.leaves(params)))

    tb = {k: torch.as_tensor(v) for k, v in b.items()}
    out_t = t_model(tb["returns_to_go"], tb["states"], tb["actions"], tb["timesteps"], tb["mask"])
    loss_t = pt.dt_action_loss(out_t, tb["actions"], tb["mask"])
    loss_t.backward()

    def loss_fn(params):
        out = j_model.apply(params, b["returns_to_go"], b["states"], b["actions"], b["timesteps"], b["mask"])
        return jx.dt_action_loss(out, b["actions"], b["mask"]), out

    (loss_j, out_j), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    real = b["mask"] > 0  # padding positions' outputs are unused (and finite)
    np.testing.assert_allclose(out_t.detach().numpy()[real], np.asarray(out_j)[real], atol=TOL, rtol=TOL)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    t_grads = torch_to_flax(type("G", (), {"named_modules": lambda self: _grad_modules(t_model)})())
    for (path, g_t), g_j in zip(jax.tree_util.tree_leaves_with_path(t_grads), jax.tree.leaves(grads)):
        np.testing.assert_allclose(np.asarray(g_t), np.asarray(g_j), atol=TOL, rtol=TOL, err_msg=str(path))


def _grad_modules(model):
    """named_modules() of a copy of `model` whose parameters hold the gradients (for torch_to_flax)."""
    import copy

    clone = copy.deepcopy(model)
    with torch.no_grad():
        for p, q in zip(clone.parameters(), model.parameters()):
            p.copy_(q.grad)
    return clone.named_modules()
