"""Tier 2, shared: the GRPO family's group-normalised advantages and k3 KL estimator, which several
pairs define. For every pair whose torch twin defines them, the twins agree within 1e-4 on random
group rewards (some groups uniform) and random token log-probs."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import ROOT, load_script, pair_id, pairs_defining

TOL = 1e-4


# GRPO's own variant without the std division (Dr. GRPO's centring), where the pair has the flag
ADV_CASES = [
    (pair, kw)
    for pair in pairs_defining(r"^def group_advantages\(")
    for kw in ([{}, {"scale": False}] if "scale=True" in (ROOT / pair[0]).read_text() else [{}])
]


@pytest.fixture(params=[0, 1, 2])
def groups(request):
    rng = np.random.default_rng(request.param)
    rewards = (rng.random((8, 4)) < 0.4).astype(np.float32)
    rewards[0] = 1.0  # a uniform group: zero advantage, no division by a zero std
    return {
        "rewards": rewards,
        "logp": np.log(rng.uniform(0.05, 1.0, (32, 9))).astype(np.float32),
        "ref_logp": np.log(rng.uniform(0.05, 1.0, (32, 9))).astype(np.float32),
    }


def test_the_shared_functions_are_found():
    assert {"grpo", "grpo_ddp", "dr_grpo", "dapo"} <= {pair_id(p) for p, _ in ADV_CASES}
    assert {"grpo", "grpo_ddp", "dr_grpo", "dapo"} <= {pair_id(p) for p in pairs_defining(r"^def k3_kl\(")}


@pytest.mark.parametrize("pair, kw", ADV_CASES, ids=[f"{pair_id(p)}{kw or ''}" for p, kw in ADV_CASES])
def test_group_advantages_parity(pair, kw, groups):
    pt, jx = (load_script(s) for s in pair)
    a_t = pt.group_advantages(torch.as_tensor(groups["rewards"]), **kw).numpy()
    a_j = np.asarray(jx.group_advantages(jnp.asarray(groups["rewards"]), **kw))
    np.testing.assert_allclose(a_t, a_j, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(a_t[0], 0.0, atol=TOL)


@pytest.mark.parametrize("pair", pairs_defining(r"^def k3_kl\("), ids=pair_id)
def test_k3_parity(pair, groups):
    pt, jx = (load_script(s) for s in pair)
    k_t = pt.k3_kl(torch.as_tensor(groups["logp"]), torch.as_tensor(groups["ref_logp"])).numpy()
    k_j = np.asarray(jx.k3_kl(jnp.asarray(groups["logp"]), jnp.asarray(groups["ref_logp"])))
    np.testing.assert_allclose(k_t, k_j, atol=TOL, rtol=TOL)
