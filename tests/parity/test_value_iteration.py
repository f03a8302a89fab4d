"""Tier 2 for value iteration: the twins' module-level math agrees within 1e-5 on identical random
MDPs (sub-stochastic rows, i.e. with terminations)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def mdp(request):
    rng = np.random.default_rng(request.param)
    S, A = 12, 3
    P = rng.random((S, A, S)) ** 4
    P = P / P.sum(-1, keepdims=True) * rng.uniform(0.7, 1.0, size=(S, A, 1))  # 0-30% termination
    pi = rng.random((S, A))
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "P": f32(P),
        "R": f32(rng.normal(size=(S, A))),
        "pi": f32(pi / pi.sum(-1, keepdims=True)),
        "V": f32(rng.normal(size=S)),
        "Q": f32(rng.normal(size=(S, A))),
    }


def both(twins, name, mdp, keys, *extra):
    pt, jx = twins
    out_t = getattr(pt, name)(*(torch.as_tensor(mdp[k]) for k in keys), *extra)
    out_j = getattr(jx, name)(*(jnp.asarray(mdp[k]) for k in keys), *extra)
    return out_t, out_j


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_q_from_v(twins, mdp):
    close(*both(twins, "q_from_v", mdp, ("V", "P", "R"), 0.95))


def test_bellman_expectation_backup(twins, mdp):
    close(*both(twins, "bellman_expectation_backup", mdp, ("V", "P", "R", "pi"), 0.95))


def test_value_iteration_sweep(twins, mdp):
    (v_t, q_t), (v_j, q_j) = both(twins, "value_iteration_sweep", mdp, ("V", "P", "R"), 0.95)
    close(v_t, v_j)
    close(q_t, q_j)


def test_policy_evaluation_linear_and_iterative(twins, mdp):
    lin_t, lin_j = both(twins, "policy_evaluation_linear", mdp, ("P", "R", "pi"), 0.9)
    close(lin_t, lin_j)
    it_t, it_j = both(twins, "policy_evaluation_iterative", mdp, ("P", "R", "pi"), 0.9, 200)
    close(it_t, it_j)
    close(it_t, lin_t)  # 0.9^200 is far below float32 resolution


def test_value_iteration_and_greedy_policy(twins, mdp):
    (v_t, q_t, ch_t), (v_j, q_j, ch_j) = both(twins, "value_iteration", mdp, ("P", "R"), 0.9, 1e-6, 10_000)
    close(v_t, v_j)
    close(q_t, q_j)
    assert abs(len(ch_t) - len(ch_j)) <= 1  # the stopping sweep may differ by float32 rounding
    close(ch_t[:10], ch_j[:10])
    pt, jx = twins
    assert pt.greedy_policy(q_t).tolist() == np.asarray(jx.greedy_policy(q_j)).tolist()
    assert (
        pt.greedy_policy(torch.as_tensor(mdp["Q"])).tolist()
        == np.asarray(jx.greedy_policy(jnp.asarray(mdp["Q"]))).tolist()
    )
