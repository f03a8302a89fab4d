"""Tier 2 for RLHF with PPO: the twins' per_token_rewards, compute_gae, whiten_masked,
ppo_policy_loss and clipped_value_loss (values and gradients) and adaptive_kl_update agree within
1e-4 on identical random inputs, and the critic initialised from one reward-model checkpoint gives
the same per-token values in both."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, T = 32, 4
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    completions = rng.integers(2, 12, size=(B, T))
    completions[rng.random(B) < 0.5, 2] = tasks.EOS
    completions[rng.random(B) < 0.3, 1] = tasks.EOS
    return {
        "logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "old_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "ref_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "scores": f32(rng.normal(size=B)),
        "values": f32(rng.normal(size=(B, T))),
        "old_values": f32(rng.normal(size=(B, T))),
        "returns": f32(rng.normal(size=(B, T))),
        "advantages": f32(rng.normal(size=(B, T))),
        "mask": tasks.completion_mask(completions),
    }


def close(a, b):
    np.testing.assert_allclose(
        np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=TOL, rtol=TOL
    )


@pytest.mark.parametrize("kl_coef", [0.0, 0.05, 0.5])
def test_per_token_rewards_parity(twins, batch, kl_coef):
    pt, jx = twins
    args = [batch[k] for k in ("old_logp", "ref_logp", "scores", "mask")]
    for a, b in zip(
        pt.per_token_rewards(*map(torch.as_tensor, args), kl_coef),
        jx.per_token_rewards(*map(jnp.asarray, args), kl_coef),
    ):
        close(a.numpy(), b)


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0)])
def test_gae_and_whitening_parity(twins, batch, gamma, lam):
    pt, jx = twins
    args = [batch[k] for k in ("advantages", "values", "mask")]  # advantages stand in for rewards here
    out_t = pt.compute_gae(*map(torch.as_tensor, args), gamma, lam)
    out_j = jx.compute_gae(*map(jnp.asarray, args), gamma, lam)
    for a, b in zip(out_t, out_j):
        close(a.numpy(), b)
    close(
        pt.whiten_masked(out_t[0], torch.as_tensor(batch["mask"])).numpy(),
        jx.whiten_masked(out_j[0], jnp.asarray(batch["mask"])),
    )


@pytest.mark.parametrize("clip_coef", [0.1, 0.2, 0.3])
def test_policy_loss_and_gradient_parity(twins, batch, clip_coef):
    pt, jx = twins
    others = [batch[k] for k in ("old_logp", "advantages", "mask")]
    lp = torch.tensor(batch["logp"], requires_grad=True)
    out_t = pt.ppo_policy_loss(lp, *map(torch.as_tensor, others), clip_coef)
    out_t[0].backward()
    f = lambda lp: jx.ppo_policy_loss(lp, *others, clip_coef)
    for a, b in zip(out_t, f(batch["logp"])):
        assert abs(a.item() - float(b)) < TOL
    close(lp.grad.numpy(), jax.grad(lambda lp: f(lp)[0])(batch["logp"]))


@pytest.mark.parametrize("clip_coef", [0.1, 0.2, 1.0])
def test_value_loss_and_gradient_parity(twins, batch, clip_coef):
    pt, jx = twins
    others = [batch[k] for k in ("old_values", "returns", "mask")]
    v = torch.tensor(batch["values"], requires_grad=True)
    out_t = pt.clipped_value_loss(v, *map(torch.as_tensor, others), clip_coef)
    out_t[0].backward()
    f = lambda v: jx.clipped_value_loss(v, *others, clip_coef)
    for a, b in zip(out_t, f(batch["values"])):
        assert abs(a.item() - float(b)) < TOL
    close(v.grad.numpy(), jax.grad(lambda v: f(v)[0])(batch["values"]))


@pytest.mark.parametrize("kl", [0.0, 0.9, 1.0, 1.1, 5.0])
def test_adaptive_kl_update_parity(twins, kl):
    pt, jx = twins
    assert pt.adaptive_kl_update(0.05, kl, 1.0, 10000, 256) == jx.adaptive_kl_update(
        0.05, kl, 1.0, 10000, 256
    )


def test_critic_values_on_one_reward_model_checkpoint(twins, tmp_path):
    """A reward model saved by the PyTorch twin, loaded by both: the critics built from it give the
    same value at every position, and the same rollout chain (log-probs, rewards, GAE) follows."""
    pt, jx = twins
    lm_t = load_script("llm/tinylm_torch.py")
    rm_t, rm_j = load_script("llm/reward_model_torch.py"), load_script("llm/reward_model_jax.py")
    torch.manual_seed(0)
    rm = rm_t.RewardModel(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4))
    with torch.no_grad():
        rm.head.weight.normal_(std=0.1)
        rm.head.bias.fill_(0.3)
    rm_t.save_reward_model(rm, tmp_path / "rm.npz")
    rng = np.random.default_rng(0)
    completions = rng.integers(2, 12, size=(16, 4))
    completions[::3, 2] = tasks.EOS
    full = np.concatenate([tasks.encode_prompts(tasks.make_splits(2, 16)[1], 2), completions], axis=1)
    mask = tasks.completion_mask(completions)
    P = tasks.prompt_len(2)

    with torch.no_grad():
        critic_t = pt.Critic(rm_t.load_reward_model(tmp_path / "rm.npz"))
        v_t = critic_t(torch.as_tensor(full[:, :-1]))[:, P - 1 :].numpy()
    net, params = rm_j.load_reward_model(tmp_path / "rm.npz")
    v_j = np.asarray(jx.Critic(net.config).apply(params, jnp.asarray(full[:, :-1])))[:, P - 1 :]
    close(v_t, v_j)
    scores = rng.normal(size=16).astype(np.float32)
    logp = np.log(rng.uniform(0.1, 1.0, (16, 4))).astype(np.float32)
    r_t, _ = pt.per_token_rewards(
        torch.as_tensor(logp), torch.zeros(16, 4), torch.as_tensor(scores), torch.as_tensor(mask), 0.1
    )
    r_j, _ = jx.per_token_rewards(
        jnp.asarray(logp), jnp.zeros((16, 4)), jnp.asarray(scores), jnp.asarray(mask), 0.1
    )
    for a, b in zip(
        pt.compute_gae(r_t, torch.as_tensor(v_t), torch.as_tensor(mask), 1.0, 0.95),
        jx.compute_gae(r_j, jnp.asarray(v_j), jnp.asarray(mask), 1.0, 0.95),
    ):
        close(a.numpy(), b)
