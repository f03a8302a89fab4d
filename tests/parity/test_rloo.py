"""Tier 2 for RLOO: the twins' rloo_advantages, sequence_kl and rloo_loss (value, clip fraction and
gradient) agree within 1e-4 on identical random inputs, and the whole chain -- one checkpoint, one
batch of prompts and sampled-looking completions, token log-probs, the KL folded into the reward,
leave-one-out advantages, RLOO loss -- agrees too."""

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
    logp = np.log(rng.uniform(0.05, 1.0, (B, T)))
    return {
        "rewards": f32(rng.random((8, 4)) < 0.4) - f32(0.05 * rng.random((8, 4))),  # 0/1 minus a KL term
        "logp": f32(logp),
        # the sampling policy a little away from the current one: sequence ratios around 1, some clipped
        "old_logp": f32(logp + 0.1 * rng.normal(size=(B, T))),
        "ref_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "advantages": f32(rng.normal(size=B)),
        "mask": mask,
    }


@pytest.mark.parametrize("k", [2, 4, 8])
def test_rloo_advantages_parity(twins, k):
    pt, jx = twins
    r = np.random.default_rng(k).normal(size=(16, k)).astype(np.float32)
    a_t = pt.rloo_advantages(torch.as_tensor(r)).numpy()
    a_j = np.asarray(jx.rloo_advantages(jnp.asarray(r)))
    np.testing.assert_allclose(a_t, a_j, atol=TOL, rtol=TOL)


def test_rloo_advantages_parity_on_groups(twins, batch):
    pt, jx = twins
    a_t = pt.rloo_advantages(torch.as_tensor(batch["rewards"])).numpy()
    a_j = np.asarray(jx.rloo_advantages(jnp.asarray(batch["rewards"])))
    np.testing.assert_allclose(a_t, a_j, atol=TOL, rtol=TOL)


def test_sequence_kl_parity(twins, batch):
    pt, jx = twins
    args = [batch[k] for k in ("logp", "ref_logp", "mask")]
    k_t = pt.sequence_kl(*map(torch.as_tensor, args)).numpy()
    k_j = np.asarray(jx.sequence_kl(*map(jnp.asarray, args)))
    np.testing.assert_allclose(k_t, k_j, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("clip_coef", [0.05, 0.2, 10.0])
def test_rloo_loss_and_gradient_parity(twins, batch, clip_coef):
    pt, jx = twins
    others = [batch[k] for k in ("old_logp", "advantages", "mask")]
    lp = torch.tensor(batch["logp"], requires_grad=True)
    out_t = pt.rloo_loss(lp, *map(torch.as_tensor, others), clip_coef)
    out_t[0].backward()
    f = lambda lp: jx.rloo_loss(lp, *others, clip_coef)
    out_j = f(batch["logp"])
    g_j = jax.grad(lambda lp: f(lp)[0])(batch["logp"])
    for a, b in zip(out_t, out_j):
        assert abs(a.item() - float(b)) < TOL
    np.testing.assert_allclose(lp.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
    if clip_coef == 0.05:
        assert out_t[1].item() > 0, "some completions are clipped: the clipped branch is compared too"


def test_rloo_loss_on_one_checkpoint_and_batch(twins, tmp_path):
    """Same weights, same tokens: token log-probs, the KL-shaped leave-one-out advantages and the
    RLOO loss (and its gradient with respect to the per-token log-probs) agree between the twins."""
    pt, jx = twins
    lm_t, lm_j = tiny_policy_and_reference(tmp_path)  # policy.npz and ref.npz
    rng = np.random.default_rng(0)
    pairs = tasks.make_splits(2, 16)[1].repeat(4, axis=0)
    completions = rng.integers(2, 12, size=(64, 4))
    completions[::5, 2] = tasks.EOS
    inputs, labels, mask, comp_mask = prompt_completion_tokens(pairs, completions)
    rewards = tasks.verify(pairs, completions, 2)
    rewards[::8] = 1.0  # make some groups non-uniform
    beta = 0.05

    def chain_torch():
        policy, ref = (
            lm_t.load_checkpoint(tmp_path / "policy.npz"),
            lm_t.load_checkpoint(tmp_path / "ref.npz"),
        )
        x, y, msk = torch.as_tensor(inputs), torch.as_tensor(labels), torch.as_tensor(mask)
        logp = lm_t.token_logps(policy(x), y, 0.8).detach().requires_grad_(True)
        ref_logp = lm_t.token_logps(ref(x), y, 0.8).detach()
        seq_kl = pt.sequence_kl(logp.detach(), ref_logp, msk)
        adv = pt.rloo_advantages((torch.as_tensor(rewards) - beta * seq_kl).reshape(16, 4)).reshape(-1)
        loss, clip = pt.rloo_loss(logp, logp.detach() + 0.02, adv, msk, 0.2)
        loss.backward()
        return logp.detach().numpy(), seq_kl.numpy(), adv.numpy(), loss.item(), logp.grad.numpy()

    def chain_jax():
        (model, params), (_, ref_params) = (
            lm_j.load_checkpoint(tmp_path / "policy.npz"),
            lm_j.load_checkpoint(tmp_path / "ref.npz"),
        )
        msk = jnp.asarray(mask)
        logp = lm_j.token_logps(model.apply(params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        ref_logp = lm_j.token_logps(model.apply(ref_params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        seq_kl = jx.sequence_kl(logp, ref_logp, msk)
        adv = jx.rloo_advantages((jnp.asarray(rewards) - beta * seq_kl).reshape(16, 4)).reshape(-1)
        f = lambda lp: jx.rloo_loss(lp, logp + 0.02, adv, msk, 0.2)
        loss, _ = f(logp)
        return (
            np.asarray(logp),
            np.asarray(seq_kl),
            np.asarray(adv),
            float(loss),
            np.asarray(jax.grad(lambda lp: f(lp)[0])(logp)),
        )

    for a, b in zip(chain_torch(), chain_jax()):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=TOL)
