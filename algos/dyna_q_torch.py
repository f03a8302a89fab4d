"""Tabular Dyna-Q (and Dyna-Q+): Q-learning plus planning on a learned model -- the PyTorch twin.

Each real step: a Q-learning update on the real transition, a table-model update, and planning_steps
Q-learning updates on transitions the model simulates (Dyna-Q+: plus an exploration bonus).
Book:   Sutton & Barto 2018, "Reinforcement Learning: An Introduction" (2nd ed.), sections 8.2-8.3;
Papers: Sutton 1990, "Integrated Architectures for Learning, Planning, and Reacting Based on
        Approximating Dynamic Programming" (ICML); Sutton 1991, "Dyna, an Integrated Architecture
        for Learning, Planning, and Reacting" (SIGART Bulletin 2).
Twin:   algos/dyna_q_jax.py (`diff algos/dyna_q_torch.py algos/dyna_q_jax.py` shows only the framework).
Docs:   docs/algorithms/dyna_q.md
Run:    python algos/dyna_q_torch.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter

import mazes


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environment"""
    cuda: bool = True
    """accepted for parity with the deep scripts (CleanRL's convention); the Q table stays on the CPU"""
    env_id: str = "DynaMaze-v0"
    """DynaMaze-v0, BlockingMaze-v0, ShortcutMaze-v0 (algos/mazes.py) or any Discrete gymnasium id"""
    total_timesteps: int = 3000
    """total real environment steps"""
    planning_steps: int = 50
    """n: planning updates on the model after each real step (0: one-step Q-learning)"""
    learning_rate: float = 0.1
    """step size alpha of the real and the planning updates"""
    gamma: float = 0.95
    """discount factor"""
    epsilon: float = 0.1
    """probability of a uniform random action (greedy ties are broken at random)"""
    kappa: float = 0.0
    """Dyna-Q+ bonus kappa sqrt(tau) on planning rewards, tau: steps since (s, a) was tried (0: Dyna-Q)"""
    change_at: int | None = None
    """real step after which the blocking / shortcut maze changes its wall (None: the maze's own)"""
    save_model: bool = False
    """save the Q table to the run directory and evaluate the saved greedy policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    env_id="BlockingMaze-v0",
    total_timesteps=1000,
    planning_steps=5,
    change_at=400,
    save_model=True,
    eval_episodes=2,
)


# ----------------------------------------------------------------------------- pure math
def q_update(q, s, a, r, s_next, done, alpha, gamma):
    """One-step Q-learning on one transition: Q[s, a] += alpha * (r + gamma * (1 - done) *
    max_a' Q[s', a'] - Q[s, a]). Returns (new Q, TD error); the given table is left as it was."""
    td = r + gamma * (1.0 - done) * q[s_next].max() - q[s, a]
    q = q.clone()
    q[s, a] += alpha * td
    return q, td


def new_model(num_states, num_actions):
    """An empty deterministic model. Every (s, a) starts as a self-loop with reward 0 (the model
    Dyna-Q+ assumes for an action never tried) and unknown; last_tried is the real step of the
    last try (0: never)."""
    return {
        "reward": torch.zeros((num_states, num_actions)),
        "next_state": torch.arange(num_states)
        .repeat_interleave(num_actions)
        .reshape(num_states, num_actions),
        "terminated": torch.zeros((num_states, num_actions)),
        "last_tried": torch.zeros((num_states, num_actions), dtype=torch.int64),
        "known": torch.zeros((num_states, num_actions), dtype=torch.bool),
    }


def model_update(model, s, a, r, s_next, done, t, add_untried):
    """Model learning for a deterministic world: (s, a) -> the outcome just seen (r, s', done), tried
    at real step t, now known. With add_untried (Dyna-Q+) every action of s becomes known: an untried
    one keeps its self-loop with reward 0. Returns the new model; the given one is left as it was."""
    model = {k: v.clone() for k, v in model.items()}
    if add_untried:
        model["known"][s] = True
    model["known"][s, a] = True
    model["reward"][s, a] = r
    model["next_state"][s, a] = s_next
    model["terminated"][s, a] = done
    model["last_tried"][s, a] = t
    return model


def planning_updates(q, model, states, actions, alpha, gamma, kappa, t):
    """Q-learning updates on simulated transitions, one after the other: (s, a) from the given
    lists, (r, s', done) from the model. Dyna-Q+ adds kappa * sqrt(t - last_tried[s, a]) to r (kappa = 0:
    Dyna-Q). Each update reads the Q the previous one wrote, as in S&B's algorithm."""
    tau = (t - model["last_tried"][states, actions]).float()
    rewards = model["reward"][states, actions] + kappa * tau.sqrt()
    next_states = model["next_state"][states, actions]
    dones = model["terminated"][states, actions]
    for s, a, r, s_next, done in zip(
        states.tolist(), actions.tolist(), rewards.tolist(), next_states.tolist(), dones.tolist()
    ):
        q, _ = q_update(q, s, a, r, s_next, done, alpha, gamma)
    return q


def sample_pairs(known, n, generator):
    """n pairs (s, a) drawn uniformly, with replacement, from the pairs the model knows."""
    if n == 0:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    flat = torch.multinomial(known.flatten().float(), n, replacement=True, generator=generator)
    return flat // known.shape[1], flat % known.shape[1]


def plan(q, model, n, alpha, gamma, kappa, t, generator):
    """The planning phase of one real step: n updates on pairs drawn from the model."""
    states, actions = sample_pairs(model["known"], n, generator)
    return planning_updates(q, model, states, actions, alpha, gamma, kappa, t)


def epsilon_greedy(q, state, epsilon, generator):
    """A uniform action with probability epsilon, else a greedy one with ties broken uniformly at
    random (with a zero table every action ties until the first reward comes back)."""
    explore = torch.rand((), generator=generator) < epsilon
    random_action = torch.randint(q.shape[1], (), generator=generator)
    tie_break = torch.rand(q.shape[1], generator=generator)
    greedy_action = torch.where(q[state] == q[state].max(), tie_break, -1.0).argmax()
    return int(torch.where(explore, random_action, greedy_action))


# ----------------------------------------------------------------------------- environment
def make_env(env_id, **kwargs):
    """One environment (Dyna plans between the real steps of one agent). kwargs (change_at) go to
    the changing mazes."""
    return gym.make(env_id, **kwargs)


def check_args(args):
    """Refuse bad flags before any environment is built or any run directory written (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("planning_steps", args.planning_steps >= 0, ">= 0 (0: one-step Q-learning)"),
        ("learning_rate", 0 < args.learning_rate <= 1, "in (0, 1]"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("epsilon", 0 <= args.epsilon <= 1, "in [0, 1]"),
        ("kappa", args.kappa >= 0, ">= 0 (0: Dyna-Q)"),
        ("change_at", args.change_at is None or args.change_at >= 0, ">= 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "change_at",
            args.change_at is None or args.env_id in mazes.CHANGING_MAZES,
            f"unset: only {' and '.join(mazes.CHANGING_MAZES)} change their wall",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    env = make_env(args.env_id)  # env construction only: no step taken
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(env.action_space).__name__} action space; tabular "
            f"Dyna-Q needs Discrete actions. For continuous actions use algos/ppo_continuous_torch.py"
        )
    if not isinstance(env.observation_space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space; "
            f"a table needs Discrete states. With function approximation use algos/dqn_torch.py"
        )
    env.close()


def run_policy(env, policy, episodes, seed, max_steps=1000):
    """Run a deterministic tabular policy; return the undiscounted episode returns. An episode is
    cut after max_steps (a greedy policy may walk in a loop in a maze without a time limit)."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        done, total, steps = False, 0.0, 0
        while not done and steps < max_steps:
            obs, reward, terminated, truncated, _ = env.step(int(policy[obs]))
            total += float(reward)
            done, steps = terminated or truncated, steps + 1
        returns.append(total)
    return returns


def evaluate(model_path, env_id, eval_episodes, seed, env_kwargs):
    """Load the saved Q table; run its greedy policy (env_kwargs: the layout the training ended in)."""
    env = make_env(env_id, **env_kwargs)
    Q = torch.load(model_path, map_location="cpu")["q"]
    returns = run_policy(env, Q.argmax(-1).numpy(), eval_episodes, seed)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)
    # ---- 1. Setup: seeding, the environment, the Q table and the model
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, torch and the environment.
    random.seed(args.seed)
    np.random.seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    # One intra-op thread: the tables are tiny and each step is a handful of small ops.
    torch.set_num_threads(1)
    # the Q table stays on the CPU whatever --cuda says: one tiny update per step gains nothing from a GPU

    env = make_env(args.env_id, **({} if args.change_at is None else {"change_at": args.change_at}))
    maze = env.unwrapped if isinstance(env.unwrapped, mazes.MazeEnv) else None
    num_states, num_actions = int(env.observation_space.n), int(env.action_space.n)
    Q = torch.zeros((num_states, num_actions))
    model = new_model(num_states, num_actions)

    def learn(Q, model, state, action, reward, next_state, terminated, t):
        """One real step of Dyna-Q: direct RL on the real transition, model learning, planning."""
        Q, td = q_update(Q, state, action, reward, next_state, terminated, args.learning_rate, args.gamma)
        model = model_update(model, state, action, reward, next_state, terminated, t, args.kappa > 0)
        Q = plan(Q, model, args.planning_steps, args.learning_rate, args.gamma, args.kappa, t, generator)
        return Q, model, td

    episode_returns, steps_per_episode, recent = [], [], []
    ep_return, ep_length, td_sum, td_count = 0.0, 0, 0.0, 0
    # Milestones of the greedy policy, as (real step, episode): the first time it walks from start to
    # goal ("path"), and the first time on a shortest path ("optimal"). A changing maze has a second
    # layout with its own milestones, reported counted from the change.
    shortest = [None, None] if maze is None else [maze.shortest_path_length(), None]
    milestones = [{"path": None, "optimal": None}, {"path": None, "optimal": None}]
    last_print, stats = 0.0, {"td_error": 0.0}
    start_time = time.time()
    state, _ = env.reset(seed=args.seed)

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 2. Act: epsilon-greedy, greedy ties broken at random
        action = epsilon_greedy(Q, state, args.epsilon, generator)
        next_state, reward, terminated, truncated, _ = env.step(action)
        ep_return += float(reward)
        ep_length += 1
        # ---- 3. Learn: direct RL on the real transition, model learning, planning
        # The model and the target keep `terminated` only: a truncation (a time limit) is no part of the task.
        Q, model, td = learn(
            Q, model, state, action, float(reward), next_state, float(terminated), global_step
        )
        td_sum, td_count = td_sum + abs(float(td)), td_count + 1
        state = next_state

        # ---- 4. Milestones and logging
        if maze is not None:
            layout = int(maze.changed)
            if layout == 1 and shortest[1] is None:
                shortest[1] = maze.shortest_path_length()
            found = milestones[layout]
            if found["optimal"] is None:
                greedy_length = maze.policy_path_length(Q.argmax(-1).numpy())
                reached = {"path": greedy_length is not None, "optimal": greedy_length == shortest[layout]}
                for name in ("path", "optimal"):
                    if reached[name] and found[name] is None:
                        found[name] = (global_step, len(steps_per_episode) + 1)
        if terminated or truncated:
            episode_returns.append((global_step, ep_return))
            steps_per_episode.append(ep_length)
            recent = [r for _, r in episode_returns[-20:]]
            writer.add_scalar("charts/episodic_return", ep_return, global_step)
            writer.add_scalar("charts/episodic_length", ep_length, global_step)
            writer.add_scalar("charts/steps_per_episode", ep_length, len(steps_per_episode))
            state, _ = env.reset()
            ep_return, ep_length = 0.0, 0
        if global_step % 1000 == 0 or global_step == args.total_timesteps:
            stats = {"td_error": td_sum / td_count}
            td_sum, td_count = 0.0, 0
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("losses/td_error", stats["td_error"], global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if maze is not None:  # 0: the greedy policy does not reach the goal
                greedy_length = maze.policy_path_length(Q.argmax(-1).numpy())
                writer.add_scalar("charts/greedy_path_length", greedy_length or 0, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                mean_length = np.mean(steps_per_episode[-20:]) if steps_per_episode else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.3f}  "
                    f"steps/episode(20) {mean_length:7.1f}  SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)
    wall_time = time.time() - start_time

    greedy = Q.argmax(-1)
    summary = {
        "episodic_returns": episode_returns,
        "steps_per_episode": steps_per_episode,
        "steps_per_episode_curve": list(enumerate(steps_per_episode, start=1)),
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "final_mean_length": float(np.mean(steps_per_episode[-20:])) if steps_per_episode else float("nan"),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": stats,
    }
    # ---- 5. Summary: the greedy policy against the shortest path (breadth-first search); save, evaluate
    if maze is not None:
        greedy_length = maze.policy_path_length(greedy.numpy())
        path, optimal = milestones[0]["path"], milestones[0]["optimal"]
        summary.update(
            shortest_path_length=shortest[0],
            steps_to_greedy_path=path and path[0],
            episodes_to_greedy_path=path and path[1],
            steps_to_optimal=optimal and optimal[0],
            episodes_to_optimal=optimal and optimal[1],
            greedy_path_length=greedy_length,
            path_optimality=maze.shortest_path_length() / greedy_length if greedy_length else 0.0,
        )
        if shortest[1] is not None:  # the walls changed during the run: counted from the change
            path, optimal = milestones[1]["path"], milestones[1]["optimal"]
            summary.update(
                changed_shortest_path_length=shortest[1],
                steps_to_greedy_path_after_change=path and path[0] - maze.change_at,
                steps_to_optimal_after_change=optimal and optimal[0] - maze.change_at,
            )
        writer.add_scalar("charts/path_optimality", summary["path_optimality"], global_step)
    env.close()
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save({"q": Q}, model_path)
        final_layout = (
            {} if maze is None or maze.change_at is None else {"change_at": 0 if maze.changed else None}
        )
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, args.seed + 10_000, final_layout)
        for i, r in enumerate(eval_returns):
            writer.add_scalar("eval/episodic_return", r, i)
        summary.update(model_path=model_path, eval_mean_return=float(np.mean(eval_returns)))
    writer.close()
    return summary


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
