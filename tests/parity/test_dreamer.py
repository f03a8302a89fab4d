"""Tier 2 for Dreamer: on identical inputs the twins' Gaussian head, GRU update, Gaussian KL, KL
balance (value and the gradients of all four statistics, above and below the free nats), world-model
loss, tanh-Gaussian sample and log-density, lambda-returns with episode ends (discount 0), discount
weights, actor and critic losses (with their gradients), an imagined rollout through the same stub
dynamics and policy, the RSSM filter (`observe`) and imagination on the same weights, the actor on
the same weights (mean, bounded log std, the squashed sample and log-prob for the same noise, the
deterministic action, gradients in every weight), and the MLP heads (torch `mlp`, JAX `MLP`, as the
value, reward and decoder heads, checked against the trees of `make_networks`) on the same weights,
with the critic loss gradients, agree within 1e-5."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import torch_dense

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    H, B, S = 5, 12, 4
    discounts = f32(np.where(rng.uniform(size=(H, B)) < 0.2, 0.0, 0.99))  # episode ends: discount 0
    return {
        "raw": f32(rng.normal(size=(B, 2 * S))),
        "parts": f32(rng.normal(size=(B, 3 * S))),
        "h": f32(rng.normal(size=(B, S))),
        "m1": f32(rng.normal(size=(B, S))),
        "s1": f32(rng.uniform(0.1, 2.0, size=(B, S))),
        "m2": f32(rng.normal(size=(B, S))),
        "s2": f32(rng.uniform(0.1, 2.0, size=(B, S))),
        "obs_pred": f32(rng.normal(size=(B, 7, 3))),
        "obs": f32(rng.normal(size=(B, 7, 3))),
        "reward_pred": f32(rng.normal(size=(B, 7))),
        "rewards": f32(rng.normal(size=(B, 7))),
        "reward_mask": f32(rng.uniform(size=(B, 7)) < 0.8),
        "mean": f32(rng.normal(size=(B, 2))),
        "log_std": f32(rng.uniform(-3, 1, size=(B, 2))),
        "noise": f32(rng.normal(size=(B, 2))),
        "img_rewards": f32(rng.normal(size=(H, B))),
        "img_values": f32(rng.normal(size=(H, B))),
        "discounts": discounts,
        "bootstrap": f32(rng.normal(size=B)),
        "log_probs": f32(rng.normal(size=(H, B))),
        "weights": f32(rng.uniform(size=(H, B))),
    }


def T(x):
    return torch.as_tensor(x)


def torch_grads(f, *arrays):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = f(*leaves)
    out.backward()
    return out.detach().numpy(), [
        np.zeros_like(a) if leaf.grad is None else leaf.grad.numpy() for a, leaf in zip(arrays, leaves)
    ]  # no gradient path: zeros, as JAX


def jax_grads(f, *arrays):
    out, grads = jax.value_and_grad(f, argnums=tuple(range(len(arrays))))(*arrays)
    return np.asarray(out), [np.asarray(g) for g in grads]


def assert_same(a, b):
    np.testing.assert_allclose(a, b, atol=TOL, rtol=TOL)


def test_gaussian_head_and_gru_parity(twins, data):
    pt, jx = twins
    for a, b in zip(pt.gaussian_stats(T(data["raw"]), 0.1), jx.gaussian_stats(data["raw"], 0.1)):
        assert_same(a.numpy(), np.asarray(b))
    vt, gt = torch_grads(lambda p, h: (pt.gru_update(p, h) ** 2).sum(), data["parts"], data["h"])
    vj, gj = jax_grads(lambda p, h: (jx.gru_update(p, h) ** 2).sum(), data["parts"], data["h"])
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)


@pytest.mark.parametrize("free_nats", [0.0, 1.0, 100.0])
def test_kl_and_kl_balance_parity_with_gradients(twins, data, free_nats):
    pt, jx = twins
    names = ("m1", "s1", "m2", "s2")
    assert_same(
        pt.gaussian_kl(*(T(data[k]) for k in names)).numpy(),
        np.asarray(jx.gaussian_kl(*(data[k] for k in names))),
    )
    vt, gt = torch_grads(lambda *a: pt.kl_balance_loss(*a, 0.8, free_nats)[0], *(data[k] for k in names))
    vj, gj = jax_grads(lambda *a: jx.kl_balance_loss(*a, 0.8, free_nats)[0], *(data[k] for k in names))
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)
    kl_t = pt.kl_balance_loss(*(T(data[k]) for k in names), 0.8, free_nats)[1]
    kl_j = jx.kl_balance_loss(*(data[k] for k in names), 0.8, free_nats)[1]
    assert_same(kl_t.numpy(), np.asarray(kl_j))


def test_world_model_loss_parity_with_gradients(twins, data):
    pt, jx = twins
    args = ("obs_pred", "reward_pred")
    f_t = lambda op, rp, kl: pt.world_model_loss(
        op, T(data["obs"]), rp, T(data["rewards"]), T(data["reward_mask"]), kl, 0.7
    )[0]
    f_j = lambda op, rp, kl: jx.world_model_loss(
        op, data["obs"], rp, data["rewards"], data["reward_mask"], kl, 0.7
    )[0]
    kl = np.float32(1.3)
    vt, gt = torch_grads(f_t, *(data[k] for k in args), np.asarray(kl))
    vj, gj = jax_grads(f_j, *(data[k] for k in args), kl)
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)
    parts_t = pt.world_model_loss(
        T(data["obs_pred"]),
        T(data["obs"]),
        T(data["reward_pred"]),
        T(data["rewards"]),
        T(data["reward_mask"]),
        T(kl),
        0.7,
    )
    parts_j = jx.world_model_loss(
        data["obs_pred"], data["obs"], data["reward_pred"], data["rewards"], data["reward_mask"], kl, 0.7
    )
    for a, b in zip(parts_t, parts_j):
        assert_same(a.numpy(), np.asarray(b))


def test_squashed_sample_parity_with_gradients(twins, data):
    pt, jx = twins
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.1], np.float32)
    assert_same(
        pt.tanh_log_det_jacobian(T(data["mean"])).numpy(), np.asarray(jx.tanh_log_det_jacobian(data["mean"]))
    )
    f_t = lambda m, s: sum(x.sum() for x in pt.sample_squashed(m, s, T(data["noise"]), T(scale), T(bias)))
    f_j = lambda m, s: sum(x.sum() for x in jx.sample_squashed(m, s, data["noise"], scale, bias))
    vt, gt = torch_grads(f_t, data["mean"], data["log_std"])
    vj, gj = jax_grads(f_j, data["mean"], data["log_std"])
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)


def test_lambda_returns_weights_and_losses_parity_with_gradients(twins, data):
    pt, jx = twins
    names = ("img_rewards", "img_values", "bootstrap")
    for lam in (0.0, 0.95, 1.0):
        f_t = lambda r, v, b: (
            pt.lambda_returns(r, v, T(data["discounts"]), b, lam) * T(data["weights"])
        ).sum()
        f_j = lambda r, v, b: (jx.lambda_returns(r, v, data["discounts"], b, lam) * data["weights"]).sum()
        vt, gt = torch_grads(f_t, *(data[k] for k in names))
        vj, gj = jax_grads(f_j, *(data[k] for k in names))
        assert_same(vt, vj)
        for a, b in zip(gt, gj):
            assert_same(a, b)
    assert_same(
        pt.discount_weights(T(data["discounts"])).numpy(), np.asarray(jx.discount_weights(data["discounts"]))
    )
    f_t = lambda g, lp: pt.actor_loss_fn(g, lp, T(data["weights"]), 0.01)
    f_j = lambda g, lp: jx.actor_loss_fn(g, lp, data["weights"], 0.01)
    vt, gt = torch_grads(f_t, data["img_rewards"], data["log_probs"])
    vj, gj = jax_grads(f_j, data["img_rewards"], data["log_probs"])
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)
    f_t = lambda v, g: pt.critic_loss_fn(v, g, T(data["weights"]))
    f_j = lambda v, g: jx.critic_loss_fn(v, g, data["weights"])
    vt, gt = torch_grads(f_t, data["img_values"], data["img_rewards"])
    vj, gj = jax_grads(f_j, data["img_values"], data["img_rewards"])
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)
    np.testing.assert_array_equal(gt[1], 0.0)  # the targets are held fixed
    np.testing.assert_array_equal(gj[1], 0.0)


def test_imagine_parity_with_gradients(twins):
    """The same stub dynamics (tanh of a fixed linear map) and stub policy in both twins; the
    gradient of the summed features and log-probs with respect to the policy's weight."""
    pt, jx = twins
    rng = np.random.default_rng(3)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    W, P = f32(rng.normal(size=(6, 3)) * 0.5), f32(rng.normal(size=(5, 1)) * 0.5)
    h, z = f32(rng.normal(size=(8, 3))), f32(rng.normal(size=(8, 2)))
    noise, a_noise = f32(rng.normal(size=(4, 8, 2))), f32(rng.normal(size=(4, 8, 1)))

    def run(m, lib, w, p, h, z, noise, a_noise):
        img_step = lambda h, z, a, eps: (lib.tanh(lib.concatenate([h, z, a], -1) @ w), z * 0.9 + eps)
        policy = lambda feat, eps: (lib.tanh(feat @ p) + 0.1 * eps, -((feat @ p)[..., 0] ** 2))
        feats, log_probs = m.imagine(img_step, policy, h, z, noise, a_noise)
        return (feats**2).sum() + log_probs.sum()

    class TorchLib:
        tanh, concatenate = staticmethod(torch.tanh), staticmethod(torch.cat)

    vt, gt = torch_grads(lambda w, p: run(pt, TorchLib, w, p, T(h), T(z), T(noise), T(a_noise)), W, P)
    vj, gj = jax_grads(lambda w, p: run(jx, jnp, w, p, h, z, noise, a_noise), W, P)
    assert_same(vt, vj)
    for a, b in zip(gt, gj):
        assert_same(a, b)


def torch_to_flax(t_model):
    """The torch world model's weights as the JAX twin's parameter pytree (kernels transposed)."""
    dense = torch_dense
    mlp = lambda seq: {f"Dense_{i}": dense(seq[2 * i]) for i in range(3)}
    return {
        "params": {
            "encoder_1": dense(t_model.encoder[0]),
            "encoder_2": dense(t_model.encoder[2]),
            "img_in": dense(t_model.img_in),
            "gru": dense(t_model.gru),
            "prior_hidden": dense(t_model.prior_hidden),
            "prior_out": dense(t_model.prior_out),
            "post_hidden": dense(t_model.post_hidden),
            "post_out": dense(t_model.post_out),
            "decoder": mlp(t_model.decoder),
            "reward": mlp(t_model.reward),
        }
    }


def test_rssm_on_the_same_weights(twins):
    """torch weights copied into the JAX pytree: the same filtered states and statistics (observe),
    the same decoder and reward outputs, the same imagined features for the same noise."""
    pt, jx = twins
    torch.manual_seed(0)
    obs_dim, action_dim, D, S, Hd, B, L = 3, 1, 8, 4, 16, 5, 6
    t_model = pt.WorldModel(obs_dim, action_dim, D, S, Hd)
    j_model = jx.WorldModel(obs_dim, D, S, Hd)
    params = torch_to_flax(t_model)
    template = j_model.init(
        jax.random.PRNGKey(0),
        jnp.zeros((1, obs_dim)),
        jnp.zeros((1, D)),
        jnp.zeros((1, S)),
        jnp.zeros((1, action_dim)),
    )
    assert jax.tree_util.tree_structure(template) == jax.tree_util.tree_structure(params)
    rng = np.random.default_rng(0)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    obs, prev_actions = (
        f32(rng.normal(size=(B, L, obs_dim))),
        f32(rng.uniform(-2, 2, size=(B, L, action_dim))),
    )
    noise = f32(rng.normal(size=(L, B, S)))
    with torch.no_grad():
        st_t = pt.observe(t_model, T(obs), T(prev_actions), T(noise))
    st_j = jx.observe(j_model, params, obs, prev_actions, noise)
    for k in st_t:
        assert_same(st_t[k].numpy(), np.asarray(st_j[k]))
    feat = np.concatenate([st_t["h"].numpy(), st_t["z"].numpy()], -1)
    with torch.no_grad():
        assert_same(
            t_model.decoder(T(feat)).numpy(),
            np.asarray(j_model.apply(params, feat, method=jx.WorldModel.decode)),
        )
        assert_same(
            t_model.reward(T(feat)).squeeze(-1).numpy(),
            np.asarray(j_model.apply(params, feat, method=jx.WorldModel.reward_head)),
        )
    h0, z0 = st_t["h"].numpy()[-1], st_t["z"].numpy()[-1]
    img_noise, a_noise = f32(rng.normal(size=(3, B, S))), f32(rng.normal(size=(3, B, action_dim)))
    policy_t = lambda feat, eps: (torch.tanh(feat[:, :1]) + 0.1 * eps, feat.sum(-1))
    policy_j = lambda feat, eps: (jnp.tanh(feat[:, :1]) + 0.1 * eps, feat.sum(-1))
    with torch.no_grad():
        feats_t, _ = pt.imagine(t_model.imagine_step, policy_t, T(h0), T(z0), T(img_noise), T(a_noise))
    img_step_j = lambda h, z, a, eps: j_model.apply(params, h, z, a, eps, method=jx.WorldModel.imagine_step)
    feats_j, _ = jx.imagine(img_step_j, policy_j, h0, z0, img_noise, a_noise)
    assert_same(feats_t.numpy(), np.asarray(feats_j))


def actor_to_flax(t_actor):
    """The torch actor's weights as the JAX `Actor`'s pytree: the trunk, then the mean and log-std heads."""
    return {
        "params": {
            "Dense_0": torch_dense(t_actor.trunk[0]),
            "Dense_1": torch_dense(t_actor.trunk[2]),
            "Dense_2": torch_dense(t_actor.mean),
            "Dense_3": torch_dense(t_actor.log_std),
        }
    }


def mlp_to_flax(t_mlp):
    """A torch `mlp` (Linear, ELU, Linear, ELU, Linear) as the JAX `MLP`'s pytree."""
    return {"params": {f"Dense_{i}": torch_dense(t_mlp[2 * i]) for i in range(3)}}


def randomise_biases(net):
    """Nonzero biases (the twins initialise them to zero), so that copying them is tested too."""
    with torch.no_grad():
        for p in net.parameters():
            if p.ndim == 1:
                p.normal_(0.0, 0.3)


def assert_same_tree(template, params):
    assert jax.tree_util.tree_structure(template) == jax.tree_util.tree_structure(params)
    for a, b in zip(jax.tree_util.tree_leaves(template), jax.tree_util.tree_leaves(params)):
        assert a.shape == b.shape


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_actor_on_the_same_weights(twins, seed):
    """torch weights copied into the JAX pytree (the tree of `make_networks`' actor): the same mean
    and log std (within its bounds, both ends reached), the same squashed action and log-prob for the
    same noise, the same deterministic action, the same gradients of the mean squared action plus log-prob in
    every weight and bias."""
    pt, jx = twins
    torch.manual_seed(seed)
    obs_dim, A, D, S, Hd, B = 3, 2, 8, 4, 16, 64
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.1], np.float32)
    t_actor = pt.Actor(D + S, A, Hd, scale, bias)
    randomise_biases(t_actor)
    with torch.no_grad():  # a wide, unbiased log-std head of opposite rows: log stds near each bound
        t_actor.log_std.weight.mul_(8.0)
        t_actor.log_std.weight[1] = -t_actor.log_std.weight[0]
        t_actor.log_std.bias.zero_()
    params = actor_to_flax(t_actor)
    _, j_actor, _, template = jx.make_networks(obs_dim, A, D, S, Hd, jax.random.PRNGKey(0))
    assert_same_tree(template["actor"], params)
    assert (pt.LOG_STD_MIN, pt.LOG_STD_MAX) == (jx.LOG_STD_MIN, jx.LOG_STD_MAX)
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    feat, noise = f32(rng.normal(scale=2.0, size=(B, D + S))), f32(rng.normal(size=(B, A)))
    with torch.no_grad():
        mean_t, log_std_t = t_actor(T(feat))
        det_t = t_actor.deterministic(T(feat))
    mean_j, log_std_j = j_actor.apply(params, feat)
    assert_same(mean_t.numpy(), np.asarray(mean_j))
    assert_same(log_std_t.numpy(), np.asarray(log_std_j))
    for ls in (log_std_t.numpy(), np.asarray(log_std_j)):
        assert ls.min() >= jx.LOG_STD_MIN and ls.max() <= jx.LOG_STD_MAX
    assert log_std_t.min() < jx.LOG_STD_MIN + 1.0 and log_std_t.max() > jx.LOG_STD_MAX - 1.0
    assert_same(det_t.numpy(), np.asarray(jnp.tanh(mean_j) * scale + bias))  # as the JAX twin's evaluate
    action_t, log_prob_t = t_actor.sample(T(feat), T(noise))
    ((action_t**2).sum(-1) + log_prob_t).mean().backward()

    def sample_j(p):  # as the JAX twin's policy_sample
        return jx.sample_squashed(*j_actor.apply(p, feat), noise, scale, bias)

    def objective_j(p):
        action, log_prob = sample_j(p)
        return ((action**2).sum(-1) + log_prob).mean()

    action_j, log_prob_j = sample_j(params)
    assert_same(action_t.detach().numpy(), np.asarray(action_j))
    assert_same(log_prob_t.detach().numpy(), np.asarray(log_prob_j))
    grads = jax.grad(objective_j)(params)["params"]
    for k, layer in enumerate((t_actor.trunk[0], t_actor.trunk[2], t_actor.mean, t_actor.log_std)):
        assert_same(layer.weight.grad.numpy().T, np.asarray(grads[f"Dense_{k}"]["kernel"]))
        assert_same(layer.bias.grad.numpy(), np.asarray(grads[f"Dense_{k}"]["bias"]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mlp_heads_on_the_same_weights(twins, seed):
    """torch `mlp` and JAX `MLP` on the same weights as the value head (`make_networks`' critic, 1
    output), the reward head (1 output) and the decoder (obs_dim outputs), each copied tree checked
    against `make_networks`' own: the same outputs on (H, B, feat) inputs; for the value head also the
    same critic loss and its gradients in every weight and bias."""
    pt, jx = twins
    torch.manual_seed(seed)
    obs_dim, A, D, S, Hd, H, B = 3, 1, 8, 4, 16, 5, 12
    _, _, j_critic, template = jx.make_networks(obs_dim, A, D, S, Hd, jax.random.PRNGKey(0))
    heads = {
        "critic": (pt.mlp(D + S, Hd, 1), template["critic"]),
        "reward": (pt.mlp(D + S, Hd, 1), {"params": template["world_model"]["params"]["reward"]}),
        "decoder": (pt.mlp(D + S, Hd, obs_dim), {"params": template["world_model"]["params"]["decoder"]}),
    }
    rng = np.random.default_rng(seed)
    feat = rng.normal(scale=2.0, size=(H, B, D + S)).astype(np.float32)
    for name, (t_net, tree) in heads.items():
        randomise_biases(t_net)
        params = mlp_to_flax(t_net)
        assert_same_tree(tree, params)
        with torch.no_grad():
            out_t = t_net(T(feat)).numpy()
        assert_same(out_t, np.asarray(jx.MLP(Hd, t_net[4].out_features).apply(params, feat)))
    t_critic = heads["critic"][0]
    targets, weights = rng.normal(size=(H, B)).astype(np.float32), rng.uniform(size=(H, B)).astype(np.float32)
    loss_t = pt.critic_loss_fn(t_critic(T(feat)).squeeze(-1), T(targets), T(weights))
    loss_t.backward()
    loss_j, grads = jax.value_and_grad(
        lambda p: jx.critic_loss_fn(j_critic.apply(p, feat).squeeze(-1), targets, weights)
    )(mlp_to_flax(t_critic))
    assert_same(loss_t.detach().numpy(), np.asarray(loss_j))
    for i in range(3):
        assert_same(
            t_critic[2 * i].weight.grad.numpy().T, np.asarray(grads["params"][f"Dense_{i}"]["kernel"])
        )
        assert_same(t_critic[2 * i].bias.grad.numpy(), np.asarray(grads["params"][f"Dense_{i}"]["bias"]))
