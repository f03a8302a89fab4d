"""Worked problem: DeepSea of size 3 by hand (algos/explore_envs.py, docs/worked_problems.md).

The exploration family's environment: every step moves one row down; "right" (the action given by
the fixed per-cell mapping) moves one column right at a cost of 0.01 / N; "right" in the bottom-right
cell pays +1. For N = 3: the only rewarding path is right, right, right with return
3 * (-0.01 / 3) + 1 = 0.99; any "left" ends the hope of the treasure; all "left" returns 0.
"""

import itertools
import sys

import gymnasium as gym
import numpy as np
import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "algos"))  # as when a script runs: the twins `import explore_envs`
import explore_envs  # noqa: E402


def play(env_id, choose, seed=0, **kwargs):
    """Run one episode; choose(env, row, col) gives the action. Returns (return, positions, obs)."""
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    deep = env.unwrapped
    total, cells, observations, done = 0.0, [], [obs], False
    while not done:
        cells.append((deep.row, deep.col))
        obs, reward, terminated, truncated, _ = env.step(choose(deep, deep.row, deep.col))
        total += reward
        observations.append(obs)
        done = terminated or truncated
    return total, cells, observations


def test_size_3_optimal_path_by_hand():
    right = lambda env, r, c: int(env.mapping[r, c])
    total, cells, observations = play("DeepSea3-v0", right)
    assert cells == [(0, 0), (1, 1), (2, 2)]  # the diagonal
    assert total == pytest.approx(1.0 - 3 * 0.01 / 3)  # 0.99
    assert total == pytest.approx(explore_envs.deep_sea_optimal_return("DeepSea3-v0"))
    assert len(observations) == 4  # three steps: the episode lasts exactly N steps
    # one-hot position, row-major; all zeros after the last step
    assert observations[0].tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert observations[1].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert observations[2].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert observations[3].tolist() == [0] * 9


def test_size_3_every_action_sequence_by_hand():
    """All 8 sequences: only right-right-right reaches the treasure; each right costs 0.01/3."""
    for seq in itertools.product([True, False], repeat=3):  # True = "right" in that cell
        it = iter(seq)
        choose = lambda env, r, c: int(env.mapping[r, c]) if next(it) else 1 - int(env.mapping[r, c])
        total, cells, _ = play("DeepSea3-v0", choose)
        rights = sum(seq)
        expected = -0.01 / 3 * rights + (1.0 if all(seq) else 0.0)
        assert total == pytest.approx(expected), seq
        # transition structure: column = max(col - 1, 0) after "left", col + 1 after "right"
        col = 0
        for (row, c), went_right in zip(cells, seq):
            assert c == col
            col = min(col + 1, 2) if went_right else max(col - 1, 0)
        assert [r for r, _ in cells] == [0, 1, 2]


def test_mapping_is_fixed_by_mapping_seed_not_by_reset_seed():
    a, b = gym.make("DeepSea5-v0"), gym.make("DeepSea5-v0")
    a.reset(seed=1)
    b.reset(seed=2)
    assert np.array_equal(a.unwrapped.mapping, b.unwrapped.mapping)  # one task across vector copies
    c = gym.make("DeepSea5-v0", mapping_seed=7)
    assert not np.array_equal(a.unwrapped.mapping, c.unwrapped.mapping)


def test_stochastic_variant_fails_right_moves_at_rate_one_over_n():
    """A "right" from the top-left cell of DeepSeaStochastic4 stays in column 0 w.p. 1/4."""
    env = gym.make("DeepSeaStochastic4-v0")
    stayed = 0
    for seed in range(4000):
        env.reset(seed=seed)
        env.step(int(env.unwrapped.mapping[0, 0]))
        stayed += env.unwrapped.col == 0
    assert stayed / 4000 == pytest.approx(0.25, abs=0.025)


def test_noisy_tv_screens():
    env = gym.make("NoisyTVDeepSea4-v0", tv_channels=5)
    obs, _ = env.reset(seed=0)
    assert env.action_space.n == 3 and obs.shape == (16 + 5,)
    assert obs[16:].sum() == 0  # TV off at the start
    screens = set()
    for seed in range(60):
        env.reset(seed=seed)
        obs, reward, *_ = env.step(2)
        assert obs[16:].sum() == 1 and reward == 0.0  # exactly one screen lit, no reward
        assert env.unwrapped.col == 0  # the TV action moves like "left" (clipped at the wall)
        screens.add(int(np.argmax(obs[16:])))
        obs, *_ = env.step(0)
        assert obs[16:].sum() == 0  # any other action switches it off
    assert screens == set(range(5))  # fresh uniform draws reach every screen


def test_noisy_tv_uniform_noise():
    env = gym.make("NoisyTVDeepSea4-v0", tv_noise="uniform")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (16 + 8,) and obs[16:].sum() == 0  # TV off at the start
    pixels = []
    for _ in range(3):
        obs, reward, *_ = env.step(2)
        assert reward == 0.0 and env.unwrapped.col == 0  # free, and moves like "left"
        assert np.all((obs[16:] >= 0) & (obs[16:] < 1)) and obs[:16].sum() == 1  # U(0, 1) entries
        pixels.append(obs[16:].copy())
    assert not np.allclose(pixels[0], pixels[1]) and not np.allclose(pixels[1], pixels[2])  # fresh each time
    obs, *_ = env.step(0)
    assert obs[16:].sum() == 0  # any other action switches it off
    all_pixels = []
    for seed in range(200):
        env.reset(seed=seed)
        all_pixels.append(env.step(2)[0][16:])
    assert np.mean(all_pixels) == pytest.approx(0.5, abs=0.02)  # 1,600 U(0, 1) draws: std of the mean 0.007
    with pytest.raises(ValueError, match="tv_noise"):
        explore_envs.DeepSeaEnv(size=4, noisy_tv=True, tv_noise="static")


def test_full_view_tv_hides_the_position_while_it_is_on():
    """NoisyTVFullDeepSea: the screen fills the view for the step after a TV action; the position is
    back after any other action. The dynamics are those of NoisyTVDeepSea."""
    env = gym.make("NoisyTVFullDeepSea4-v0", tv_channels=3)
    obs, _ = env.reset(seed=0)
    assert env.action_space.n == 3 and obs.shape == (16 + 3,)
    assert obs[:16].tolist() == [1] + [0] * 15 and obs[16:].sum() == 0  # TV off: the one-hot cell
    right = int(env.unwrapped.mapping[0, 0])
    obs, *_ = env.step(right)  # to (1, 1)
    assert obs[1 * 4 + 1] == 1
    obs, reward, *_ = env.step(2)  # the TV: moves like "left", to (2, 0), and fills the view
    assert (env.unwrapped.row, env.unwrapped.col) == (2, 0) and reward == 0.0
    assert obs[:16].sum() == 0 and obs[16:].sum() == 1  # no position, one screen
    obs, *_ = env.step(0)  # any other action: the TV goes off, the position (row 3) is back
    assert obs[16:].sum() == 0 and obs[:16].sum() == 1
    assert obs[3 * 4 + env.unwrapped.col] == 1
    obs, _, terminated, *_ = env.step(2)  # the TV on the last step: the final observation is the screen
    assert terminated and obs[:16].sum() == 0 and obs[16:].sum() == 1


def test_full_view_tv_has_tv_channels_observations_in_all_the_task():
    """The point of the full view: 400 episodes of random actions on DeepSea5, the TV pressed in
    many cells, show 4 distinct TV observations (its 4 screens), where the screen beside the position
    shows a new one per (cell, screen) pair."""

    def tv_observations(env_id):
        env = gym.make(env_id, tv_channels=4)
        seen = set()
        for seed in range(400):
            env.reset(seed=seed)
            rng = np.random.default_rng(seed)
            for _ in range(5):
                action = int(rng.integers(3))
                obs, *_ = env.step(action)
                if action == 2:
                    seen.add(obs.tobytes())
        return seen

    assert len(tv_observations("NoisyTVFullDeepSea5-v0")) == 4
    beside = tv_observations("NoisyTVDeepSea5-v0")
    assert len(beside) > 4 * 5  # a screen per reachable cell below the first row, at least


def test_registered_tv_variants():
    """Each TV id is DeepSeaEnv with its documented arguments: NoisyTVUniform shows fresh U(0, 1)
    noise beside the position; NoisyTVOneScreen (the control) lights the same single screen every
    time, so nothing about its TV is random."""
    assert set(explore_envs.VARIANTS) == {
        "DeepSea",
        "DeepSeaStochastic",
        "NoisyTVDeepSea",
        "NoisyTVFullDeepSea",
        "NoisyTVUniformDeepSea",
        "NoisyTVOneScreenDeepSea",
    }
    env = gym.make("NoisyTVUniformDeepSea4-v0")
    env.reset(seed=0)
    first, *_ = env.step(2)
    second, *_ = env.step(2)
    assert first[:16].sum() == 1 and second[:16].sum() == 1  # the position stays visible
    assert 0 < first[16:].min() and first[16:].max() < 1 and not np.allclose(first[16:], second[16:])
    env = gym.make("NoisyTVOneScreenDeepSea4-v0")
    seen = set()
    for seed in range(20):
        env.reset(seed=seed)
        obs, reward, *_ = env.step(2)
        assert obs.shape == (17,) and obs[16] == 1 and obs[:16].sum() == 1 and reward == 0.0
        seen.add(obs.tobytes())
    assert len(seen) == 1  # the TV from the top-left cell: one observation, whatever the seed
    for env_id in ("NoisyTVUniformDeepSea64-v0", "NoisyTVOneScreenDeepSea1-v0"):
        assert explore_envs.is_deep_sea(env_id) and env_id in gym.registry
    assert "NoisyTVOneScreenDeepSea65-v0" not in gym.registry  # sizes 1..64 only


def test_episodes_to_solve():
    returns = [0.0] * 25 + [0.99] * 20
    # the 20-episode mean reaches 0.891 once 18 of the last 20 are successes: after episode 25 + 18
    assert explore_envs.episodes_to_solve(returns, 0.9 * 0.99) == 43
    assert explore_envs.episodes_to_solve([0.0] * 50, 0.5) is None


def test_bad_sizes():
    with pytest.raises(ValueError, match="at least 1"):
        explore_envs.DeepSeaEnv(size=0)
    assert explore_envs.is_deep_sea("DeepSea12-v0") and not explore_envs.is_deep_sea("CartPole-v1")
    assert explore_envs.is_deep_sea("NoisyTVFullDeepSea12-v0")


class _Draws:
    """A stand-in for the env's np_random that returns chosen draws: `random()` the move's uniform
    draw (0.0: the "right" move fails, 1.0: it succeeds) and `normal()` 0.0, the corner noise's mean
    (the return is linear in it)."""

    def __init__(self, uniform):
        self.uniform = uniform

    def random(self, size=None):
        return self.uniform if size is None else np.full(size, self.uniform)

    def normal(self):
        return 0.0

    def integers(self, n):
        return 0


def optimum_by_enumeration(env_id):
    """The optimal expected return by backward induction over every cell, every action and every
    random outcome of the env's own step(): the one-hot cell is the whole state."""
    env = gym.make(env_id).unwrapped
    n = env.size
    outcomes = [(1.0, 1.0)] if env.deterministic else [(1.0 / n, 0.0), (1.0 - 1.0 / n, 1.0)]
    value = np.zeros((n + 1, n))  # value[n] = 0: the episode has ended
    for row in reversed(range(n)):
        for col in range(n):
            best = -np.inf
            for action in range(env.action_space.n):
                q = 0.0
                for prob, draw in outcomes:
                    env.row, env.col, env.np_random = row, col, _Draws(draw)
                    _, reward, _, _, _ = env.step(action)
                    q += prob * (reward + value[env.row, env.col])
                best = max(best, q)
            value[row, col] = best
    return value[0, 0]


@pytest.mark.parametrize("variant", sorted(explore_envs.VARIANTS))
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_optimal_return_of_every_variant_matches_enumeration(variant, size):
    env_id = f"{variant}{size}-v0"
    assert explore_envs.deep_sea_optimal_return(env_id) == pytest.approx(
        optimum_by_enumeration(env_id), abs=1e-12
    )


def test_stochastic_optimum_by_hand():
    # N = 2, p = 1/2: the treasure needs the first move to succeed (1/2); "right" is taken at row 0
    # always and at row 1 only on the diagonal (1/2): 0.5 - 0.005 * (1 + 0.5) = 0.4925
    assert explore_envs.deep_sea_optimal_return("DeepSeaStochastic2-v0") == pytest.approx(0.4925)
    # N = 12: far below the deterministic 0.99, a little above bsuite's always-right 0.3740
    assert explore_envs.deep_sea_optimal_return("DeepSeaStochastic12-v0") == pytest.approx(0.377515, abs=1e-6)
    with pytest.raises(ValueError, match="not a DeepSea id"):
        explore_envs.deep_sea_optimal_return("CartPole-v1")
