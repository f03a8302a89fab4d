"""Tier 2 for the tiny LM: one .npz checkpoint, loaded by both twins, gives the same logits and
sequence log-probs within 1e-4 (both directions: a torch-saved and a JAX-saved checkpoint)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.fixture(params=["torch", "jax"])
def checkpoint(request, twins, tmp_path):
    pt, jx = twins
    path = tmp_path / "ck.npz"
    cfg = dict(vocab_size=tasks.VOCAB_SIZE, block_size=16, d_model=128, n_layer=2, n_head=4)
    if request.param == "torch":
        torch.manual_seed(0)
        model = pt.TinyLM(**cfg)
        with torch.no_grad():  # move LayerNorm gains and biases off their init so they are tested too
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        pt.save_checkpoint(model, path)
    else:
        model = jx.TinyLM(**cfg)
        params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), dtype=jnp.int32))
        params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.PRNGKey(1), p.shape), params)
        jx.save_checkpoint(model, params, path)
    return path


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, tasks.VOCAB_SIZE, size=(32, 10))
    mask = np.zeros((32, 9), dtype=np.float32)
    mask[:, 5:] = 1.0
    mask[::3, 7:] = 0.0  # some sequences ended early: padding masked
    return tokens, mask


def test_checkpoint_has_about_half_a_million_parameters(twins, checkpoint):
    model = twins[0].load_checkpoint(checkpoint)
    assert 3e5 < sum(p.numel() for p in model.parameters()) < 2e6


def test_logits_parity(twins, checkpoint, batch):
    pt, jx = twins
    tokens, _ = batch
    logits_t = pt.load_checkpoint(checkpoint)(torch.as_tensor(tokens)).detach().numpy()
    model, params = jx.load_checkpoint(checkpoint)
    logits_j = np.asarray(model.apply(params, jnp.asarray(tokens)))
    np.testing.assert_allclose(logits_t, logits_j, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sequence_logps_parity(twins, checkpoint, batch, temperature):
    pt, jx = twins
    tokens, mask = batch
    logits_t = pt.load_checkpoint(checkpoint)(torch.as_tensor(tokens[:, :-1]))
    model, params = jx.load_checkpoint(checkpoint)
    logits_j = model.apply(params, jnp.asarray(tokens[:, :-1]))
    lp_t = pt.sequence_logps(logits_t, torch.as_tensor(tokens[:, 1:]), torch.as_tensor(mask), temperature)
    lp_j = jx.sequence_logps(logits_j, jnp.asarray(tokens[:, 1:]), jnp.asarray(mask), temperature)
    np.testing.assert_allclose(lp_t.detach().numpy(), np.asarray(lp_j), atol=TOL, rtol=TOL)


def test_greedy_sampling_parity(twins, checkpoint):
    """Greedy decoding is deterministic: on the same weights both twins write the same tokens."""
    pt, jx = twins
    prompts = tasks.encode_prompts(tasks.make_splits(2, 64)[1], 2)
    out_t = pt.sample(pt.load_checkpoint(checkpoint), torch.as_tensor(prompts), 4, 0.0).numpy()
    model, params = jx.load_checkpoint(checkpoint)
    out_j, _ = jx.sample(model, params, jnp.asarray(prompts), jax.random.PRNGKey(0), 4, 0.0)
    np.testing.assert_array_equal(out_t, np.asarray(out_j))
