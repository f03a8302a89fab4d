"""Tier 2 for tabular Q-learning: the twins' module-level math agrees within 1e-5 on identical
random tables and transitions (with terminations and colliding (s, a) pairs)."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    S, A, B = 6, 3, 32  # 32 transitions on 6 x 3 pairs: many collide
    P = rng.random((S, A, S))
    P = P / P.sum(-1, keepdims=True) * rng.uniform(0.7, 1.0, size=(S, A, 1))
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "Q": f32(rng.normal(size=(S, A))),
        "rewards": f32(rng.normal(size=B)),
        "states": rng.integers(0, S, B),
        "actions": rng.integers(0, A, B),
        "next_states": rng.integers(0, S, B),
        "terminated": f32(rng.random(B) < 0.2),
        "step_sizes": f32(rng.uniform(0.01, 0.5, B)),
        "counts": rng.integers(1, 1000, B),
        "P": f32(P),
        "R": f32(rng.normal(size=(S, A))),
        "policy": rng.integers(0, A, S),
    }


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_targets_and_update(twins, data):
    pt, jx = twins
    t = {k: torch.as_tensor(v) for k, v in data.items()}
    j = {k: jnp.asarray(v) for k, v in data.items()}
    tg_t = pt.q_learning_targets(t["Q"], t["rewards"], t["next_states"], t["terminated"], 0.97)
    tg_j = jx.q_learning_targets(j["Q"], j["rewards"], j["next_states"], j["terminated"], 0.97)
    close(tg_t, tg_j)
    (q_t, td_t), (q_j, td_j) = (
        pt.q_learning_update(t["Q"], t["states"], t["actions"], tg_t, t["step_sizes"]),
        jx.q_learning_update(j["Q"], j["states"], j["actions"], tg_j, j["step_sizes"]),
    )
    close(td_t, td_j)
    close(q_t, q_j)


def test_step_sizes(twins, data):
    pt, jx = twins
    for power in (0.6, 0.8, 1.0):
        close(
            pt.robbins_monro_step_size(torch.as_tensor(data["counts"]), power),
            jx.robbins_monro_step_size(jnp.asarray(data["counts"]), power),
        )


def test_value_iteration_and_policy_value(twins, data):
    pt, jx = twins
    (v_t, q_t), (v_j, q_j) = (
        pt.value_iteration(torch.as_tensor(data["P"]), torch.as_tensor(data["R"]), 0.9),
        jx.value_iteration(jnp.asarray(data["P"]), jnp.asarray(data["R"]), 0.9),
    )
    close(v_t, v_j)
    close(q_t, q_j)
    close(
        pt.policy_value(
            torch.as_tensor(data["P"]), torch.as_tensor(data["R"]), torch.as_tensor(data["policy"]), 0.9
        ),
        jx.policy_value(jnp.asarray(data["P"]), jnp.asarray(data["R"]), jnp.asarray(data["policy"]), 0.9),
    )
