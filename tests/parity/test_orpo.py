"""Tier 2 for ORPO: log_odds and orpo_loss (values, NLL, odds-ratio term, log-odds ratio and gradients)
agree between the twins within 1e-4 on identical random sequence log-probs and lengths, and
pair_logps and orpo_loss (value and gradient norm) on one checkpoint and one batch of pairs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


def test_log_odds_parity(twins):
    pt, jx = twins
    x = np.concatenate([-np.geomspace(1e-9, 30.0, 200), [0.0, -1e-6]]).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    out_t = pt.log_odds(tx)
    out_t.sum().backward()
    out_j = np.asarray(jx.log_odds(x))
    g_j = np.asarray(jax.grad(lambda v: jx.log_odds(v).sum())(jnp.asarray(x)))
    np.testing.assert_allclose(out_t.detach().numpy(), out_j, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(tx.grad.numpy(), g_j, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("lam", [0.0, 0.1, 1.0])
def test_orpo_loss_and_gradient_parity(twins, seed, lam):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    cl, rl = (rng.integers(1, 5, 64).astype(np.float32) for _ in range(2))
    c = (-rng.uniform(0.01, 3.0, 64) * cl).astype(np.float32)
    r = (-rng.uniform(0.01, 3.0, 64) * rl).astype(np.float32)
    tc, tr = torch.tensor(c, requires_grad=True), torch.tensor(r, requires_grad=True)
    out_t = pt.orpo_loss(tc, tr, torch.as_tensor(cl), torch.as_tensor(rl), lam)
    out_t[0].backward()
    f = lambda c, r: jx.orpo_loss(c, r, cl, rl, lam)
    out_j = f(c, r)
    gc, gr = jax.grad(lambda a, b: f(a, b)[0], argnums=(0, 1))(c, r)
    for a, b in zip(out_t, out_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(tc.grad.numpy(), np.asarray(gc), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(tr.grad.numpy(), np.asarray(gr), atol=TOL, rtol=TOL)


def test_pair_logps_and_orpo_loss_on_one_checkpoint(twins, tmp_path):
    pt, jx = twins
    lm_t, lm_j = load_script("llm/tinylm_torch.py"), load_script("llm/tinylm_jax.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4), tmp_path / "policy.npz")
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 32)[1], 2)
    chosen, rejected = rng.integers(2, 12, size=(32, 4)), rng.integers(2, 12, size=(32, 4))
    chosen[::4, 3], chosen[::3, 1], rejected[::2, 2] = tasks.EOS, tasks.EOS, tasks.EOS
    cm, rm = tasks.completion_mask(chosen), tasks.completion_mask(rejected)

    policy, T = lm_t.load_checkpoint(tmp_path / "policy.npz"), torch.as_tensor
    lc_t = pt.pair_logps(policy, T(prompts), T(chosen), T(cm))
    lr_t = pt.pair_logps(policy, T(prompts), T(rejected), T(rm))
    out_t = pt.orpo_loss(lc_t, lr_t, T(cm).sum(-1), T(rm).sum(-1), 0.5)
    out_t[0].backward()
    g_t = [p.grad.numpy() for p in policy.parameters()]

    (model, params), J = lm_j.load_checkpoint(tmp_path / "policy.npz"), jnp.asarray

    def loss_fn(params):
        lc = jx.pair_logps(model, params, J(prompts), J(chosen), J(cm))
        lr = jx.pair_logps(model, params, J(prompts), J(rejected), J(rm))
        return jx.orpo_loss(lc, lr, J(cm).sum(-1), J(rm).sum(-1), 0.5)[0], (lc, lr)

    (loss_j, (lc_j, lr_j)), g_j = jax.value_and_grad(loss_fn, has_aux=True)(params)
    g_j = jax.tree_util.tree_leaves(g_j)

    np.testing.assert_allclose(lc_t.detach().numpy(), np.asarray(lc_j), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(lr_t.detach().numpy(), np.asarray(lr_j), atol=TOL, rtol=TOL)
    assert abs(out_t[0].item() - float(loss_j)) < TOL
    # The gradients as a whole: same total size and the same global norm within 1e-4 (the twins name
    # and lay out their parameters differently).
    assert sum(g.size for g in g_t) == sum(np.asarray(g).size for g in g_j)
    norm_t = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in g_t))
    norm_j = np.sqrt(sum((np.asarray(g, dtype=np.float64) ** 2).sum() for g in g_j))
    assert abs(norm_t - norm_j) < TOL
