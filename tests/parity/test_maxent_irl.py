"""Tier 2 for MaxEnt IRL: the twins' module-level math agrees within 1e-5 on identical random MDPs,
policies, features and demonstrations; the numpy gridworld and sampler are the same code in both;
a whole short run gives the same reward weights."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import run_train

TOL = 1e-5


@pytest.fixture(params=[0, 1, 2])
def case(request):
    rng = np.random.default_rng(request.param)
    S, A, K, N, T = 12, 4, 5, 6, 9
    P = rng.random((S, A, S)) ** 4
    P = P / P.sum(-1, keepdims=True)
    pi = rng.random((S, A))
    start = rng.random(S)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "P": f32(P),
        "r": f32(rng.normal(size=S)),
        "pi": f32(pi / pi.sum(-1, keepdims=True)),
        "start": f32(start / start.sum()),
        "F": f32(rng.normal(size=(S, K))),
        "D": f32(rng.random(S) * 3),
        "mu": f32(rng.normal(size=K)),
        "Q1": f32(rng.normal(size=(S, A))),
        "Q2": f32(rng.normal(size=(S, A))),
        "mask": f32(rng.random(S) < 0.6),
        "states": rng.integers(0, S, size=(N, T)),
    }


def both(twins, name, case, keys, *extra):
    pt, jx = twins
    out_t = getattr(pt, name)(*(torch.as_tensor(case[k]) for k in keys), *extra)
    out_j = getattr(jx, name)(*(jnp.asarray(case[k]) for k in keys), *extra)
    return out_t, out_j


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=TOL, rtol=TOL)


def test_soft_value_iteration(twins, case):
    for gamma, sweeps in ((0.9, 150), (0.5, 3), (0.0, 1)):
        out_t, out_j = both(twins, "soft_value_iteration", case, ("r", "P"), gamma, sweeps)
        for a, b in zip(out_t, out_j):  # Q, V, pi
            close(a, b)


@pytest.mark.parametrize("gamma,horizon", [(0.9, 30), (1.0, 5), (0.3, 1)])
def test_state_visitation(twins, case, gamma, horizon):
    close(*both(twins, "state_visitation", case, ("pi", "P", "start"), gamma, horizon))


def test_expert_feature_expectations(twins, case):
    pt, jx = twins
    close(
        pt.expert_feature_expectations(torch.as_tensor(case["states"]), torch.as_tensor(case["F"]), 0.9),
        jx.expert_feature_expectations(jnp.asarray(case["states"]), jnp.asarray(case["F"]), 0.9),
    )


def test_maxent_gradient(twins, case):
    close(*both(twins, "maxent_gradient", case, ("mu", "D", "F")))


def test_greedy_actions_and_policy_match(twins, case):
    g_t, g_j = both(twins, "greedy_actions", case, ("Q1",))
    assert g_t.tolist() == np.asarray(g_j).tolist()
    pt, jx = twins
    for tol in (1e-4, 0.5):
        close(
            pt.policy_match(
                torch.as_tensor(case["Q1"]), torch.as_tensor(case["Q2"]), tol, torch.as_tensor(case["mask"])
            ),
            jx.policy_match(jnp.asarray(case["Q1"]), jnp.asarray(case["Q2"]), tol, jnp.asarray(case["mask"])),
        )


def test_policy_return(twins, case):
    close(*both(twins, "policy_return", case, ("pi", "P", "start", "r"), 20))


@pytest.mark.parametrize("grid", ["puddle7x7", "open5x5"])
@pytest.mark.parametrize("features", ["cell_type", "onehot"])
def test_gridworld_and_sampler_are_identical(twins, grid, features):
    pt, jx = twins
    for a, b in zip(pt.make_gridworld(grid, 0.2, features), jx.make_gridworld(grid, 0.2, features)):
        np.testing.assert_array_equal(a, b)
    P, r, _, start = pt.make_gridworld(grid, 0.2, features)
    pi = np.full((P.shape[0], 5), 0.2, dtype=np.float32)
    s_t = pt.sample_episodes(pi, P, start, 8, 3, np.random.default_rng(5))
    s_j = jx.sample_episodes(pi, P, start, 8, 3, np.random.default_rng(5))
    for a, b in zip(s_t, s_j):
        np.testing.assert_array_equal(a, b)
    policy = np.arange(P.shape[0]) % 5
    assert pt.run_greedy_episodes(policy, P, start, r, 8, 3, 7) == jx.run_greedy_episodes(
        policy, P, start, r, 8, 3, 7
    )


def test_short_run_gives_the_same_reward_weights(twins, tmp_path):
    args = dict(seed=3, total_steps=12, eval_every=6, num_demos=20)
    s_t = run_train("algos/maxent_irl_torch.py", tmp_path / "t", **args)
    s_j = run_train("algos/maxent_irl_jax.py", tmp_path / "j", **args)
    close(s_t["theta"], s_j["theta"])
    close([g for _, g in s_t["feature_gap_curve"]], [g for _, g in s_j["feature_gap_curve"]])
    for key in (
        "policy_match",
        "policy_match_visited",
        "expert_return",
        "demo_mean_return",
        "final_mean_return",
    ):
        assert s_t[key] == pytest.approx(s_j[key], abs=TOL), key
