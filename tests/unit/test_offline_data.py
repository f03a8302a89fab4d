"""algos/offline_data.py: the D4RL-layout datasets line up, the experts are experts, the stitch
dataset has exactly the legs it claims, and a corrupt cache file is rebuilt, never used."""

import sys
import warnings

import numpy as np
import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT / "algos"))
import offline_data  # noqa: E402


@pytest.mark.parametrize("name", offline_data.DATASETS)
def test_fields_line_up(name):
    data = offline_data.load_dataset(name)
    n = len(data["rewards"])
    for key in offline_data.ARRAY_KEYS:
        assert len(data[key]) == n, key
    bounds = offline_data.episode_bounds(data)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for start, end in bounds:
        # inside a trajectory, s' of step t is s of step t+1; only the last step may end it
        np.testing.assert_array_equal(
            data["next_observations"][start : end - 1], data["observations"][start + 1 : end]
        )
        ends = data["terminals"][start:end] + data["timeouts"][start:end]
        assert ends[:-1].sum() == 0 and ends[-1] == 1
        assert not (data["terminals"][end - 1] and data["timeouts"][end - 1])
    info = offline_data.dataset_info(name)
    assert info["size"] == n and info["ref_max_return"] > info["ref_min_return"]
    assert info["discrete"] == name.startswith("cartpole")


def test_termination_and_timeouts_follow_the_environment():
    pendulum = offline_data.load_dataset("pendulum-medium")
    # Pendulum never terminates: every trajectory is a 200-step time limit, a timeout, not a terminal
    assert pendulum["terminals"].sum() == 0
    assert all(end - start == 200 for start, end in offline_data.episode_bounds(pendulum))
    expert = offline_data.load_dataset("cartpole-expert")
    # the expert never drops the pole: all its CartPole trajectories end at the 500-step limit
    assert expert["terminals"].sum() == 0 and expert["timeouts"].sum() == len(
        offline_data.episode_bounds(expert)
    )
    random = offline_data.load_dataset("cartpole-random")
    # random play drops the pole: terminations, with next_observations the true last state
    assert random["terminals"].sum() > 100
    last = random["next_observations"][random["terminals"] > 0]
    assert np.all((np.abs(last[:, 2]) > 0.2094) | (np.abs(last[:, 0]) > 2.4))


def test_experts_and_reference_returns():
    cartpole = offline_data.dataset_info("cartpole-expert")
    assert cartpole["ref_max_return"] == 500.0 and cartpole["ref_min_return"] < 30
    pendulum = offline_data.dataset_info("pendulum-expert")
    assert pendulum["ref_max_return"] > -200 and pendulum["ref_min_return"] < -1000
    # the datasets sit where their names say, on the normalised scale
    scores = {
        name: float(
            offline_data.normalized_score(
                name, offline_data.episode_returns(offline_data.load_dataset(name)).mean()
            )
        )
        for name in offline_data.DATASETS
    }
    assert abs(scores["pendulum-random"]) < 5 and abs(scores["cartpole-random"]) < 5
    assert scores["pendulum-expert"] > 95 and scores["cartpole-expert"] > 99
    assert 25 < scores["pendulum-medium"] < 75 and 20 < scores["cartpole-medium"] < 75
    assert scores["pendulum-replay"] < scores["pendulum-medium"]
    assert scores["pendulum-random"] + 15 < scores["pendulum-learner"] < scores["pendulum-medium"]
    # medium-expert: the two behaviours' episodes alternate, so its mean lies between them (the mean
    # of the two, up to the episodes' different start states)
    assert scores["pendulum-medium"] + 20 < scores["pendulum-medium-expert"] < scores["pendulum-expert"] - 20


def test_learner_policies_are_coherent_and_improve():
    """pendulum-learner: episode k's actions are gain_k * expert(s) + noise, the gain 0.4 p and the noise std
    0.6 - 0.4 p at the dataset's progress p. Fitting each episode's gain by least squares on the expert's
    actions: the first quarter of the episodes (p in [0, 0.25]) averages 0.4 * 0.125 = 0.05, the last
    quarter 0.4 * 0.875 = 0.35, and the residual std 0.55 and 0.25 (the clip to +-2 shaves a little)."""
    d = offline_data.load_dataset("pendulum-learner")
    ends = np.flatnonzero((d["terminals"] + d["timeouts"]) > 0) + 1
    expert = np.asarray(offline_data.EXPERTS["Pendulum-v1"](d["observations"]), np.float64).reshape(-1)
    actions = d["actions"][:, 0].astype(np.float64)
    gains, noise = [], []
    for start, end in zip(np.r_[0, ends[:-1]], ends):
        e, a = expert[start:end], actions[start:end]
        gains.append(a @ e / (e @ e))
        noise.append(np.std(a - gains[-1] * e))
    q = len(gains) // 4
    np.testing.assert_allclose([np.mean(gains[:q]), np.mean(gains[-q:])], [0.05, 0.35], atol=0.03)
    np.testing.assert_allclose([np.mean(noise[:q]), np.mean(noise[-q:])], [0.55, 0.25], atol=0.03)


def test_medium_expert_alternates_the_two_behaviours():
    mixed = offline_data.load_dataset("pendulum-medium-expert")
    medium, expert = (
        offline_data.episode_returns(offline_data.load_dataset(f"pendulum-{kind}"))
        for kind in ("medium", "expert")
    )
    returns = offline_data.episode_returns(mixed)
    assert len(returns) == 200 and len(mixed["rewards"]) == 40_000  # 100 episodes of each, 200 steps each
    # even episodes act as "medium" (60% random actions), odd ones as the expert: on average the odd
    # ones score like the expert dataset and the even ones like the medium dataset
    assert abs(returns[1::2].mean() - expert.mean()) < 30 and abs(returns[0::2].mean() - medium.mean()) < 60
    assert returns[1::2].mean() > returns[0::2].mean() + 300


def test_normalized_score_hand_numbers():
    info = offline_data.dataset_info("pendulum-medium")
    low, high = info["ref_min_return"], info["ref_max_return"]
    got = offline_data.normalized_score("pendulum-medium", [low, high, 0.25 * low + 0.75 * high])
    np.testing.assert_allclose(got, [0.0, 100.0, 75.0], atol=1e-9)


def test_stitch_dataset_needs_stitching():
    data = offline_data.load_dataset("pointmaze-stitch")
    bounds = offline_data.episode_bounds(data)
    returns = offline_data.episode_returns(data)
    starts = np.array([data["observations"][s] for s, _ in bounds])
    from_start = np.linalg.norm(starts - offline_data.STITCH_START, axis=1) < 0.1
    from_waypoint = np.linalg.norm(starts - offline_data.STITCH_WAYPOINT, axis=1) < 0.15
    assert (
        from_start.sum() == 2 * offline_data.STITCH_LEGS and from_waypoint.sum() == offline_data.STITCH_LEGS
    )
    # from the start the data's best return is the decoy's 0.5; only the waypoint legs reach the goal
    assert set(np.round(returns[from_start], 3)) == {0.0, 0.5}
    np.testing.assert_array_equal(returns[from_waypoint], 1.0)
    # the start -> waypoint legs end at the waypoint by a timeout (not a terminal)
    ends = np.array([e - 1 for _, e in bounds])
    leg_a = from_start & (returns == 0.0)
    assert np.all(data["timeouts"][ends[leg_a]] == 1) and np.all(data["terminals"][ends[leg_a]] == 0)
    assert np.all(
        np.linalg.norm(data["next_observations"][ends[leg_a]] - offline_data.STITCH_WAYPOINT, axis=1) < 0.1
    )
    info = offline_data.dataset_info("pointmaze-stitch")
    assert info["ref_max_return"] == 1.0 and info["ref_min_return"] < 0.1


def test_stitch_env_rewards():
    env = offline_data.make_env("PointMazeStitch-v0")
    obs, _ = env.reset(seed=0, options={"position": [0.95, 0.85]})
    obs, reward, terminated, truncated, _ = env.step(np.array([0.0, 1.0]))
    np.testing.assert_allclose(obs, [0.95, 0.95], atol=1e-6)
    assert (reward, terminated, truncated) == (1.0, True, False)
    obs, _ = env.reset(seed=0, options={"position": [-0.85, 0.0]})
    _, reward, terminated, _, _ = env.step(np.array([-1.0, 0.0]))
    assert (reward, terminated) == (0.5, True)
    # the expert goes straight to the goal: return 1 within the 50-step limit
    obs, _ = env.reset(seed=1)
    for t in range(50):
        obs, reward, terminated, truncated, _ = env.step(offline_data.pointmaze_expert(obs)[0])
        if terminated or truncated:
            break
    assert terminated and reward == 1.0 and t < 20


def test_corrupt_or_truncated_cache_is_rebuilt(tmp_path):
    name = "pointmaze-stitch"
    fresh = offline_data.load_dataset(name, data_dir=tmp_path)
    path = offline_data.dataset_path(name, tmp_path)
    raw = bytearray(path.read_bytes())
    for damage in ("flip", "truncate"):
        offline_data._memory.clear()
        if damage == "flip":
            # flip one byte inside the stored rewards (np.savez stores arrays uncompressed)
            data = path.read_bytes()
            rewards = offline_data._read(path)["rewards"].tobytes()
            at = data.find(rewards) + 4 * int(np.flatnonzero(fresh["rewards"] == 1.0)[0])
            corrupt = bytearray(data)
            corrupt[at + 3] ^= 0x01
            path.write_bytes(bytes(corrupt))
        else:
            path.write_bytes(bytes(raw[: len(raw) // 2]))
        with pytest.warns(UserWarning, match="corrupt"):
            again = offline_data.load_dataset(name, data_dir=tmp_path)
        for key in offline_data.ARRAY_KEYS:
            np.testing.assert_array_equal(again[key], fresh[key])
        # the rebuilt file is sound again: read without a warning
        offline_data._memory.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            offline_data.load_dataset(name, data_dir=tmp_path)
    offline_data._memory.clear()


def test_bad_names():
    with pytest.raises(ValueError, match="pendulum-medium"):
        offline_data.load_dataset("hopper-medium-v2")
    with pytest.raises(ValueError, match="scripted expert"):
        offline_data.expert_policy("Acrobot-v1")
