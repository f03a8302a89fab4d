"""Tier 2 for IPO: ipo_loss and its gradients agree between the twins within 1e-4 on identical
random log-probs (sums and per-token means), and pair_logps (sum and --average-logps) and ipo_loss
agree on one checkpoint and one batch of preference pairs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, tiny_policy_and_reference

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("scale", [20.0, 3.0])  # sequence sums, and per-token means (--average-logps)
def test_ipo_loss_and_gradient_parity(twins, seed, beta, scale):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    pc, pr, rc, rr = (np.asarray(-rng.uniform(0.1, scale, 64), dtype=np.float32) for _ in range(4))
    tc, tr = torch.tensor(pc, requires_grad=True), torch.tensor(pr, requires_grad=True)
    out_t = pt.ipo_loss(tc, tr, torch.as_tensor(rc), torch.as_tensor(rr), beta)
    out_t[0].backward()
    f = lambda pc, pr: jx.ipo_loss(pc, pr, rc, rr, beta)
    out_j = f(pc, pr)
    grads = jax.grad(lambda a, b: f(a, b)[0], argnums=(0, 1))(pc, pr)
    assert abs(out_t[0].item() - float(out_j[0])) < TOL * max(1.0, abs(out_t[0].item()))
    for a, b in zip(out_t[1:], out_j[1:]):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    for a, b in zip((tc.grad, tr.grad), grads):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("average", [False, True])
def test_pair_logps_and_ipo_loss_on_one_checkpoint(twins, tmp_path, average):
    pt, jx = twins
    lm_t, lm_j = tiny_policy_and_reference(tmp_path)  # policy.npz and ref.npz
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 32)[1], 2)
    chosen, rejected = rng.integers(2, 12, size=(32, 4)), rng.integers(2, 12, size=(32, 4))
    chosen[::4, 3], rejected[::3, 1] = tasks.EOS, tasks.EOS
    cm, rm = tasks.completion_mask(chosen), tasks.completion_mask(rejected)

    policy, ref = lm_t.load_checkpoint(tmp_path / "policy.npz"), lm_t.load_checkpoint(tmp_path / "ref.npz")
    T = lambda x: torch.as_tensor(x)
    lp_t = [
        pt.pair_logps(mdl, T(prompts), T(c), T(mk), average)
        for mdl in (policy, ref)
        for c, mk in ((chosen, cm), (rejected, rm))
    ]
    loss_t = pt.ipo_loss(*lp_t, 0.1)[0]

    (model, params), (_, ref_params) = (
        lm_j.load_checkpoint(tmp_path / "policy.npz"),
        lm_j.load_checkpoint(tmp_path / "ref.npz"),
    )
    J = jnp.asarray
    lp_j = [
        jx.pair_logps(model, p, J(prompts), J(c), J(mk), average)
        for p in (params, ref_params)
        for c, mk in ((chosen, cm), (rejected, rm))
    ]
    loss_j = jx.ipo_loss(*lp_j, 0.1)[0]
    for a, b in zip(lp_t, lp_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    assert abs(loss_t.item() - float(loss_j)) < TOL * max(1.0, abs(loss_t.item()))
