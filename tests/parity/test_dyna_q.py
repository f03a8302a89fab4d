"""Tier 2 for Dyna-Q: the twins' module-level math agrees within 1e-5 on identical random tables,
models and transitions (with terminations, repeated pairs and the Dyna-Q+ bonus). The random
functions (sample_pairs, epsilon_greedy, plan) draw from each framework's own generator: they are
compared where the draw cannot matter and, elsewhere, by their distributions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

TOL = 1e-5
S, A, B = 7, 4, 64  # 64 planning pairs on 7 x 4: many repeat


@pytest.fixture(params=[0, 1, 2])
def data(request):
    rng = np.random.default_rng(request.param)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    # a model of a random deterministic world in which every pair has been tried at some step <= 50
    return {
        "q": f32(rng.normal(size=(S, A))),
        "reward": f32(rng.normal(size=(S, A))),
        "next_state": rng.integers(0, S, (S, A)),
        "terminated": f32(rng.random((S, A)) < 0.2),
        "last_tried": rng.integers(0, 50, (S, A)),
        "known": rng.random((S, A)) < 0.7,
        "states": rng.integers(0, S, B),
        "actions": rng.integers(0, A, B),
        "transition": (
            int(rng.integers(S)),
            int(rng.integers(A)),
            float(rng.normal()),
            int(rng.integers(S)),
            float(rng.random() < 0.3),
        ),
    }


MODEL_KEYS = ("reward", "next_state", "terminated", "last_tried", "known")


def close(a, b):
    np.testing.assert_allclose(
        np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=TOL, rtol=TOL
    )


def models(data):
    """The same model as torch tensors and as jax arrays (int64 / int32 indices)."""
    t = {k: torch.as_tensor(data[k]) for k in MODEL_KEYS}
    j = {
        k: jnp.asarray(data[k].astype(np.int32) if data[k].dtype == np.int64 else data[k]) for k in MODEL_KEYS
    }
    return t, j


def test_q_update(twins, data):
    pt, jx = twins
    s, a, r, s_next, done = data["transition"]
    (q_t, td_t), (q_j, td_j) = (
        pt.q_update(torch.as_tensor(data["q"]), s, a, r, s_next, done, 0.3, 0.97),
        jx.q_update(jnp.asarray(data["q"]), s, a, r, s_next, done, 0.3, 0.97),
    )
    close(td_t, td_j)
    close(q_t, q_j)


def test_new_model(twins):
    pt, jx = twins
    m_t, m_j = pt.new_model(S, A), jx.new_model(S, A)
    for k in MODEL_KEYS:
        np.testing.assert_array_equal(np.asarray(m_t[k]), np.asarray(m_j[k]))


@pytest.mark.parametrize("add_untried", [False, True])
def test_model_update(twins, data, add_untried):
    pt, jx = twins
    m_t, m_j = models(data)
    s, a, r, s_next, done = data["transition"]
    out_t = pt.model_update(m_t, s, a, r, s_next, done, 77, add_untried)
    out_j = jx.model_update(m_j, s, a, r, s_next, done, 77, add_untried)
    for k in MODEL_KEYS:
        close(out_t[k], out_j[k])


@pytest.mark.parametrize("kappa", [0.0, 0.01])
def test_planning_updates(twins, data, kappa):
    pt, jx = twins
    m_t, m_j = models(data)
    q_t = pt.planning_updates(
        torch.as_tensor(data["q"]),
        m_t,
        torch.as_tensor(data["states"]),
        torch.as_tensor(data["actions"]),
        0.3,
        0.97,
        kappa,
        60,
    )
    q_j = jx.planning_updates(
        jnp.asarray(data["q"]),
        m_j,
        jnp.asarray(data["states"], dtype=jnp.int32),
        jnp.asarray(data["actions"], dtype=jnp.int32),
        0.3,
        0.97,
        kappa,
        60,
    )
    close(q_t, q_j)
    assert not np.allclose(np.asarray(q_t), data["q"]), "the updates changed the table"


def test_plan_where_the_draw_cannot_matter(twins, data):
    """One known pair: every draw is that pair, so both twins' plan must give the same table."""
    pt, jx = twins
    known = np.zeros((S, A), dtype=bool)
    known[2, 1] = True
    m_t, m_j = models({**data, "known": known})
    q_t = pt.plan(torch.as_tensor(data["q"]), m_t, 10, 0.3, 0.97, 0.01, 60, torch.Generator().manual_seed(0))
    q_j, _ = jx.plan(jnp.asarray(data["q"]), m_j, 10, 0.3, 0.97, 0.01, 60, jax.random.PRNGKey(0))
    close(q_t, q_j)


def test_sample_pairs_distribution(twins, data):
    """Both twins draw only known pairs, uniformly: the frequencies agree within sampling noise."""
    pt, jx = twins
    n = 20_000
    s_t, a_t = pt.sample_pairs(torch.as_tensor(data["known"]), n, torch.Generator().manual_seed(0))
    s_j, a_j = jx.sample_pairs(jnp.asarray(data["known"]), n, jax.random.PRNGKey(0))
    freq_t = np.bincount(np.asarray(s_t) * A + np.asarray(a_t), minlength=S * A) / n
    freq_j = np.bincount(np.asarray(s_j) * A + np.asarray(a_j), minlength=S * A) / n
    uniform = data["known"].flatten() / data["known"].sum()
    np.testing.assert_array_equal(freq_t[uniform == 0], 0)
    np.testing.assert_array_equal(freq_j[uniform == 0], 0)
    np.testing.assert_allclose(freq_t, uniform, atol=0.01)  # std of one frequency ~0.0015
    np.testing.assert_allclose(freq_j, uniform, atol=0.01)


def test_epsilon_greedy_without_exploration_is_the_argmax(twins, data):
    """epsilon = 0 and no ties (random normal Q): both twins pick argmax_a Q[s, a] in every state."""
    pt, jx = twins
    g, key = torch.Generator().manual_seed(0), jax.random.PRNGKey(0)
    for s in range(S):
        a_t = pt.epsilon_greedy(torch.as_tensor(data["q"]), s, 0.0, g)
        a_j, key = jx.epsilon_greedy(jnp.asarray(data["q"]), s, 0.0, key)
        assert a_t == int(a_j) == int(data["q"][s].argmax())
