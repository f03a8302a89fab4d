"""Tier 2 for the reward model: bradley_terry_loss (value and gradient) agrees between the twins
within 1e-4, and so do the scores of one checkpoint with the same head weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bradley_terry_parity(twins, seed):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    c, r = (np.asarray(rng.normal(size=64) * 3, dtype=np.float32) for _ in range(2))
    tc = torch.tensor(c, requires_grad=True)
    loss_t, acc_t = pt.bradley_terry_loss(tc, torch.as_tensor(r))
    loss_t.backward()
    loss_j, acc_j = jx.bradley_terry_loss(c, r)
    g_j = jax.grad(lambda c: jx.bradley_terry_loss(c, r)[0])(c)
    assert abs(loss_t.item() - float(loss_j)) < TOL and acc_t.item() == float(acc_j)
    np.testing.assert_allclose(tc.grad.numpy(), np.asarray(g_j), atol=TOL, rtol=TOL)


def test_scores_parity_on_one_checkpoint(twins, tmp_path):
    pt, jx = twins
    lm_t, lm_j = load_script("llm/tinylm_torch.py"), load_script("llm/tinylm_jax.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4), tmp_path / "sft.npz")
    rng = np.random.default_rng(0)
    completions = rng.integers(2, 12, size=(16, 4))
    completions[::3, 2] = tasks.EOS
    tokens = np.concatenate([tasks.encode_prompts(tasks.make_splits(2, 16)[1], 2), completions], axis=1)
    last = pt.last_index(6, completions)
    w, b = rng.normal(size=(128, 1)).astype(np.float32), np.array([0.3], dtype=np.float32)

    rm_t = pt.RewardModel(lm_t.load_checkpoint(tmp_path / "sft.npz"))
    with torch.no_grad():
        rm_t.head.weight.copy_(torch.as_tensor(w.T))
        rm_t.head.bias.copy_(torch.as_tensor(b))
        s_t = rm_t(torch.as_tensor(tokens), torch.as_tensor(last)).numpy()
    lm, lm_params = lm_j.load_checkpoint(tmp_path / "sft.npz")
    params = {
        "params": {"lm": lm_params["params"], "head": {"kernel": jnp.asarray(w), "bias": jnp.asarray(b)}}
    }
    s_j = np.asarray(jx.RewardModel(lm.config).apply(params, jnp.asarray(tokens), jnp.asarray(last)))
    np.testing.assert_allclose(s_t, s_j, atol=TOL, rtol=TOL)
