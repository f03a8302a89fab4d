"""Tier 2 for KTO: kto_loss (values, rewards, z and gradients) and masked_mean agree between the twins
within 1e-4 on identical random sequence log-probs and labels, and pair_logps and kto_loss on one
checkpoint pair and one batch of completions with mismatched pairs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, tiny_policy_and_reference

TOL = 1e-4
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beta,lam_d,lam_u", [(0.1, 1.0, 1.0), (1.0, 1.0, 1.5), (0.5, 1.33, 1.0)])
@pytest.mark.parametrize("kl_shift", [0.5, -0.5])  # a positive and a negative (clamped) KL estimate
def test_kto_loss_and_gradient_parity(twins, seed, beta, lam_d, lam_u, kl_shift):
    pt, jx = twins
    rng = np.random.default_rng(seed)
    p, r, rkl = (np.asarray(-rng.uniform(0.1, 10.0, 64), dtype=np.float32) for _ in range(3))
    pkl = (rkl + kl_shift + rng.normal(0.0, 0.3, 64)).astype(np.float32)
    d = (rng.random(64) < 0.6).astype(np.float32)
    tp, tpkl = torch.tensor(p, requires_grad=True), torch.tensor(pkl, requires_grad=True)
    out_t = pt.kto_loss(
        tp, torch.as_tensor(r), tpkl, torch.as_tensor(rkl), torch.as_tensor(d), beta, lam_d, lam_u
    )
    out_t[0].backward()
    f = lambda p, pkl: jx.kto_loss(p, r, pkl, rkl, d, beta, lam_d, lam_u)
    out_j = f(p, pkl)
    gp, gpkl = jax.grad(lambda a, b: f(a, b)[0], argnums=(0, 1))(p, pkl)
    assert abs(out_t[0].item() - float(out_j[0])) < TOL
    np.testing.assert_allclose(out_t[1].numpy(), np.asarray(out_j[1]), atol=TOL, rtol=TOL)
    assert abs(out_t[2].item() - float(out_j[2])) < TOL
    np.testing.assert_allclose(tp.grad.numpy(), np.asarray(gp), atol=TOL, rtol=TOL)
    tg = np.zeros(64) if tpkl.grad is None else tpkl.grad.numpy()
    np.testing.assert_allclose(tg, np.asarray(gpkl), atol=TOL)  # both zero: z is detached
    for mask in (d, 1.0 - d, np.zeros(64, dtype=np.float32)):
        assert (
            abs(
                pt.masked_mean(torch.as_tensor(p), torch.as_tensor(mask)).item()
                - float(jx.masked_mean(p, mask))
            )
            < TOL
        )


def test_pair_logps_and_kto_loss_on_one_checkpoint(twins, tmp_path):
    pt, jx = twins
    lm_t, lm_j = tiny_policy_and_reference(tmp_path)  # policy.npz and ref.npz
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 32)[1], 2)
    completions = rng.integers(2, 12, size=(32, 4))
    completions[::4, 3], completions[::3, 1] = tasks.EOS, tasks.EOS
    kl_completions = np.roll(completions, -1, axis=0)  # the mismatched pairs, as in train
    mask, kl_mask = tasks.completion_mask(completions), tasks.completion_mask(kl_completions)
    d = (rng.random(32) < 0.5).astype(np.float32)
    batches = ((completions, mask), (kl_completions, kl_mask))

    policy, ref = lm_t.load_checkpoint(tmp_path / "policy.npz"), lm_t.load_checkpoint(tmp_path / "ref.npz")
    T = torch.as_tensor
    lp_t = [pt.pair_logps(mdl, T(prompts), T(c), T(mk)) for c, mk in batches for mdl in (policy, ref)]
    out_t = pt.kto_loss(lp_t[0], lp_t[1], lp_t[2], lp_t[3], T(d), 0.5, 1.0, 1.5)
    out_t[0].backward()
    g_t = {name: p.grad.numpy() for name, p in policy.named_parameters()}

    (model, params), (_, ref_params) = (
        lm_j.load_checkpoint(tmp_path / "policy.npz"),
        lm_j.load_checkpoint(tmp_path / "ref.npz"),
    )
    J = jnp.asarray
    lp_j = [
        jx.pair_logps(model, p, J(prompts), J(c), J(mk)) for c, mk in batches for p in (params, ref_params)
    ]
    out_j = jx.kto_loss(lp_j[0], lp_j[1], lp_j[2], lp_j[3], J(d), 0.5, 1.0, 1.5)

    def loss_fn(params):
        lp = jx.pair_logps(model, params, J(prompts), J(completions), J(mask))
        lp_kl = jx.pair_logps(model, params, J(prompts), J(kl_completions), J(kl_mask))
        return jx.kto_loss(lp, lp_j[1], lp_kl, lp_j[3], J(d), 0.5, 1.0, 1.5)[0]

    g_j = jax.tree_util.tree_leaves(jax.grad(loss_fn)(params))

    for a, b in zip(lp_t, lp_j):
        np.testing.assert_allclose(a.detach().numpy(), np.asarray(b), atol=TOL, rtol=TOL)
    assert abs(out_t[0].item() - float(out_j[0])) < TOL and abs(out_t[2].item() - float(out_j[2])) < TOL
    # The gradients as a whole: same total size and the same global norm within 1e-4 (the twins name
    # and lay out their parameters differently).
    assert sum(g.size for g in g_t.values()) == sum(np.asarray(g).size for g in g_j)
    norm_t = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in g_t.values()))
    norm_j = np.sqrt(sum((np.asarray(g, dtype=np.float64) ** 2).sum() for g in g_j))
    assert abs(norm_t - norm_j) < TOL
