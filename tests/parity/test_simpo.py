"""Tier 2 for SimPO: simpo_loss (values, rewards and gradients) and completion_lengths agree between
the twins within 1e-4 on identical random sequence log-probs and lengths, and pair_logps and
simpo_loss (value and gradient norm) on one checkpoint and one batch of completions with early <eos>."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta,gamma", [(2.0, 1.0), (2.5, 0.0), (0.5, 0.3)])
def test_simpo_loss_and_gradient_parity(twins, seed, beta, gamma):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    pc, pr = (np.asarray(-rng.uniform(0.1, 10.0, 64), dtype=np.float32) for _ in range(2))
    lc, lr = (rng.integers(1, 5, 64).astype(np.float32) for _ in range(2))
    tc, tr = torch.tensor(pc, requires_grad=True), torch.tensor(pr, requires_grad=True)
    out_t = pt.simpo_loss(tc, tr, torch.as_tensor(lc), torch.as_tensor(lr), beta, gamma)
    out_t[0].backward()
    f = lambda a, b: jx.simpo_loss(a, b, lc, lr, beta, gamma)
    out_j = f(pc, pr)
    gc, gr = jax.grad(lambda a, b: f(a, b)[0], argnums=(0, 1))(pc, pr)
    assert abs(out_t[0].item() - float(out_j[0])) < TOL
    for a, b in zip(out_t[1:], out_j[1:]):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(tc.grad.numpy(), np.asarray(gc), atol=TOL, rtol=TOL)
    np.testing.assert_allclose(tr.grad.numpy(), np.asarray(gr), atol=TOL, rtol=TOL)


def test_completion_lengths_parity(twins):
    pt, jx = twins
    rng = np.random.default_rng(0)
    completions = rng.integers(0, 14, size=(64, 4))
    mask = tasks.completion_mask(completions)
    np.testing.assert_array_equal(
        pt.completion_lengths(torch.as_tensor(mask)).numpy(),
        np.asarray(jx.completion_lengths(jnp.asarray(mask))),
    )


def test_pair_logps_and_simpo_loss_on_one_checkpoint(twins, tmp_path):
    pt, jx = twins
    lm_t, lm_j = load_script("llm/tinylm_torch.py"), load_script("llm/tinylm_jax.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 128, 2, 4), tmp_path / "policy.npz")
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 32)[1], 2)
    chosen, rejected = rng.integers(2, 12, size=(32, 4)), rng.integers(2, 12, size=(32, 4))
    chosen[::4, 3], chosen[::3, 1], rejected[::2, 2] = tasks.EOS, tasks.EOS, tasks.EOS
    cm, rm = tasks.completion_mask(chosen), tasks.completion_mask(rejected)
    beta, gamma = 2.0, 1.0

    policy = lm_t.load_checkpoint(tmp_path / "policy.npz")
    T = torch.as_tensor
    lp_t = [pt.pair_logps(policy, T(prompts), T(c), T(mk)) for c, mk in ((chosen, cm), (rejected, rm))]
    out_t = pt.simpo_loss(*lp_t, pt.completion_lengths(T(cm)), pt.completion_lengths(T(rm)), beta, gamma)
    out_t[0].backward()
    g_t = {name: p.grad.numpy() for name, p in policy.named_parameters()}

    model, params = lm_j.load_checkpoint(tmp_path / "policy.npz")
    J = jnp.asarray

    def loss_fn(params):
        lp = [
            jx.pair_logps(model, params, J(prompts), J(c), J(mk)) for c, mk in ((chosen, cm), (rejected, rm))
        ]
        return jx.simpo_loss(*lp, jx.completion_lengths(J(cm)), jx.completion_lengths(J(rm)), beta, gamma)[
            0
        ], lp

    (loss_j, lp_j), g_j = jax.value_and_grad(loss_fn, has_aux=True)(params)
    g_j = jax.tree_util.tree_leaves(g_j)

    for a, b in zip(lp_t, lp_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    assert abs(out_t[0].item() - float(loss_j)) < TOL
    # The gradients as a whole: same total size and the same global norm within 1e-4 (the twins name
    # and lay out their parameters differently).
    assert sum(g.size for g in g_t.values()) == sum(np.asarray(g).size for g in g_j)
    norm_t = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in g_t.values()))
    norm_j = np.sqrt(sum((np.asarray(g, dtype=np.float64) ** 2).sum() for g in g_j))
    assert abs(norm_t - norm_j) < TOL
