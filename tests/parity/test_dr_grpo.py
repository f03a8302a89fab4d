"""Tier 2 for Dr. GRPO: the twins' group_advantages, k3_kl, aggregate and dr_grpo_loss (value and
gradient, both loss types) agree within 1e-4 on identical random inputs, and the whole chain -- one
checkpoint, one batch of prompts and sampled-looking completions, token log-probs, Dr. GRPO loss --
agrees too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, prompt_completion_tokens, tiny_policy_and_reference

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.fixture(params=[0, 1, 2])
def batch(request):
    rng = np.random.default_rng(request.param)
    B, T = 32, 9
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    mask = np.zeros((B, T), dtype=np.float32)
    mask[:, 5:] = 1.0
    mask[rng.random(B) < 0.3, 7:] = 0.0  # early <eos>: padding
    return {
        "rewards": f32(rng.random((8, 4)) < 0.4),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "old_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "ref_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "advantages": f32(rng.normal(size=B)),
        "per_token": f32(rng.normal(size=(B, T))),
        "mask": mask,
    }


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo"])
def test_aggregate_and_gradient_parity(twins, batch, loss_type):
    pt, jx = twins
    x = torch.tensor(batch["per_token"], requires_grad=True)
    out_t = pt.aggregate(x, torch.as_tensor(batch["mask"]), 4.0, loss_type)
    out_t.backward()
    f = lambda x: jx.aggregate(x, batch["mask"], 4.0, loss_type)
    assert abs(out_t.item() - float(f(batch["per_token"]))) < TOL
    np.testing.assert_allclose(
        x.grad.numpy(), np.asarray(jax.grad(f)(batch["per_token"])), atol=TOL, rtol=TOL
    )


@pytest.mark.parametrize("clip_coef,kl_coef", [(0.2, 0.0), (0.1, 0.04), (0.3, 0.5)])
@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo"])
def test_dr_grpo_loss_and_gradient_parity(twins, batch, clip_coef, kl_coef, loss_type):
    pt, jx = twins
    others = [batch[k] for k in ("old_logp", "ref_logp", "advantages", "mask")]
    lp = torch.tensor(batch["logp"], requires_grad=True)
    out_t = pt.dr_grpo_loss(lp, *map(torch.as_tensor, others), clip_coef, kl_coef, 4.0, loss_type)
    out_t[0].backward()
    f = lambda lp: jx.dr_grpo_loss(lp, *others, clip_coef, kl_coef, 4.0, loss_type)
    out_j = f(batch["logp"])
    g_j = jax.grad(lambda lp: f(lp)[0])(batch["logp"])
    for a, b in zip(out_t, out_j):
        assert abs(a.item() - float(b)) < TOL
    np.testing.assert_allclose(lp.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_dr_grpo_loss_on_one_checkpoint_and_batch(twins, tmp_path):
    """Same weights, same tokens: token log-probs and the Dr. GRPO loss (and its gradient with
    respect to the per-token log-probs) agree between the twins."""
    pt, jx = twins
    lm_t, lm_j = tiny_policy_and_reference(tmp_path)  # policy.npz and ref.npz
    rng = np.random.default_rng(0)
    pairs = tasks.make_splits(2, 16)[1].repeat(4, axis=0)
    completions = rng.integers(2, 12, size=(64, 4))
    completions[::5, 2] = tasks.EOS
    completions[::7, 0] = tasks.EOS  # some 1-token completions
    inputs, labels, mask, comp_mask = prompt_completion_tokens(pairs, completions)
    rewards = tasks.verify(pairs, completions, 2).reshape(16, 4)
    rewards[::2, 0] = 1.0  # make some groups non-uniform
    max_len = float(tasks.completion_len(2))

    def chain_torch():
        policy, ref = (
            lm_t.load_checkpoint(tmp_path / "policy.npz"),
            lm_t.load_checkpoint(tmp_path / "ref.npz"),
        )
        x, y = torch.as_tensor(inputs), torch.as_tensor(labels)
        logp = lm_t.token_logps(policy(x), y, 0.8).detach().requires_grad_(True)
        ref_logp = lm_t.token_logps(ref(x), y, 0.8).detach()
        adv = pt.group_advantages(torch.as_tensor(rewards)).reshape(-1)
        loss, kl, clip = pt.dr_grpo_loss(
            logp, logp.detach() + 0.1, ref_logp, adv, torch.as_tensor(mask), 0.2, 0.04, max_len
        )
        loss.backward()
        return logp.detach().numpy(), loss.item(), kl.item(), logp.grad.numpy()

    def chain_jax():
        (model, params), (_, ref_params) = (
            lm_j.load_checkpoint(tmp_path / "policy.npz"),
            lm_j.load_checkpoint(tmp_path / "ref.npz"),
        )
        logp = lm_j.token_logps(model.apply(params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        ref_logp = lm_j.token_logps(model.apply(ref_params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        adv = jx.group_advantages(jnp.asarray(rewards)).reshape(-1)
        f = lambda lp: jx.dr_grpo_loss(lp, logp + 0.1, ref_logp, adv, jnp.asarray(mask), 0.2, 0.04, max_len)
        loss, kl, _ = f(logp)
        return np.asarray(logp), float(loss), float(kl), np.asarray(jax.grad(lambda lp: f(lp)[0])(logp))

    for a, b in zip(chain_torch(), chain_jax()):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=TOL)
