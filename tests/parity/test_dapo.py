"""Tier 2 for DAPO: the twins' group_advantages, k3_kl, overlong_penalty, informative_groups,
dynamic_sample, aggregate_loss and dapo_loss (value and gradient) agree within 1e-4 on identical
random inputs, and the whole chain -- one checkpoint, one batch of prompts and sampled-looking
completions of DAPO's length budget, token log-probs, shaped rewards, DAPO loss -- agrees too."""

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
    B, T = 32, 11
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    mask = np.zeros((B, T), dtype=np.float32)
    mask[:, 5:] = 1.0
    mask[rng.random(B) < 0.3, 8:] = 0.0  # early <eos>: padding
    mask[rng.random(B) < 0.1] = 0.0  # a masked-out row (overlong filtering)
    return {
        "rewards": f32(rng.random((8, 4)) < 0.4) - 0.5 * f32(rng.random((8, 4)) < 0.2),
        "lengths": f32(rng.integers(1, 9, size=40)),
        "logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "old_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "ref_logp": f32(np.log(rng.uniform(0.05, 1.0, (B, T)))),
        "advantages": f32(rng.normal(size=B)),
        "mask": mask,
        "seed": request.param,
    }


@pytest.mark.parametrize("max_len,cache", [(6, 2), (8, 4), (8, 1)])
def test_overlong_penalty_parity(twins, batch, max_len, cache):
    pt, jx = twins
    p_t = pt.overlong_penalty(torch.as_tensor(batch["lengths"]), max_len, cache).numpy()
    p_j = np.asarray(jx.overlong_penalty(jnp.asarray(batch["lengths"]), max_len, cache))
    np.testing.assert_allclose(p_t, p_j, atol=TOL, rtol=TOL)


def test_dynamic_sampling_parity(twins, batch):
    """informative_groups and dynamic_sample are numpy in both twins: same sampler, same batch."""
    pt, jx = twins
    correct = (batch["rewards"] > 0).astype(np.float32)
    np.testing.assert_array_equal(pt.informative_groups(correct), jx.informative_groups(correct))

    def sampler():
        rng = np.random.default_rng(batch["seed"])
        return lambda: {
            "x": rng.integers(0, 100, 8),
            "correct": (rng.random((8, 4)) < 0.3).astype(np.float32),
        }

    out_t = pt.dynamic_sample(sampler(), 6, 5)
    out_j = jx.dynamic_sample(sampler(), 6, 5)
    assert out_t[1] == out_j[1]
    for k in out_t[0]:
        np.testing.assert_array_equal(out_t[0][k], out_j[0][k])


@pytest.mark.parametrize("token_level", [True, False])
def test_aggregate_loss_and_gradient_parity(twins, batch, token_level):
    pt, jx = twins
    x = torch.tensor(batch["logp"], requires_grad=True)
    out_t = pt.aggregate_loss(x, torch.as_tensor(batch["mask"]), token_level)
    out_t.backward()
    f = lambda x: jx.aggregate_loss(x, jnp.asarray(batch["mask"]), token_level)
    assert abs(out_t.item() - float(f(jnp.asarray(batch["logp"])))) < TOL
    np.testing.assert_allclose(
        x.grad.numpy(), np.asarray(jax.grad(f)(jnp.asarray(batch["logp"]))), atol=TOL, rtol=TOL
    )


@pytest.mark.parametrize(
    "clip_low,clip_high,kl_coef,token_level",
    [(0.2, 0.28, 0.0, True), (0.2, 0.2, 0.04, False), (0.1, 0.5, 0.5, True)],
)
def test_dapo_loss_and_gradient_parity(twins, batch, clip_low, clip_high, kl_coef, token_level):
    pt, jx = twins
    others = [batch[k] for k in ("old_logp", "ref_logp", "advantages", "mask")]
    lp = torch.tensor(batch["logp"], requires_grad=True)
    out_t = pt.dapo_loss(lp, *map(torch.as_tensor, others), clip_low, clip_high, kl_coef, token_level)
    out_t[0].backward()
    f = lambda lp: jx.dapo_loss(lp, *map(jnp.asarray, others), clip_low, clip_high, kl_coef, token_level)
    out_j = f(jnp.asarray(batch["logp"]))
    g_j = jax.grad(lambda lp: f(lp)[0])(jnp.asarray(batch["logp"]))
    for a, b in zip(out_t, out_j):
        assert abs(a.item() - float(b)) < TOL
    np.testing.assert_allclose(lp.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_dapo_loss_on_one_checkpoint_and_batch(twins, tmp_path):
    """Same weights, same tokens (6-token completions, some past the well-formed 4, some truncated):
    token log-probs, shaped rewards, advantages and the DAPO loss (and its gradient with respect to
    the per-token log-probs) agree between the twins."""
    pt, jx = twins
    lm_t, lm_j = tiny_policy_and_reference(tmp_path)  # policy.npz and ref.npz
    rng = np.random.default_rng(0)
    pairs = tasks.make_splits(2, 16)[1].repeat(4, axis=0)
    completions = rng.integers(2, 12, size=(64, 6))
    completions[::3, 3] = tasks.EOS  # well-formed length 4
    completions[1::3, 4] = tasks.EOS  # length 5: in the penalty zone; the rest are truncated
    inputs, labels, mask, comp_mask = prompt_completion_tokens(pairs, completions)
    lengths = comp_mask.sum(-1)
    correct = tasks.verify(pairs, completions, 2)
    correct[::8] = 1.0  # make some groups non-uniform

    def chain_torch():
        policy, ref = (
            lm_t.load_checkpoint(tmp_path / "policy.npz"),
            lm_t.load_checkpoint(tmp_path / "ref.npz"),
        )
        x, y = torch.as_tensor(inputs), torch.as_tensor(labels)
        logp = lm_t.token_logps(policy(x), y, 0.8).detach().requires_grad_(True)
        ref_logp = lm_t.token_logps(ref(x), y, 0.8).detach()
        rewards = torch.as_tensor(correct) + pt.overlong_penalty(torch.as_tensor(lengths), 6, 2)
        adv = pt.group_advantages(rewards.reshape(16, 4)).reshape(-1)
        loss, kl, low, high = pt.dapo_loss(
            logp, logp.detach() + 0.1, ref_logp, adv, torch.as_tensor(mask), 0.2, 0.28, 0.04
        )
        loss.backward()
        return logp.detach().numpy(), adv.numpy(), loss.item(), kl.item(), low.item(), logp.grad.numpy()

    def chain_jax():
        (model, params), (_, ref_params) = (
            lm_j.load_checkpoint(tmp_path / "policy.npz"),
            lm_j.load_checkpoint(tmp_path / "ref.npz"),
        )
        logp = lm_j.token_logps(model.apply(params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        ref_logp = lm_j.token_logps(model.apply(ref_params, jnp.asarray(inputs)), jnp.asarray(labels), 0.8)
        rewards = jnp.asarray(correct) + jx.overlong_penalty(jnp.asarray(lengths), 6, 2)
        adv = jx.group_advantages(rewards.reshape(16, 4)).reshape(-1)
        f = lambda lp: jx.dapo_loss(lp, logp + 0.1, ref_logp, adv, jnp.asarray(mask), 0.2, 0.28, 0.04)
        loss, kl, low, _ = f(logp)
        return (
            np.asarray(logp),
            np.asarray(adv),
            float(loss),
            float(kl),
            float(low),
            np.asarray(jax.grad(lambda lp: f(lp)[0])(logp)),
        )

    for a, b in zip(chain_torch(), chain_jax()):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=TOL)
