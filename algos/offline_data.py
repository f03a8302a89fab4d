"""Datasets and scripted experts for the imitation and offline-RL family -- shared substrate of
algos/bc_*, dagger_*, gail_*, cql_*, iql_*, td3_bc_* and decision_transformer_*.

Docs:   docs/algorithms/offline.md

Framework-neutral (numpy and gymnasium only): the data and the experts, not the algorithm. Nothing
is downloaded. Every dataset is generated here, on first use, from a scripted expert and noisy or
random versions of it, and cached as an .npz file in D4RL's layout:

    observations (N, obs_dim) float32      actions (N, act_dim) float32, or (N,) int64 (CartPole)
    rewards (N,) float32                   next_observations (N, obs_dim) float32
    terminals (N,) float32: 1 where the environment terminated (no bootstrap from s')
    timeouts (N,) float32: 1 where a time limit or the collector cut the episode (s' is a real
              state: bootstrap from it; the trajectory just ends there in the file)

with, stored beside the arrays, the environment id, the measured reference returns (R_random: the
uniformly random policy; R_expert: the noise-free scripted expert; both means over 100 episodes) and
a sha256 checksum of the arrays. A file whose checksum does not match, or that cannot be read (a
truncated write, a bit flip), is reported and rebuilt, never used. Files are written to a temporary
name and renamed, so parallel test workers never see a half-written dataset.

The experts:
- CartPole-v1: a PD controller on the pole, push right when theta + 0.5 theta_dot + 0.05 x +
  0.2 x_dot > 0 (the cart terms keep it from drifting off the track): 500 on every episode tried.
- Pendulum-v1: energy-based swing-up, then a PD balance. With theta = 0 upright and Pendulum-v1's
  dynamics theta_ddot = 15 sin(theta) + 3 u, the energy E = theta_dot^2 / 2 + 15 (cos(theta) - 1)
  is 0 upright at rest and changes as dE/dt = 3 u theta_dot, so u = -2 E sign(theta_dot) (clipped to
  the torque limit 2) pumps energy in while E < 0; once cos(theta) > 0.9, u = -(10 theta +
  2 theta_dot). Mean return about -140 over random starts (SAC's is about -150).
- PointMazeStitch-v0: straight at the goal (the reference only; no dataset trajectory does this).

The datasets (D4RL's names, scaled to a CPU):
- `<env>-random`: uniformly random actions.
- `<env>-expert`: the expert (Pendulum: plus N(0, 0.1^2) action noise, clipped).
- `<env>-medium`: the expert with each action replaced by a random one with probability 0.5
  (CartPole) / 0.6 (Pendulum), plus N(0, 0.3^2) (Pendulum): a policy about half-way between
  random and expert.
- `<env>-replay`: what a learner's replay buffer holds: episodes whose random-action probability
  falls linearly from 1 (random) to the medium level, so most data is poor and some is decent.
- `pendulum-learner`: a learner's replay buffer as D4RL's medium-replay is one, coherent policies that
  improve: episode k acts with the expert's torque scaled by a gain rising from 0 to 0.4 (about
  "medium") over the dataset, plus Gaussian noise falling from 0.6 to 0.2. Unlike `replay`, whose
  actions are uniformly random with a probability, every action here comes from one policy of one
  skill, so an episode's return says how good its policy was (the TD3+BC learning specs use it).
- `pendulum-medium-expert`: D4RL's medium-expert mixture, medium and expert episodes alternating
  (20k transitions of each): here an episode's return says which policy acted, so conditioning on
  a high return can select the expert's actions (Decision Transformer's case), where in "replay"
  every episode is mostly random.
- `pointmaze-stitch`: see PointMazeStitchEnv. Three kinds of noisy legs, none of which goes from
  the start to the goal: start -> waypoint (1, 0) (return 0, ends by timeout at the waypoint),
  waypoint -> goal (return 1), start -> decoy (return 0.5). The best trajectory in the data from the
  start is the decoy's 0.5; the optimum (1) needs the first two legs glued together at the waypoint:
  dynamic programming does that, return-conditioned imitation does not.

Normalised score (D4RL's): 100 (R - R_random) / (R_expert - R_random).

Verified (tests/unit/test_offline_data.py): the fields line up (next_observations[t] ==
observations[t+1] inside a trajectory, terminals only at true terminations, timeouts at cuts), the
experts' returns, the stitch dataset's legs and returns, the checksum catches a corrupt or truncated
cache file (rebuilt), the normalised score on hand numbers, clear errors for unknown names.
Reproduce (builds every dataset, about 20 s): python algos/offline_data.py
"""

import hashlib
import io
import os
import sys
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np

VERSION = 1  # part of the file name: bump when a builder changes, old caches are then ignored
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "offline"
ARRAY_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
REFERENCE_EPISODES = 100
STITCH_START = np.array([0.0, 0.0])
STITCH_WAYPOINT = np.array([1.0, 0.0])
STITCH_GOAL = np.array([1.0, 1.0])
STITCH_DECOY = np.array([-1.0, 0.0])
STITCH_RADIUS = 0.1
STITCH_STEP = 0.1
STITCH_LIMIT = 50


# ----------------------------------------------------------------------------- the stitch maze
class PointMazeStitchEnv(gym.Env):
    """A point in the plane moved by its velocity: s = (x, y), a in [-1, 1]^2, s' = clip(s + 0.1 a).

    The episode starts near (0, 0). Coming within 0.1 of the goal (1, 1) pays +1 and terminates;
    within 0.1 of the decoy (-1, 0) pays +0.5 and terminates; otherwise the reward is 0. Registered
    as PointMazeStitch-v0 with a 50-step time limit (the goal is 15 steps away)."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.5, 1.5, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = STITCH_START.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = STITCH_START + self.np_random.uniform(-0.05, 0.05, size=2)
        if options and "position" in options:  # the dataset builder starts some legs elsewhere
            self.pos = np.asarray(options["position"], dtype=np.float64).copy()
        return self.pos.astype(np.float32), {}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        self.pos = np.clip(self.pos + STITCH_STEP * action, -1.5, 1.5)
        reward, terminated = 0.0, False
        if np.linalg.norm(self.pos - STITCH_GOAL) < STITCH_RADIUS:
            reward, terminated = 1.0, True
        elif np.linalg.norm(self.pos - STITCH_DECOY) < STITCH_RADIUS:
            reward, terminated = 0.5, True
        return self.pos.astype(np.float32), reward, terminated, False, {}


if "PointMazeStitch-v0" not in gym.registry:
    gym.register("PointMazeStitch-v0", entry_point=PointMazeStitchEnv, max_episode_steps=STITCH_LIMIT)


def make_env(env_id: str, **kwargs):
    """gym.make, with this family's environments registered (importing this module does that)."""
    return gym.make(env_id, **kwargs)


# ----------------------------------------------------------------------------- experts
def cartpole_expert(obs: np.ndarray) -> np.ndarray:
    """PD controller on a batch of CartPole observations (x, x_dot, theta, theta_dot): 1 = push right."""
    obs = np.atleast_2d(obs)
    x, x_dot, theta, theta_dot = obs[:, 0], obs[:, 1], obs[:, 2], obs[:, 3]
    return (theta + 0.5 * theta_dot + 0.05 * x + 0.2 * x_dot > 0).astype(np.int64)


def pendulum_expert(obs: np.ndarray) -> np.ndarray:
    """Energy swing-up plus PD balance on a batch of Pendulum observations (cos, sin, theta_dot)."""
    obs = np.atleast_2d(obs)
    cos, sin, theta_dot = obs[:, 0], obs[:, 1], obs[:, 2]
    theta = np.arctan2(sin, cos)  # 0 upright, in (-pi, pi]
    energy = 0.5 * theta_dot**2 + 15.0 * (cos - 1.0)  # 0 upright at rest, -30 hanging at rest
    swing = np.clip(-2.0 * energy * np.sign(theta_dot + 1e-6), -2.0, 2.0)  # dE/dt = 3 u theta_dot
    balance = np.clip(-(10.0 * theta + 2.0 * theta_dot), -2.0, 2.0)
    return np.where(cos > 0.9, balance, swing)[:, None].astype(np.float32)


def pointmaze_expert(obs: np.ndarray, target=STITCH_GOAL) -> np.ndarray:
    """Straight at `target` at full speed (the stitch maze's reference: return 1 in 15 steps)."""
    obs = np.atleast_2d(obs)
    return np.clip((target - obs) / STITCH_STEP, -1.0, 1.0).astype(np.float32)


EXPERTS = {
    "CartPole-v1": cartpole_expert,
    "Pendulum-v1": pendulum_expert,
    "PointMazeStitch-v0": pointmaze_expert,
}


def expert_policy(env_id: str):
    """The scripted expert of `env_id`: a function from a batch of observations to a batch of actions."""
    if env_id not in EXPERTS:
        raise ValueError(f"no scripted expert for {env_id!r}; experts exist for {sorted(EXPERTS)}")
    return EXPERTS[env_id]


# ----------------------------------------------------------------------------- collection
def _noisy_policy(env_id, action_space, rng, random_prob, noise_std):
    """The expert, with probability random_prob a uniformly random action instead, plus Gaussian noise."""
    expert = EXPERTS[env_id]

    def act(obs):
        if rng.random() < random_prob:
            if isinstance(action_space, gym.spaces.Discrete):
                return int(rng.integers(action_space.n))
            return rng.uniform(action_space.low, action_space.high).astype(np.float32)
        action = expert(obs[None])[0]
        if isinstance(action_space, gym.spaces.Discrete):
            return int(action)
        action = action + noise_std * (action_space.high - action_space.low) / 2 * rng.standard_normal(
            action.shape
        )
        return np.clip(action, action_space.low, action_space.high).astype(np.float32)

    return act


def _learner_policy(env_id, action_space, rng, gain, sigma):
    """The expert's action scaled by `gain`, plus N(0, sigma^2) noise, clipped to the action bounds
    (continuous actions only: one coherent policy of a given skill)."""
    expert = EXPERTS[env_id]

    def act(obs):
        action = gain * expert(obs[None])[0] + sigma * rng.standard_normal(action_space.shape)
        return np.clip(action, action_space.low, action_space.high).astype(np.float32)

    return act


def _rollout(env, act, seed, options=None, stop=None, max_steps=None):
    """One trajectory as a dict of lists; `stop(next_obs)` cuts it (a timeout) like the time limit does."""
    obs, _ = env.reset(seed=seed, options=options)
    traj = {key: [] for key in ARRAY_KEYS}
    steps = 0
    while True:
        action = act(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        steps += 1
        cut = (
            truncated
            or (stop is not None and stop(next_obs))
            or (max_steps is not None and steps >= max_steps)
        )
        for key, value in zip(
            ARRAY_KEYS, (obs, action, reward, next_obs, float(terminated), float(cut and not terminated))
        ):
            traj[key].append(value)
        if terminated or cut:
            return traj
        obs = next_obs


def _stack(trajectories, discrete):
    data = {}
    for key in ARRAY_KEYS:
        values = [v for traj in trajectories for v in traj[key]]
        if key == "actions" and discrete:
            data[key] = np.asarray(values, dtype=np.int64)
        else:
            data[key] = np.asarray(values, dtype=np.float32)
    return data


def _mean_return(env_id, act_fn, episodes, seed):
    env = make_env(env_id)
    returns = []
    for i in range(episodes):
        traj = _rollout(env, act_fn, seed + i)
        returns.append(float(np.sum(traj["rewards"])))
    env.close()
    return float(np.mean(returns))


def reference_returns(env_id: str, episodes: int = REFERENCE_EPISODES):
    """(R_random, R_expert): mean returns of the uniformly random policy and of the noise-free expert
    over `episodes` episodes with fixed seeds (the normalised score's 0 and 100)."""
    env = make_env(env_id)
    rng = np.random.default_rng(12345)
    space = env.action_space
    env.close()
    random_act = _noisy_policy(env_id, space, rng, 1.0, 0.0)
    expert = EXPERTS[env_id]
    if isinstance(space, gym.spaces.Discrete):
        expert_act = lambda obs: int(expert(obs[None])[0])  # noqa: E731
    else:
        expert_act = lambda obs: expert(obs[None])[0]  # noqa: E731
    return (
        _mean_return(env_id, random_act, episodes, 50_000),
        _mean_return(env_id, expert_act, episodes, 60_000),
    )


# (env id, random-action probability, Gaussian noise std, transitions at least) per dataset;
# "replay" ramps the random-action probability from 1 down to the medium level; a tuple of names
# alternates episodes between those datasets' behaviours.
SPECS = {
    "cartpole-random": ("CartPole-v1", 1.0, 0.0, 20_000),
    "cartpole-medium": ("CartPole-v1", 0.5, 0.0, 20_000),
    "cartpole-expert": ("CartPole-v1", 0.0, 0.0, 20_000),
    "cartpole-replay": ("CartPole-v1", "ramp", 0.0, 20_000),
    "pendulum-random": ("Pendulum-v1", 1.0, 0.0, 20_000),
    "pendulum-medium": ("Pendulum-v1", 0.6, 0.3, 20_000),
    "pendulum-expert": ("Pendulum-v1", 0.0, 0.1, 20_000),
    "pendulum-replay": ("Pendulum-v1", "ramp", 0.3, 20_000),
    "pendulum-learner": ("Pendulum-v1", "learner", None, 20_000),
    "pendulum-medium-expert": ("Pendulum-v1", ("pendulum-medium", "pendulum-expert"), None, 40_000),
    "pointmaze-stitch": ("PointMazeStitch-v0", None, 0.3, None),
}
DATASETS = tuple(SPECS)
LEARNER_GAIN_END = 0.4  # the last episodes' gain on the expert's torque (about medium's score)
LEARNER_NOISE = (0.6, 0.2)  # Gaussian torque noise of the first and the last episodes
MEDIUM_RANDOM_PROB = {"CartPole-v1": 0.5, "Pendulum-v1": 0.6}
STITCH_LEGS = 200  # legs of each of the three kinds


def _build_gym_dataset(name, seed):
    env_id, random_prob, noise_std, size = SPECS[name]
    env = make_env(env_id)
    rng = np.random.default_rng(seed)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    trajectories, count, episode = [], 0, 0
    while count < size:
        progress = min(1.0, count / size)
        if random_prob == "learner":
            # a learner's buffer: one coherent policy per episode, its gain growing, its noise shrinking
            act = _learner_policy(
                env_id,
                env.action_space,
                rng,
                LEARNER_GAIN_END * progress,
                LEARNER_NOISE[0] + (LEARNER_NOISE[1] - LEARNER_NOISE[0]) * progress,
            )
        else:
            if random_prob == "ramp":
                # per-step corruption: the first episodes random, later ones close to "medium"
                prob = 1.0 - progress * (1.0 - MEDIUM_RANDOM_PROB[env_id])
                noise = noise_std
            elif isinstance(random_prob, tuple):  # a mixture: episode k acts as dataset k mod len
                _, prob, noise, _ = SPECS[random_prob[episode % len(random_prob)]]
            else:
                prob, noise = random_prob, noise_std
            act = _noisy_policy(env_id, env.action_space, rng, prob, noise)
        traj = _rollout(env, act, seed * 1_000_003 + episode)
        trajectories.append(traj)
        count += len(traj["rewards"])
        episode += 1
    env.close()
    return _stack(trajectories, discrete), env_id


def _build_stitch_dataset(seed):
    env = make_env("PointMazeStitch-v0")
    rng = np.random.default_rng(seed)
    noise_std = SPECS["pointmaze-stitch"][2]

    def towards(target):
        def act(obs):
            action = pointmaze_expert(obs[None], target)[0] + noise_std * rng.standard_normal(2)
            return np.clip(action, -1.0, 1.0).astype(np.float32)

        return act

    near = lambda target: lambda obs: np.linalg.norm(obs - target) < STITCH_RADIUS  # noqa: E731
    trajectories = []
    for leg in range(STITCH_LEGS):
        seed_base = seed * 1_000_003 + 3 * leg
        # start -> waypoint: no reward on the way, the collector cuts it at the waypoint (a timeout)
        trajectories.append(
            _rollout(env, towards(STITCH_WAYPOINT), seed_base, stop=near(STITCH_WAYPOINT), max_steps=30)
        )
        # waypoint -> goal: +1 and termination at the goal
        start = STITCH_WAYPOINT + rng.uniform(-0.08, 0.08, size=2)
        trajectories.append(_rollout(env, towards(STITCH_GOAL), seed_base + 1, options={"position": start}))
        # start -> decoy: +0.5 and termination at the decoy
        trajectories.append(_rollout(env, towards(STITCH_DECOY), seed_base + 2))
    env.close()
    return _stack(trajectories, discrete=False), "PointMazeStitch-v0"


def build_dataset(name: str, seed: int = 0) -> dict:
    """Generate `name` (see the module docstring): the arrays plus env_id and the reference returns."""
    _check_name(name)
    if name == "pointmaze-stitch":
        data, env_id = _build_stitch_dataset(seed)
    else:
        data, env_id = _build_gym_dataset(name, seed)
    ref_min, ref_max = reference_returns(env_id)
    data["env_id"] = np.asarray(env_id)
    data["ref_min_return"] = np.asarray(ref_min, dtype=np.float64)
    data["ref_max_return"] = np.asarray(ref_max, dtype=np.float64)
    return data


# ----------------------------------------------------------------------------- the cache
def checksum(data: dict) -> str:
    """sha256 over every array's name, dtype, shape and bytes, and the metadata, in a fixed order."""
    digest = hashlib.sha256()
    for key in ARRAY_KEYS + ("env_id", "ref_min_return", "ref_max_return"):
        value = np.ascontiguousarray(np.asarray(data[key]))
        digest.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes() if value.dtype.kind != "U" else str(value).encode())
    return digest.hexdigest()


def dataset_path(name: str, data_dir=None) -> Path:
    folder = Path(data_dir or os.environ.get("OFFLINE_DATA_DIR") or DEFAULT_DATA_DIR)
    return folder / f"{name}-v{VERSION}.npz"


def _read(path: Path):
    """The dataset in `path` if it is complete and its checksum matches, else None (with a warning)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {key: npz[key] for key in npz.files}
        stored = str(data.pop("checksum"))
        if stored != checksum(data):
            raise ValueError("checksum mismatch")
        return data
    except Exception as error:  # a truncated zip, a missing field, a flipped bit: rebuild
        warnings.warn(
            f"offline dataset cache {path} is corrupt ({type(error).__name__}: {error}); rebuilding it"
        )
        return None


def _write(path: Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, checksum=np.asarray(checksum(data)), **data)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)  # atomic: a parallel reader sees the old file or the whole new one


_memory = {}


def load_dataset(name: str, data_dir=None) -> dict:
    """The dataset `name` as a dict of numpy arrays (ARRAY_KEYS) plus env_id, ref_min_return and
    ref_max_return; built and cached under data/offline/ (or $OFFLINE_DATA_DIR, or data_dir) on first use."""
    _check_name(name)
    path = dataset_path(name, data_dir)
    if path not in _memory:
        data = _read(path) if path.exists() else None
        if data is None:
            data = build_dataset(name)
            _write(path, data)
        _memory[path] = data
    return {key: value.copy() for key, value in _memory[path].items()}


def _check_name(name):
    if name not in SPECS:
        raise ValueError(f"unknown offline dataset {name!r}; choose one of {', '.join(DATASETS)}")


def dataset_info(name: str, data_dir=None) -> dict:
    """env_id, ref_min_return, ref_max_return, size and whether the actions are discrete."""
    data = load_dataset(name, data_dir)
    return dict(
        env_id=str(data["env_id"]),
        ref_min_return=float(data["ref_min_return"]),
        ref_max_return=float(data["ref_max_return"]),
        size=int(len(data["rewards"])),
        discrete=data["actions"].dtype.kind == "i",
    )


def normalized_score(name: str, returns, data_dir=None):
    """D4RL's normalised score 100 (R - R_random) / (R_expert - R_random), elementwise."""
    info = dataset_info(name, data_dir)
    low, high = info["ref_min_return"], info["ref_max_return"]
    return 100.0 * (np.asarray(returns, dtype=np.float64) - low) / (high - low)


def episode_bounds(data: dict):
    """[(start, end)] of every trajectory (end exclusive), cut where terminals or timeouts is 1."""
    ends = np.flatnonzero((data["terminals"] > 0) | (data["timeouts"] > 0)) + 1
    if len(ends) == 0 or ends[-1] != len(data["rewards"]):
        ends = np.append(ends, len(data["rewards"]))
    starts = np.concatenate([[0], ends[:-1]])
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def episode_returns(data: dict) -> np.ndarray:
    """The undiscounted return of every trajectory in the dataset (the behaviour policy's returns)."""
    return np.array([data["rewards"][s:e].sum() for s, e in episode_bounds(data)], dtype=np.float64)


if __name__ == "__main__":
    names = sys.argv[1:] or DATASETS
    for name in names:
        start = time.time()
        data = load_dataset(name)
        info = dataset_info(name)
        returns = episode_returns(data)
        print(
            f"{name:18s} {info['size']:6d} transitions {len(returns):4d} trajectories  "
            f"return mean {returns.mean():8.2f}  normalised {normalized_score(name, returns.mean()):6.1f}  "
            f"R_random {info['ref_min_return']:8.2f}  R_expert {info['ref_max_return']:8.2f}  "
            f"({time.time() - start:.1f} s)  {dataset_path(name)}"
        )
