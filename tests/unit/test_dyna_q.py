"""Tier 1 for Dyna-Q: worked problem 9 by hand (a real step plus planning updates on a 3-state chain,
the model update, the Dyna-Q+ bonus; docs/worked_problems.md), planning_steps = 0 equal to plain
Q-learning, the draw of model pairs and the tie-breaking, the mazes of algos/mazes.py (shortest
paths, the wall change at the configured step), and bad input."""

import sys

import gymnasium as gym
import numpy as np
import pytest

from helpers import ROOT, conv, is_torch, load_script, run_train

sys.path.insert(0, str(ROOT / "algos"))  # as when a script runs: the twins `import mazes`
import mazes  # noqa: E402  (registers DynaMaze-v0, BlockingMaze-v0, ShortcutMaze-v0)

TWINS = ["algos/dyna_q_torch.py", "algos/dyna_q_jax.py"]
RIGHT = 1  # the chain's actions: 0 left, 1 right


def ints(script):
    return conv(script, np.int64 if is_torch(script) else np.int32)


def rng(script, seed):
    """The script's random source: a torch.Generator or a jax PRNG key."""
    if is_torch(script):
        import torch

        return torch.Generator().manual_seed(seed)
    import jax

    return jax.random.PRNGKey(seed)


def plan(script, m, q, model, n, alpha, gamma, kappa, t, seed):
    """plan(...) of either twin, returning only the new table (the JAX twin also returns its key)."""
    out = m.plan(q, model, n, alpha, gamma, kappa, t, rng(script, seed))
    return out[0] if isinstance(out, tuple) else out


def chain_model(script, m):
    """The 3-state chain 0 -> 1 -> 2 (goal). From an earlier episode the model knows the last step,
    (1, right) -> (r = 1, s' = 2, terminated), tried at real step 1."""
    return m.model_update(m.new_model(3, 2), 1, RIGHT, 1.0, 2, 1.0, 1, False)


# ----------------------------------------------------------------------------- worked problem
@pytest.mark.parametrize("script", TWINS)
def test_problem9_real_step_plus_planning_by_hand(script):
    """alpha = 0.5, gamma = 0.9; Q[1, right] = 0.5 from that earlier episode, the rest 0.
    Real step (s=0, right, r=0, s'=1):  td = 0 + 0.9 * max Q[1] - Q[0, right] = 0.9 * 0.5 - 0 = 0.45,
                                         Q[0, right] = 0 + 0.5 * 0.45 = 0.225.
    Model update: (0, right) -> (0, 1, not terminated) is now known too.
    Planning, the drawn pairs (1, right), (0, right), (1, right), each update reading the last:
      (1, right): td = 1 - 0.5 = 0.5                           -> Q[1, right] = 0.75
      (0, right): td = 0 + 0.9 * 0.75 - 0.225 = 0.45           -> Q[0, right] = 0.225 + 0.225 = 0.45
      (1, right): td = 1 - 0.75 = 0.25                         -> Q[1, right] = 0.875
    (Updating (0, right) from the table before the planning step on (1, right) would give 0.3375.)"""
    m, f, i = load_script(script), conv(script), ints(script)
    q = f([[0.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    q, td = m.q_update(q, 0, RIGHT, 0.0, 1, 0.0, 0.5, 0.9)
    assert float(td) == pytest.approx(0.45)
    np.testing.assert_allclose(np.asarray(q), [[0, 0.225], [0, 0.5], [0, 0]], atol=1e-6)
    model = m.model_update(chain_model(script, m), 0, RIGHT, 0.0, 1, 0.0, 2, False)
    np.testing.assert_array_equal(np.asarray(model["known"]), [[False, True], [False, True], [False, False]])
    q = m.planning_updates(q, model, i([1, 0, 1]), i([RIGHT] * 3), 0.5, 0.9, 0.0, 2)
    np.testing.assert_allclose(np.asarray(q), [[0, 0.45], [0, 0.875], [0, 0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_problem9_seeded_plan_with_one_known_pair(script):
    """When the model knows one pair, every draw is that pair, whatever the seed: n = 3 planning
    updates on (1, right) from Q = 0 with alpha = 0.5 give 0.5, 0.75, 0.875 = 1 - 0.5^3. n = 0 plans
    nothing."""
    m, f = load_script(script), conv(script)
    q0 = f(np.zeros((3, 2)))
    for seed in (0, 1, 2):
        q = plan(script, m, q0, chain_model(script, m), 3, 0.5, 0.9, 0.0, 5, seed)
        np.testing.assert_allclose(np.asarray(q), [[0, 0], [0, 0.875], [0, 0]], atol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(plan(script, m, q0, chain_model(script, m), 0, 0.5, 0.9, 0.0, 5, 0)), np.zeros((3, 2))
    )


@pytest.mark.parametrize("script", TWINS)
def test_terminal_transition_does_not_bootstrap(script):
    """A terminated transition's target is r alone, however large Q[s'] is."""
    m, f = load_script(script), conv(script)
    q = f([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0]])
    q_new, td = m.q_update(q, 1, RIGHT, 1.0, 2, 1.0, 0.5, 0.9)
    assert float(td) == pytest.approx(1.0)
    q_new, td = m.q_update(q, 1, RIGHT, 1.0, 2, 0.0, 0.5, 0.9)
    assert float(td) == pytest.approx(1.0 + 0.9 * 5.0)
    assert float(q[1, RIGHT]) == 0.0, "q_update leaves its input as it was"


# ----------------------------------------------------------------------------- n = 0 is Q-learning
def transitions_on_the_dyna_maze(steps=400, seed=0):
    """(s, a, r, s', terminated) of a uniform random walk in the Dyna maze, reset at the goal."""
    env, rs = gym.make("DynaMaze-v0"), np.random.default_rng(seed)
    s, _ = env.reset(seed=seed)
    out = []
    for _ in range(steps):
        a = int(rs.integers(4))
        s_next, r, terminated, _, _ = env.step(a)
        out.append((s, a, float(r), s_next, float(terminated)))
        s = env.reset()[0] if terminated else s_next
    return out


@pytest.mark.parametrize("script", TWINS)
def test_zero_planning_steps_is_q_learning(script):
    """q_update, model_update and plan with n = 0, in the order of train's learn, leave the same
    table as plain one-step Q-learning on the same transitions: a numpy loop, and the tabular
    Q-learning script's own update (algos/q_learning_*.py) applied one transition at a time."""
    m, f, i = load_script(script), conv(script), ints(script)
    ql = load_script(script.replace("dyna_q", "q_learning"))
    alpha, gamma = 0.3, 0.95
    q, model = f(np.zeros((54, 4))), m.new_model(54, 4)
    q_ref, q_ql = np.zeros((54, 4), dtype=np.float32), f(np.zeros((54, 4)))
    for t, (s, a, r, s_next, done) in enumerate(transitions_on_the_dyna_maze(), start=1):
        q, _ = m.q_update(q, s, a, r, s_next, done, alpha, gamma)
        model = m.model_update(model, s, a, r, s_next, done, t, False)
        q = plan(script, m, q, model, 0, alpha, gamma, 0.0, t, t)
        q_ref[s, a] += alpha * (r + gamma * (1 - done) * q_ref[s_next].max() - q_ref[s, a])
        targets = ql.q_learning_targets(q_ql, f([r]), i([s_next]), f([done]), gamma)
        q_ql, _ = ql.q_learning_update(q_ql, i([s]), i([a]), targets, f([alpha]))
    assert np.abs(q_ref).max() > 0.1, "the walk reached the goal: some value was learned"
    np.testing.assert_allclose(np.asarray(q), q_ref, atol=1e-6)
    np.testing.assert_allclose(np.asarray(q), np.asarray(q_ql), atol=1e-6)


# ----------------------------------------------------------------------------- model, Dyna-Q+
@pytest.mark.parametrize("script", TWINS)
def test_problem9_model_update_and_dyna_q_plus_bonus(script):
    """The model keeps the last outcome of (s, a). With add_untried every action of s becomes known,
    an untried one as a self-loop with reward 0 tried at step 0. The Dyna-Q+ reward of a planning
    update is r + kappa * sqrt(t - last_tried):
      (1, left), untried, at t = 16: r = 0 + 0.5 * sqrt(16 - 0) = 2, s' = 1 (self-loop):
        td = 2 + 0.9 * max Q[1] - Q[1, left] = 2 + 0.9 * 1 - 0 = 2.9 -> Q[1, left] = 0.5 * 2.9 = 1.45
      (1, right), tried at t = 7, terminated, r = 1: r + 0.5 * sqrt(16 - 7) = 2.5:
        td = 2.5 - Q[1, right] = 2.5 - 1 = 1.5 -> Q[1, right] = 1 + 0.5 * 1.5 = 1.75."""
    m, f, i = load_script(script), conv(script), ints(script)
    model = m.model_update(m.new_model(3, 2), 1, RIGHT, 1.0, 2, 1.0, 7, True)
    np.testing.assert_array_equal(np.asarray(model["known"]), [[False, False], [True, True], [False, False]])
    np.testing.assert_array_equal(np.asarray(model["next_state"]), [[0, 0], [1, 2], [2, 2]])
    np.testing.assert_array_equal(np.asarray(model["last_tried"]), [[0, 0], [0, 7], [0, 0]])
    np.testing.assert_array_equal(np.asarray(model["reward"]), [[0, 0], [0, 1], [0, 0]])
    # a deterministic model answers with the last outcome seen
    again = m.model_update(model, 1, RIGHT, 0.25, 0, 0.0, 9, False)
    assert (
        float(again["reward"][1, RIGHT]),
        int(again["next_state"][1, RIGHT]),
        int(again["last_tried"][1, RIGHT]),
    ) == (0.25, 0, 9)
    assert float(model["reward"][1, RIGHT]) == 1.0, "model_update leaves its input as it was"

    q = f([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    q = m.planning_updates(q, model, i([1]), i([0]), 0.5, 0.9, 0.5, 16)
    assert float(q[1, 0]) == pytest.approx(1.45)
    q = m.planning_updates(q, model, i([1]), i([RIGHT]), 0.5, 0.9, 0.5, 16)
    assert float(q[1, RIGHT]) == pytest.approx(1.75)


@pytest.mark.parametrize("script", TWINS)
def test_model_pairs_are_drawn_uniformly_from_the_known_ones(script):
    m = load_script(script)
    known = np.zeros((6, 4), dtype=bool)
    known[[0, 0, 3, 5], [1, 2, 0, 3]] = True
    states, actions = m.sample_pairs(conv(script, bool)(known), 8000, rng(script, 0))
    states, actions = np.asarray(states), np.asarray(actions)
    assert known[states, actions].all(), "only pairs the model knows are planned"
    counts = np.bincount(states * 4 + actions, minlength=24)[known.flatten()]
    np.testing.assert_allclose(counts / 8000, 0.25, atol=0.03)  # 4 pairs, 1/4 each (std 0.005)


@pytest.mark.parametrize("script", TWINS)
def test_epsilon_greedy_breaks_ties_at_random(script):
    m, f = load_script(script), conv(script)
    q = f([[0.0, 1.0, 1.0, 0.5]])
    source, draws = rng(script, 0), []
    for _ in range(2000):
        if is_torch(script):
            action = m.epsilon_greedy(q, 0, 0.2, source)
        else:
            action, source = m.epsilon_greedy(q, 0, 0.2, source)
        draws.append(int(action))
    freq = np.bincount(draws, minlength=4) / len(draws)
    # greedy (prob 0.8) splits the tie between actions 1 and 2; exploration (0.2) is uniform over 4
    np.testing.assert_allclose(freq, [0.05, 0.45, 0.45, 0.05], atol=0.035)


# ----------------------------------------------------------------------------- the mazes
def test_dyna_maze_shortest_path_is_14():
    env = gym.make("DynaMaze-v0").unwrapped
    assert env.shortest_path_length() == 14  # S&B figure 8.2
    assert (env.num_rows, env.num_cols, env.start, env.goal) == (6, 9, (2, 0), (0, 8))
    assert env.observation_space.n == 54 and env.action_space.n == 4 and int(env.walls.sum()) == 7
    # a greedy policy built from the BFS distances walks a shortest path; one that runs into a wall loops
    distance = {
        (r, c): mazes.shortest_path_length(env.walls, (r, c), env.goal)
        for r in range(6)
        for c in range(9)
        if not env.walls[r, c]
    }
    policy = np.zeros(54, dtype=np.int64)
    for (r, c), d in distance.items():
        if (r, c) != env.goal:
            policy[r * 9 + c] = next(
                a for a in range(4) if distance.get(mazes.move(env.walls, (r, c), a)) == d - 1
            )
    assert env.policy_path_length(policy) == 14
    assert env.policy_path_length(np.full(54, 0)) is None  # "up" forever: stuck at the top edge


def test_maze_dynamics():
    env = gym.make("DynaMaze-v0")
    s, _ = env.reset(seed=0)
    assert s == 2 * 9 + 0
    assert env.step(2)[:4] == (s, 0.0, False, False), "off the grid: stay"
    env.step(3)  # to (2, 1)
    assert env.step(3)[0] == 2 * 9 + 1, "into the wall at (2, 2): stay"
    env.unwrapped.cell = (1, 8)
    assert env.step(0)[:4] == (8, 1.0, True, False), "the goal: reward 1, terminated"


@pytest.mark.parametrize(
    "env_id, before, after, cell", [("BlockingMaze-v0", 10, 16, (3, 8)), ("ShortcutMaze-v0", 16, 10, (3, 8))]
)
def test_wall_changes_at_the_configured_step(env_id, before, after, cell):
    """Steps 1 .. change_at are taken in the first layout, later ones in the second. In the blocking
    maze the cell (3, 8), the right end of the wall, closes; in the shortcut maze it opens."""
    env = gym.make(env_id, change_at=5)
    maze = env.unwrapped
    env.reset(seed=0)
    assert maze.shortest_path_length() == before and not maze.changed
    for _ in range(4):
        env.step(1)  # down, at the bottom edge: stay
    assert maze.shortest_path_length() == before and not maze.changed
    maze.cell = (4, 8)
    s, *_ = env.step(0)  # step 5, up into (3, 8): still the first layout
    assert (s == 3 * 9 + 8) == (env_id == "BlockingMaze-v0")
    assert maze.changed and maze.shortest_path_length() == after
    maze.cell = (4, 8)
    s, *_ = env.step(0)  # step 6: the second layout
    assert (s == 3 * 9 + 8) == (env_id == "ShortcutMaze-v0")
    env.reset()
    assert maze.changed, "reset does not undo the change: the clock counts every step since construction"
    # S&B's defaults: the blocking maze changes after 1000 steps, the shortcut maze after 3000
    assert gym.make(env_id).unwrapped.change_at == {"BlockingMaze-v0": 1000, "ShortcutMaze-v0": 3000}[env_id]


# ----------------------------------------------------------------------------- train
@pytest.mark.parametrize("script", TWINS)
def test_changing_maze_run_reports_both_layouts(script, tmp_path):
    """A short Dyna-Q+ run through the blocking maze's change: the summary reports the first layout's
    and the second layout's shortest paths and the per-episode steps."""
    s = run_train(
        script,
        tmp_path,
        seed=1,
        env_id="BlockingMaze-v0",
        total_timesteps=300,
        planning_steps=5,
        kappa=1e-3,
        change_at=100,
    )
    assert (s["shortest_path_length"], s["changed_shortest_path_length"]) == (10, 16)
    assert sum(s["steps_per_episode"]) <= 300 and s["global_step"] == 300
    assert "steps_to_optimal_after_change" in s and 0.0 <= s["path_optimality"] <= 1.0


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(planning_steps=-1), "--planning-steps must be >= 0"),
        (dict(learning_rate=0.0), "--learning-rate must be in"),
        (dict(gamma=1.5), "--gamma must be in"),
        (dict(epsilon=-0.1), "--epsilon must be in"),
        (dict(kappa=-1.0), "--kappa must be >= 0"),
        (dict(total_timesteps=0), "--total-timesteps must be >= 1"),
        (dict(change_at=100), "--change-at must be unset"),  # the Dyna maze has no second layout
        (dict(env_id="BlockingMaze-v0", change_at=-5), "--change-at must be >= 0"),
    ],
)
def test_bad_arguments_are_refused(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_continuous_observations_are_refused(script, tmp_path):
    m = load_script(script)
    twin = "dqn_torch.py" if is_torch(script) else "dqn_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="CartPole-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_continuous_actions_are_refused(script, tmp_path):
    m = load_script(script)
    twin = "ppo_continuous_torch.py" if is_torch(script) else "ppo_continuous_jax.py"
    with pytest.raises(ValueError, match=twin):
        m.train(m.Args(env_id="Pendulum-v1", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------------------- planning pays
@pytest.mark.parametrize("script", TWINS)
def test_planning_reaches_the_goal_in_fewer_real_steps_than_q_learning(script, tmp_path):
    """The Dyna maze, seeds 1-3: with 50 planning updates per real step the greedy policy first leads
    from start to goal after fewer real steps than with none (plain Q-learning). Measured on seeds
    1-10 (benchmarks/dyna_q_curves.py): n = 50 after 175-1,606 real steps (episode 2-3), n = 0 after
    3,303-7,902 (episode 20-36), so each seed is compared with its own Q-learning run."""
    for seed in (1, 2, 3):
        dyna = run_train(
            script,
            tmp_path / f"n50_{seed}",
            seed=seed,
            env_id="DynaMaze-v0",
            planning_steps=50,
            total_timesteps=3000,
        )
        plain = run_train(
            script,
            tmp_path / f"n0_{seed}",
            seed=seed,
            env_id="DynaMaze-v0",
            planning_steps=0,
            total_timesteps=20_000,
        )
        assert dyna["steps_to_greedy_path"] is not None and plain["steps_to_greedy_path"] is not None
        assert dyna["steps_to_greedy_path"] < plain["steps_to_greedy_path"], (
            seed,
            dyna["steps_to_greedy_path"],
            plain["steps_to_greedy_path"],
        )
