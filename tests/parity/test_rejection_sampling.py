"""Tier 2 for rejection sampling fine-tuning: the twins' filter_samples, training_batch and
rejection_sampling_loss (value and gradient) agree within 1e-4 on identical random inputs, and the
whole chain -- one checkpoint, one batch of prompts and sampled-looking completions scored by the
verifier, filtered, batched, the loss and its gradient with respect to the logits -- agrees too."""

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
    N, K, L = 16, 6, 4
    completions = rng.integers(2, 4, size=(N, K, L))  # few distinct strings: duplicates happen
    completions[rng.random((N, K)) < 0.4, 2] = tasks.EOS
    B, T, V = 12, 9, tasks.VOCAB_SIZE
    mask = np.zeros((B, T), dtype=np.float32)
    mask[:, 5:] = 1.0
    mask[rng.random(B) < 0.3, 7:] = 0.0  # early <eos>: padding
    return {
        "rewards": (rng.random((N, K)) < 0.5).astype(np.float32),
        "completions": completions,
        "logits": rng.normal(size=(B, T, V)).astype(np.float32),
        "labels": rng.integers(0, V, size=(B, T)),
        "mask": mask,
    }


@pytest.mark.parametrize("cap,dedup", [(0, False), (0, True), (1, False), (2, True)])
def test_filter_parity(twins, batch, cap, dedup):
    pt, jx = twins
    k_t = pt.filter_samples(batch["rewards"], batch["completions"], cap, dedup)
    k_j = jx.filter_samples(batch["rewards"], batch["completions"], cap, dedup)
    np.testing.assert_array_equal(k_t, k_j)


def test_training_batch_parity(twins, batch):
    pt, jx = twins
    prompts = tasks.encode_prompts(tasks.make_splits(2, 16)[1], 2)
    completions = batch["completions"][:, 0]
    for a, b in zip(pt.training_batch(prompts, completions), jx.training_batch(prompts, completions)):
        np.testing.assert_array_equal(a, b)


def test_loss_and_gradient_parity(twins, batch):
    pt, jx = twins
    lg = torch.tensor(batch["logits"], requires_grad=True)
    loss_t = pt.rejection_sampling_loss(lg, torch.as_tensor(batch["labels"]), torch.as_tensor(batch["mask"]))
    loss_t.backward()
    f = lambda lg: jx.rejection_sampling_loss(lg, jnp.asarray(batch["labels"]), jnp.asarray(batch["mask"]))
    loss_j, g_j = jax.value_and_grad(f)(jnp.asarray(batch["logits"]))
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(lg.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_loss_on_one_checkpoint_and_batch(twins, tmp_path):
    """Same weights, same tokens: verify, filter, batch, the loss, and its gradient with respect to
    the logits agree between the twins."""
    pt, jx = twins
    lm_t, lm_j = load_script("llm/tinylm_torch.py"), load_script("llm/tinylm_jax.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4), tmp_path / "policy.npz")
    rng = np.random.default_rng(0)
    K = 4
    pairs = tasks.make_splits(2, 16)[1].repeat(K, axis=0)
    completions = rng.integers(2, 12, size=(64, 4))
    completions[::3] = [tasks.encode(tasks.answer_text(int(a + b), 2)) + [tasks.EOS] for a, b in pairs[::3]]
    completions[1::5, 1] = tasks.EOS  # short wrong answers with padding-like tails
    rewards = tasks.verify(pairs, completions, 2)
    prompts = tasks.encode_prompts(pairs, 2)

    def chain(m):
        keep = m.filter_samples(rewards.reshape(-1, K), completions.reshape(-1, K, 4), 2, True).reshape(-1)
        return keep, m.training_batch(prompts[keep], completions[keep])

    keep_t, (x, y, mask) = chain(pt)
    keep_j, batch_j = chain(jx)
    np.testing.assert_array_equal(keep_t, keep_j)
    assert keep_t.sum() > 0
    policy = lm_t.load_checkpoint(tmp_path / "policy.npz")
    logits_t = policy(torch.as_tensor(x)).detach().requires_grad_(True)
    loss_t = pt.rejection_sampling_loss(logits_t, torch.as_tensor(y), torch.as_tensor(mask))
    loss_t.backward()
    model, params = lm_j.load_checkpoint(tmp_path / "policy.npz")
    logits_j = model.apply(params, jnp.asarray(batch_j[0]))
    f = lambda lg: jx.rejection_sampling_loss(lg, jnp.asarray(batch_j[1]), jnp.asarray(batch_j[2]))
    loss_j, g_j = jax.value_and_grad(f)(logits_j)
    np.testing.assert_allclose(logits_t.detach().numpy(), np.asarray(logits_j), atol=TOL, rtol=TOL)
    assert abs(loss_t.item() - float(loss_j)) < TOL
    np.testing.assert_allclose(logits_t.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)
