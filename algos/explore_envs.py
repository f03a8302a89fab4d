"""Hard-exploration environments that fit a CPU -- shared substrate of the exploration family
(algos/count_bonus_*.py, algos/icm_*.py, algos/rnd_*.py).

Docs:   docs/algorithms/exploration.md

Framework-neutral (numpy and gymnasium only): the environment, not the algorithm.

DeepSea (Osband et al. 2019, "Behaviour Suite for Reinforcement Learning", arXiv:1908.03568; and
Osband, Van Roy, Russo & Wen 2019, "Deep Exploration via Randomized Value Functions",
arXiv:1703.07608). An N x N grid; the agent starts in the top-left cell and every step moves it one
row down, so an episode lasts exactly N steps. One action moves it one column right as well, the
other one column left (clipped at the left wall). Which of the two actions means "right" is drawn
once per cell, by `mapping_seed` (the same in every copy of the environment, so that all vector
copies are one task); the agent has to learn it cell by cell. Moving right costs 0.01 / N; taking
"right" in the bottom-right column pays +1. The only way to the treasure is "right" at every one of
the N steps, so the optimum is 1 - 0.01 = 0.99, while always "left" returns 0 at no cost: a
dithering agent reaches the treasure with probability 2^-N per episode, and every step towards
it is punished on the way. The observation is the one-hot N x N position (all zeros after the last
step).

Stochastic variant (bsuite's deep_sea_stochastic): a "right" move fails (the agent goes straight
down) with probability 1 / N, and the two bottom corners add N(0, 1) noise to the reward (bsuite's
"denoised return" is kept in `info["denoised_return"]`). One failed move leaves the treasure out of
reach, so the optimum falls to about (1 - 1/N)^(N-1): 0.378 at N = 12 (`deep_sea_optimal_return`).

Noisy TV (after Burda et al. 2018, "Exploration by Random Network Distillation", arXiv:1810.12894,
and "Large-Scale Study of Curiosity-Driven Learning", arXiv:1808.04355): DeepSea with a third action
that also moves the agent down-left (like "left") and switches on a TV: `tv_channels` extra
observation entries show one of `tv_channels` screens (a one-hot pattern), drawn fresh and uniformly
at random every time the TV action is taken (all zeros otherwise). The next screen is unpredictable
from the state and action (aleatoric), yet there are only `tv_channels` of them: a forward-model
curiosity keeps finding the TV surprising, a novelty bonus such as RND learns every screen and gets
bored. `tv_noise="uniform"` shows continuous noise instead, like a detuned TV: every entry a fresh
U(0, 1) draw on each TV action, so no TV observation ever repeats (novelty that can only run out
by generalising over the noise, not by memorising a few screens).

Where the screen appears matters (docs/algorithms/exploration.md, "The noisy TV"). In `NoisyTVDeepSea`
the screen sits beside the position: every (cell, screen) pair is a new observation, so the TV
multiplies the observations a novelty bonus must get used to by tv_channels + 1, at every cell. In
`NoisyTVFullDeepSea` (`tv_fills_view=True`) the screen fills the view while the TV is on (the
position entries are zero for that step, as when an agent stands in front of a TV and sees nothing
else): there are only tv_channels TV observations in the whole task, so the TV adds no novelty per
cell; but the step after it becomes unpredictable too (the cell reappears from a view that did not
show it), whatever the screens.

Two more ids, for the experiment that separates the TV's noise from the extra action: in
`NoisyTVUniformDeepSea` the screen beside the position is continuous noise (`tv_noise="uniform"`);
in `NoisyTVOneScreenDeepSea` (`tv_channels=1`) the TV has a single screen, so the third action is
as free as in the others but nothing about it is random: the control.

Importing this module registers, for every size N in 1..64, `DeepSea{N}-v0`,
`DeepSeaStochastic{N}-v0` and the four TV variants `NoisyTVDeepSea{N}-v0`, `NoisyTVFullDeepSea{N}-v0`,
`NoisyTVUniformDeepSea{N}-v0`, `NoisyTVOneScreenDeepSea{N}-v0` (e.g. `gym.make("DeepSea10-v0")`;
keyword arguments override `mapping_seed`, `tv_channels`, `tv_noise`, `tv_fills_view`).
MountainCar-v0 is gymnasium's own.
"""

import re

import gymnasium as gym
import numpy as np

MOVE_COST = 0.01  # bsuite's unscaled cost of a "right" move; each one costs MOVE_COST / N
MAX_SIZE = 64
VARIANTS = {  # id prefix -> DeepSeaEnv keyword arguments
    "DeepSea": {},
    "DeepSeaStochastic": {"deterministic": False},
    "NoisyTVDeepSea": {"noisy_tv": True},  # 8 screens beside the position
    "NoisyTVFullDeepSea": {"noisy_tv": True, "tv_fills_view": True},  # 8 screens filling the view
    "NoisyTVUniformDeepSea": {"noisy_tv": True, "tv_noise": "uniform"},  # U(0, 1) noise beside the position
    "NoisyTVOneScreenDeepSea": {"noisy_tv": True, "tv_channels": 1},  # the control: one fixed screen
}
ID_PATTERN = re.compile(r"^(" + "|".join(VARIANTS) + r")(\d+)-v0$")


def deep_sea_optimal_return(env_id: str) -> float:
    """The optimal expected return of a registered DeepSea id.

    Deterministic and noisy-TV variants: N "right" moves (each -0.01/N) and the treasure (+1), 0.99.
    Stochastic: each "right" move fails with probability 1/N (the agent goes straight down), and the
    treasure needs the first N - 1 moves to succeed, with probability p^(N-1), p = 1 - 1/N. After a
    failure the optimal policy moves left for free, so "right" is taken at row r only while the agent
    is still on the diagonal, with probability p^r: the expected cost is 0.01/N * sum_r p^r. bsuite's
    (1 - 1/N)^(N-1) - 0.01 charges every move: the always-right policy, 0.0035 below this at N = 12.
    """
    match = ID_PATTERN.match(env_id)
    if match is None:
        raise ValueError(f"{env_id} is not a DeepSea id (DeepSea{{N}}-v0 or one of its variants)")
    size = int(match.group(2))
    if VARIANTS[match.group(1)].get("deterministic", True):
        return 1.0 - MOVE_COST
    p = 1.0 - 1.0 / size
    return p ** (size - 1) - MOVE_COST / size * sum(p**r for r in range(size))


def action_mapping(size: int, mapping_seed: int) -> np.ndarray:
    """mapping[row, col] is the action that means "right" in that cell (0 or 1), drawn once."""
    return np.random.default_rng(mapping_seed).integers(0, 2, size=(size, size))


class DeepSeaEnv(gym.Env):
    """bsuite's DeepSea as a gymnasium environment (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        size: int = 10,
        deterministic: bool = True,
        mapping_seed: int = 0,
        noisy_tv: bool = False,
        tv_channels: int = 8,
        tv_noise: str = "screens",
        tv_fills_view: bool = False,
    ):
        if size < 1:
            raise ValueError(f"DeepSea size N = {size}: it must be at least 1")
        if noisy_tv and tv_channels < 1:
            raise ValueError(f"tv_channels = {tv_channels}: the noisy TV needs at least one screen")
        if tv_noise not in ("screens", "uniform"):
            raise ValueError(f"tv_noise = {tv_noise!r}: choose 'screens' (one-hot) or 'uniform' (continuous)")
        self.size = size
        self.deterministic = deterministic
        self.noisy_tv = noisy_tv
        self.tv_channels = tv_channels if noisy_tv else 0
        self.tv_noise = tv_noise
        self.tv_fills_view = noisy_tv and tv_fills_view
        self.mapping = action_mapping(size, mapping_seed)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size * size + self.tv_channels,), np.float32)
        self.action_space = gym.spaces.Discrete(3 if noisy_tv else 2)
        self.row = self.col = 0
        self.tv_image = np.zeros(self.tv_channels, np.float32)  # what the TV shows; all zeros: off

    def _obs(self):
        obs = np.zeros(self.size * self.size + self.tv_channels, np.float32)
        tv_on = self.tv_image.any()
        if self.row < self.size and not (self.tv_fills_view and tv_on):  # a full-view TV hides the cell
            obs[self.row * self.size + self.col] = 1.0
        obs[self.size * self.size :] = self.tv_image
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.row = self.col = 0
        self.tv_image[:] = 0.0
        return self._obs(), {}

    def step(self, action):
        action = int(action)
        if not self.action_space.contains(action):
            raise ValueError(f"action {action} outside {self.action_space}")
        if self.row >= self.size:
            raise RuntimeError("step() after the episode ended: call reset()")
        n = self.size
        reward, denoised = 0.0, 0.0
        right = action < 2 and action == self.mapping[self.row, self.col]
        self.tv_image[:] = 0.0  # any action but the TV's switches it off
        if action == 2:
            # the screen index is drawn in both modes: the uniform TV's measured runs used this stream
            screen = int(self.np_random.integers(self.tv_channels))
            if self.tv_noise == "uniform":
                self.tv_image[:] = self.np_random.random(self.tv_channels)
            else:
                self.tv_image[screen] = 1.0
        if self.col == n - 1 and right:  # the treasure: "right" in the bottom-right cell
            reward += 1.0
            denoised += 1.0
        if not self.deterministic and self.row == n - 1 and self.col in (0, n - 1):
            reward += float(self.np_random.normal())  # noisy reward at the bottom corners
        if right:
            if self.deterministic or self.np_random.random() > 1.0 / n:
                self.col = min(self.col + 1, n - 1)
            reward -= MOVE_COST / n
            denoised -= MOVE_COST / n
        else:  # "left" (and the TV action) moves one column left, clipped at the wall
            self.col = max(self.col - 1, 0)
        self.row += 1
        terminated = self.row == n  # the last row: the episode ends (no time limit is involved)
        return self._obs(), reward, terminated, False, {"denoised_return": denoised}


def episodes_to_solve(returns, threshold: float, window: int = 20) -> int | None:
    """The number of episodes after which the mean of the last `window` returns first reaches
    `threshold` (e.g. 0.9 of DeepSea's optimum), or None if it never does."""
    returns = np.asarray(returns, dtype=np.float64)
    if len(returns) < window:
        return None
    means = np.convolve(returns, np.ones(window) / window, mode="valid")
    hits = np.nonzero(means >= threshold)[0]
    return int(hits[0] + window) if len(hits) else None


def _register():
    for n in range(1, MAX_SIZE + 1):
        for name, kwargs in VARIANTS.items():
            env_id = f"{name}{n}-v0"
            if env_id not in gym.registry:
                gym.register(env_id, entry_point=DeepSeaEnv, kwargs={"size": n, **kwargs})


_register()


def is_deep_sea(env_id: str) -> bool:
    """True for the ids this module registers (DeepSea{N}-v0 and its variants)."""
    return ID_PATTERN.match(env_id) is not None
