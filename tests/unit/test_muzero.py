"""Tier 1 for MuZero: the worked problem "MuZero: the value transform, two-hot targets and a search
on a known tree" (docs/algorithms/muzero.md) by hand -- h and its inverse, the two-hot projection,
n-step targets across a termination and a truncation, PUCT scores, the min-max normalisation, the
visit-count temperature, the observation scaling (the true last observation scaled too) -- an MCTS
with a perfect model of a depth-2 tree that must see past an immediate-reward bait, and bad input;
every check in both twins, through the scripts' own functions."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import ROOT, is_torch, load_script, run_train, smoke_run

TWINS = ["algos/muzero_torch.py", "algos/muzero_jax.py"]


def conv(script):
    """float32 numpy -> the twin's array type."""
    if is_torch(script):
        return lambda x: torch.as_tensor(np.asarray(x, dtype=np.float32))
    return lambda x: jnp.asarray(np.asarray(x, dtype=np.float32))


# ----------------------------------------------------------------------------- value transform
@pytest.mark.parametrize("script", TWINS)
def test_h_by_hand_and_round_trip(script):
    m, c = load_script(script), conv(script)
    # h(3) = (sqrt(4) - 1) + 0.001 * 3 = 1.003; h(-8) = -(sqrt(9) - 1) - 0.008 = -2.008; h(0) = 0
    np.testing.assert_allclose(np.asarray(m.h(c([3.0, -8.0, 0.0]))), [1.003, -2.008, 0.0], atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(m.h_inv(c([1.003, -2.008, 0.0]))), [3.0, -8.0, 0.0], rtol=1e-5, atol=1e-5
    )
    x = np.concatenate([-np.logspace(-3, 3, 50), [0.0], np.logspace(-3, 3, 50)])
    np.testing.assert_allclose(np.asarray(m.h_inv(m.h(c(x)))), x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_two_hot_support_by_hand(script):
    m, c = load_script(script), conv(script)
    probs = np.asarray(m.scalar_to_support(c([3.0, -8.0, 0.0]), 2))  # atoms -2, -1, 0, 1, 2
    # h(3) = 1.003: 0.997 on atom 1, 0.003 on atom 2 (mean 1.003); h(-8) = -2.008 clips to atom -2;
    # 0 on atom 0
    np.testing.assert_allclose(probs, [[0, 0, 0, 0.997, 0.003], [1, 0, 0, 0, 0], [0, 0, 1, 0, 0]], atol=1e-6)
    # and back: the expected atom of the two-hot distribution, through h_inv
    x = c([3.0, -2.5, 0.7])
    logits = np.log(np.asarray(m.scalar_to_support(x, 10)) + 1e-30)
    np.testing.assert_allclose(np.asarray(m.support_to_scalar(c(logits), 10)), [3.0, -2.5, 0.7], rtol=1e-4)


# ----------------------------------------------------------------------------- n-step targets
@pytest.mark.parametrize("script", TWINS)
def test_n_step_targets_by_hand(script):
    m, c = load_script(script), conv(script)
    ones, values = c([[1.0, 1.0, 1.0]]), c([[10.0, 20.0, 30.0, 40.0]])
    zero, end = c([[0.0, 0.0, 0.0]]), c([[0.0, 1.0, 0.0]])
    # K = 1, n = 2, gamma = 0.5, no episode end: z_0 = 1 + 0.5 + 0.25 * 30 = 9;
    # z_1 = 1 + 0.5 + 0.25 * 40 = 11.5
    z, r, alive, vmask, rmask = m.n_step_targets(ones, values, zero, zero, zero, 0.5, 2, 1)
    np.testing.assert_allclose(np.asarray(z), [[9.0, 11.5]])
    np.testing.assert_allclose(np.asarray(r), [[1.0]])
    # terminated at step 1: z_0 = 1 + 0.5 * 1 = 1.5 (no bootstrap), z_1 = 1
    z, *_ = m.n_step_targets(ones, values, end, zero, zero, 0.5, 2, 1)
    np.testing.assert_allclose(np.asarray(z), [[1.5, 1.0]])
    # truncated at step 1 with V(final obs) = 8: z_0 = 1 + 0.5 (1 + 0.5 * 8) = 3.5, z_1 = 1 + 0.5 * 8 = 5
    boot = c([[0.0, 8.0, 0.0]])
    z, *_ = m.n_step_targets(ones, values, zero, end, boot, 0.5, 2, 1)
    np.testing.assert_allclose(np.asarray(z), [[3.5, 5.0]])
    # K = 2, n = 1: position 2 lies past the end. After the truncation it is masked (value_mask 0);
    # after the termination it is the absorbing state: value target 0, value_mask 1; the policy mask 0
    # both times
    z, r, alive, vmask, rmask = m.n_step_targets(ones, values, zero, end, boot, 0.5, 1, 2)
    np.testing.assert_allclose(np.asarray(z), [[11.0, 5.0, 0.0]])
    np.testing.assert_allclose(np.asarray(alive), [[1, 1, 0]])
    np.testing.assert_allclose(np.asarray(vmask), [[1, 1, 0]])
    np.testing.assert_allclose(np.asarray(rmask), [[1, 1]])
    z, r, alive, vmask, rmask = m.n_step_targets(ones, values, end, zero, zero, 0.5, 1, 2)
    np.testing.assert_allclose(np.asarray(z), [[11.0, 1.0, 0.0]])
    np.testing.assert_allclose(np.asarray(r), [[1.0, 1.0]])
    np.testing.assert_allclose(np.asarray(alive), [[1, 1, 0]])
    np.testing.assert_allclose(np.asarray(vmask), [[1, 1, 1]])


# ----------------------------------------------------------------------------- PUCT and friends
@pytest.mark.parametrize("script", TWINS)
def test_puct_scores_by_hand(script):
    m = load_script(script)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    # N = 3: c = 1.25 + log((3 + 19652 + 1) / 19652) = 1.2502035; sqrt(3) c = 2.1654128
    # child 0: 0.5 + 2.1654128 * 0.6 / (1 + 2) = 0.9330832;
    # child 1 (unvisited): 0 + 2.1654128 * 0.4 / 1 = 0.8661664
    scores = m.puct_scores(f32([[0.6, 0.4]]), f32([[2.0, 0.0]]), f32([[0.5, 0.0]]), f32([3.0]), 1.25, 19652.0)
    np.testing.assert_allclose(np.asarray(scores), [[0.9330832, 0.8661664]], atol=1e-6)
    # min-max: Q = (3, 5, -) in a tree whose visited Q run from 2 to 6: (3-2)/4, (5-2)/4, unvisited 0
    q = m.normalise_q(f32([[3.0, 5.0, 7.0]]), np.array([[True, True, False]]), f32([2.0]), f32([6.0]), 0.01)
    np.testing.assert_allclose(np.asarray(q), [[0.25, 0.75, 0.0]], atol=1e-6)
    # a range below min_range = 0.01 is widened to it: (5.004 - 5) / 0.01 = 0.4, not 1
    q = m.normalise_q(f32([[5.0, 5.004]]), np.array([[True, True]]), f32([5.0]), f32([5.004]), 0.01)
    np.testing.assert_allclose(np.asarray(q), [[0.0, 0.4]], atol=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_visit_policy_temperature_by_hand(script):
    m, c = load_script(script), conv(script)
    # counts (3, 1): T = 1 -> (3/4, 1/4); T = 0.5 -> (9, 1)/10; T = 0.25 -> (81, 1)/82
    for temperature, expected in [(1.0, [0.75, 0.25]), (0.5, [0.9, 0.1]), (0.25, [81 / 82, 1 / 82])]:
        np.testing.assert_allclose(
            np.asarray(m.visit_policy(c([[3.0, 1.0]]), temperature)), [expected], atol=1e-6
        )
    assert [m.temperature_schedule(p) for p in (0.0, 0.6, 0.9)] == [1.0, 0.5, 0.25]


# ----------------------------------------------------------------------------- search on a known tree
# A depth-2 binary tree, gamma = 1. From the root, action 1 pays 1 at once (the bait) and leads to a
# state where both actions pay 0; action 0 pays 0 and leads to a state where action 0 pays 5. Best
# return: 0 + 5 = 5 by action 0, against 1 by action 1. Depth-2 moves lead to an absorbing state 7
# (reward 0). The value function knows nothing (0 everywhere), priors are uniform: only the model's
# rewards, seen through the search, can find action 0. With 20 simulations it does not yet: (7, 13).
NEXT = np.array([[1, 2], [3, 4], [5, 6], [7, 7], [7, 7], [7, 7], [7, 7], [7, 7]])
REWARD = np.array([[0, 1], [5, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], dtype=np.float32)


def perfect_model(script):
    """recurrent_fn(latent, action) of the known tree; the latent is the one-hot state."""
    if is_torch(script):

        def recurrent_fn(latent, action):
            state = latent.argmax(-1)
            return (
                REWARD[state, action],
                np.zeros(len(state), np.float32),
                np.zeros((len(state), 2), np.float32),
                np.eye(8, dtype=np.float32)[NEXT[state, action]],
            )
    else:

        def recurrent_fn(latent, action):
            state = latent.argmax(-1)
            return (
                jnp.asarray(REWARD)[state, action],
                jnp.zeros(state.shape),
                jnp.zeros(state.shape + (2,)),
                jax.nn.one_hot(jnp.asarray(NEXT)[state, action], 8),
            )

    return recurrent_fn


@pytest.mark.parametrize("script", TWINS)
def test_mcts_with_a_perfect_model_sees_past_the_bait(script):
    m = load_script(script)
    root = np.eye(8, dtype=np.float32)[[0, 0]]  # two identical trees: the batch dimension works
    logits, value = np.zeros((2, 2), np.float32), np.zeros(2, np.float32)
    if is_torch(script):
        visits, root_value = m.run_mcts(
            perfect_model(script), root, logits, value, 50, 1.0, 1.25, 19652.0, 0.01
        )
    else:
        visits, root_value = m.run_mcts(
            perfect_model(script),
            jnp.asarray(root),
            jnp.asarray(logits),
            jnp.asarray(value),
            50,
            1.0,
            1.25,
            19652.0,
            0.01,
            jax.random.PRNGKey(0),
        )
    # 50 simulations: action 0 gets the first (a tie), the bait the next 13 (Q = 1 against 0 until the
    # search looks below action 0 and finds its 5), action 0 every later one. Both twins (our MCTS,
    # mctx with min_max_qtransform) give exactly (37, 13) and the root value 3.490196 (a running mean
    # of every backup, the root's 0 included).
    visits = np.asarray(visits)
    np.testing.assert_array_equal(visits, [[37, 13], [37, 13]])
    assert (visits.argmax(-1) == 0).all()  # action 0: return 5, not the bait's 1
    np.testing.assert_allclose(np.asarray(root_value), [3.490196, 3.490196], atol=1e-5)


# ----------------------------------------------------------------------------- observation scaling
@pytest.mark.parametrize("script", TWINS)
def test_obs_scaling_by_hand(script):
    m = load_script(script)
    inf = np.inf
    # CartPole-v1's declared bounds: x +-4.8, theta +-0.41887903 rad, velocities unbounded
    low = np.array([-4.8, -inf, -0.41887903, -inf], dtype=np.float32)
    centre, half_width = m.obs_scaling(low, -low)
    np.testing.assert_array_equal(centre, [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(half_width, [4.8, 1.0, 0.41887903, 1.0], rtol=1e-7)
    # asymmetric, one-sided and degenerate bounds: [0, 10] -> centre 5, half-width 5 (7.5 maps to 0.5);
    # [2, inf), (-inf, 3] and [1, 1] pass unchanged (no division by a zero width)
    centre, half_width = m.obs_scaling(
        np.array([0.0, 2.0, -inf, 1.0], np.float32), np.array([10.0, inf, 3.0, 1.0], np.float32)
    )
    np.testing.assert_array_equal(centre, [5.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(half_width, [5.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose((np.array([7.5, 4.0, -2.0, 1.0]) - centre) / half_width, [0.5, 4.0, -2.0, 1.0])


@pytest.mark.parametrize("script", TWINS)
def test_scaled_envs_scale_every_observation_and_the_final_one(script):
    """The same seeds and actions through make_envs with and without scale_obs: every observation,
    the true last ones in infos["final_obs"] included, is the raw one divided by (4.8, 1, 0.419, 1);
    the pole angle of a terminated episode's last observation is past 0.2095 rad, i.e. 0.5 scaled."""
    m = load_script(script)
    raw_envs, scaled_envs = m.make_envs("CartPole-v1", 3, scale_obs=False), m.make_envs("CartPole-v1", 3)
    half_width = np.array([4.8, 1.0, 0.41887903, 1.0], dtype=np.float32)
    np.testing.assert_allclose(scaled_envs.single_observation_space.high[[0, 2]], [1.0, 1.0], rtol=1e-6)
    raw, _ = raw_envs.reset(seed=3)
    scaled, _ = scaled_envs.reset(seed=3)
    rng, finals = np.random.default_rng(0), 0
    for _ in range(60):
        np.testing.assert_allclose(scaled, raw / half_width, rtol=1e-6)
        actions = rng.integers(0, 2, 3)
        raw, _, terminated, _, raw_info = raw_envs.step(actions)
        scaled, _, _, _, scaled_info = scaled_envs.step(actions)
        for i in np.flatnonzero(terminated):
            np.testing.assert_allclose(
                scaled_info["final_obs"][i], raw_info["final_obs"][i] / half_width, rtol=1e-6
            )
            assert max(abs(scaled_info["final_obs"][i][0]), abs(scaled_info["final_obs"][i][2])) > 0.5
            finals += 1
    assert finals >= 3  # random play ends several episodes in 60 steps
    raw_envs.close()
    scaled_envs.close()


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "override, match",
    [
        (dict(env_id="Pendulum-v1"), "pets"),
        (dict(num_simulations=0), "--num-simulations must be >= 1"),
        (dict(unroll_steps=0), "--unroll-steps must be >= 1"),
        (dict(td_steps=0), "--td-steps must be >= 1"),
    ],
)
def test_bad_input_stops_before_any_work(script, override, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        run_train(script, tmp_path, **override)
    assert not any(tmp_path.iterdir())  # no run directory written


# ----------------------------------------------------------------------------- the true-Q probe
def test_true_q_probe_replays_the_greedy_episode(tmp_path):
    """benchmarks/muzero_true_q.py puts the simulator into a saved state of the greedy episode and plays on:
    for the greedy action that must reproduce the rest of the episode itself, step for step, so its
    true Q equals the discounted return of the remaining steps (plus the bootstrap if it was truncated)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import muzero_true_q

    m = load_script("algos/muzero_jax.py")
    summary = smoke_run("algos/muzero_jax.py")  # SMOKE_ARGS save the model
    r = muzero_true_q.probe(summary["run_dir"], steps=(0, 2, 5, 9))
    assert [row["step"] for row in r["rows"]] == [t for t in (0, 2, 5, 9) if t < r["length"]]
    assert r["rows"] and len(r["xs"]) == r["length"]
    gamma = r["gamma"]
    for row in r["rows"]:
        a, remaining = row["greedy"], r["length"] - row["step"]
        assert row["true_steps"][a] == remaining
        expected = (1 - gamma**remaining) / (1 - gamma) + (
            0.0 if r["terminated"] else gamma**remaining * r["last_value"]
        )
        np.testing.assert_allclose(row["true_q"][a], expected, rtol=1e-9)
    with pytest.raises(FileNotFoundError, match="--save-model"):
        muzero_true_q.probe(str(tmp_path / "missing"))
    # a model of other sizes is refused before any episode is played (from_bytes alone would load it)
    import flax

    other = tmp_path / "other_sizes"
    other.mkdir()
    small = m.MuZeroNet(2, 32, m.Args().latent_size, m.Args().support_size)
    (other / "model.msgpack").write_bytes(
        flax.serialization.to_bytes(
            small.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)), jnp.zeros(1, jnp.int32))
        )
    )
    with pytest.raises(ValueError, match="default network"):
        muzero_true_q.probe(str(other))
