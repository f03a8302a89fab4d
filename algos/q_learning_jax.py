"""Tabular Q-learning with epsilon-greedy exploration -- the JAX twin.

A table Q[s, a] moves towards r + gamma max_a' Q[s', a'], by a constant step size or the Robbins-Monro
1 / N(s, a)^lr_power; the greedy policy is then compared with the model's optimum (value iteration).
Papers: Watkins 1989, "Learning from Delayed Rewards" (PhD thesis, Cambridge); Watkins & Dayan 1992,
        "Q-learning", Machine Learning 8; Jaakkola, Jordan & Singh 1994, "On the Convergence of
        Stochastic Iterative Dynamic Programming Algorithms", Neural Computation 6.
Twin:   algos/q_learning_torch.py (`diff algos/q_learning_torch.py algos/q_learning_jax.py`: the framework).
Docs:   docs/algorithms/q_learning.md
Run:    python algos/q_learning_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import flax.serialization
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import tyro
from tensorboardX import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """accepted for parity with the deep scripts (CleanRL's convention); the Q table stays on the CPU"""
    env_id: str = "FrozenLake-v1"
    """gymnasium environment id (Discrete observations and actions; slippery by default)"""
    total_timesteps: int = 200_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    learning_rate: float = 0.05
    """constant step size alpha (with --robbins-monro: unused)"""
    robbins_monro: bool = False
    """step size 1 / N(s, a)^lr_power, N the visit count: sum alpha = inf, sum alpha^2 < inf"""
    lr_power: float = 0.8
    """exponent omega of the Robbins-Monro step size, in (0.5, 1]"""
    gamma: float = 0.99
    """discount factor"""
    start_e: float = 1.0
    """epsilon at the start of the run"""
    end_e: float = 0.1
    """epsilon at the end of the linear decay"""
    exploration_fraction: float = 0.5
    """fraction of the run over which epsilon decays linearly"""
    rollout_episodes: int = 1000
    """episodes of the final greedy policy run in the environment (greedy_mean_return)"""
    save_model: bool = False
    """save the Q table to the run directory and evaluate the saved greedy policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_timesteps=2000, num_envs=4, rollout_episodes=20, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
def q_learning_targets(Q, rewards, next_states, terminated, gamma):
    """r + gamma * (1 - terminated) * max_a' Q[s', a'] for a batch of transitions."""
    return rewards + gamma * (1.0 - terminated) * Q[next_states].max(-1)


def q_learning_update(Q, states, actions, targets, step_sizes):
    """Q[s, a] += alpha * (target - Q[s, a]) for a batch; the TD errors are all computed from the
    same Q, and two transitions with the same (s, a) add their increments. Returns (new Q, TD errors)."""
    td = targets - Q[states, actions]
    return Q.at[states, actions].add(step_sizes * td), td


def robbins_monro_step_size(counts, power):
    """alpha = 1 / N^power for visit counts N >= 1: for 0.5 < power <= 1 the steps sum to infinity
    and their squares do not, the condition of stochastic approximation."""
    return 1.0 / counts.astype(jnp.float32) ** power


def linear_schedule(start_e, end_e, duration, t):
    """epsilon decays linearly from start_e to end_e over duration steps, then stays."""
    return max(end_e, start_e + (end_e - start_e) * t / duration)


def value_iteration(P, R, gamma, tol=1e-6, max_sweeps=100_000):
    """V* and Q* of the model (P[s, a, s'] with terminations as missing mass, R[s, a]): the optimum
    the learned table is compared with."""
    V = jnp.zeros(P.shape[0], dtype=P.dtype)
    for _ in range(max_sweeps):
        Q = R + gamma * P @ V
        V_new = Q.max(-1)
        if float(jnp.abs(V_new - V).max()) < tol:
            V = V_new
            break
        V = V_new
    return V, R + gamma * P @ V


def policy_value(P, R, policy, gamma):
    """Exact value of a deterministic policy (an action per state): (I - gamma P_pi)^-1 r_pi."""
    states = jnp.arange(P.shape[0])
    P_pi, r_pi = P[states, policy], R[states, policy]
    return jnp.linalg.solve(jnp.eye(P.shape[0], dtype=P.dtype) - gamma * P_pi, r_pi)


# ----------------------------------------------------------------------------- environment
def make_envs(env_id, num_envs):
    """Vector env with the autoreset mode chosen explicitly: SAME_STEP. When an episode ends at a
    step, that step already returns the next episode's first observation, and the true last
    observation comes in infos["final_obs"] (masked by infos["_final_obs"])."""
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


def mdp_from_env(env):
    """(P, R, start) as float64 numpy arrays from a toy-text model env.unwrapped.P (None if the
    environment exposes none); a terminated transition adds reward but no continuation mass."""
    if not hasattr(env.unwrapped, "P"):
        return None
    num_states, num_actions = env.observation_space.n, env.action_space.n
    P = np.zeros((num_states, num_actions, num_states))
    R = np.zeros((num_states, num_actions))
    for s in range(num_states):
        for a in range(num_actions):
            for prob, next_state, reward, terminated in env.unwrapped.P[s][a]:
                R[s, a] += prob * reward
                if not terminated:
                    P[s, a, next_state] += prob
    return P, R, np.asarray(env.unwrapped.initial_state_distrib, dtype=np.float64)


def check_args(args):
    """Refuse bad flags before any environment is built or any run directory written (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("learning_rate", 0 < args.learning_rate <= 1, "in (0, 1]"),
        ("lr_power", 0.5 < args.lr_power <= 1, "in (0.5, 1] (the Robbins-Monro conditions)"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("start_e", 0 <= args.start_e <= 1, "in [0, 1]"),
        ("end_e", 0 <= args.end_e <= 1, "in [0, 1]"),
        ("exploration_fraction", 0 < args.exploration_fraction <= 1, "in (0, 1]"),
        ("rollout_episodes", args.rollout_episodes >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("start_e", args.start_e >= args.end_e, ">= --end-e"),
        ("total_timesteps", args.total_timesteps >= args.num_envs, ">= --num-envs"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    env = gym.make(args.env_id)  # env construction only: no step taken
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(env.action_space).__name__} action space; tabular "
            f"Q-learning needs Discrete actions. For continuous actions use algos/ppo_continuous_jax.py"
        )
    if not isinstance(env.observation_space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(env.observation_space).__name__} observation space; "
            f"a table needs Discrete states. With function approximation use algos/dqn_jax.py"
        )
    env.close()


def run_policy(env, policy, episodes, seed):
    """Run a deterministic tabular policy; return the undiscounted episode returns."""
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(policy[obs]))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved Q table; run its greedy policy."""
    env = gym.make(env_id)
    with open(model_path, "rb") as f:
        Q = flax.serialization.msgpack_restore(f.read())["q"]
    returns = run_policy(env, np.asarray(Q).argmax(-1), eval_episodes, seed)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)
    # ---- 1. Setup: seeding, environments, the Q table and its visit counts
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # the Q table stays on the CPU whatever --cuda says: one tiny update per step gains nothing from a GPU
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    num_states, num_actions = int(envs.single_observation_space.n), int(envs.single_action_space.n)
    Q = jnp.zeros((num_states, num_actions))
    counts = jnp.zeros((num_states, num_actions), dtype=jnp.int32)

    @jax.jit
    def act(Q, states, epsilon, key):
        """epsilon-greedy: a uniform action with probability epsilon, else argmax_a Q[s, a].
        The key is split inside the jitted call."""
        key, explore_key, action_key = jax.random.split(key, 3)
        explore = jax.random.uniform(explore_key, (args.num_envs,)) < epsilon
        random_actions = jax.random.randint(action_key, (args.num_envs,), 0, num_actions)
        return jnp.where(explore, random_actions, Q[states].argmax(-1)), key

    @jax.jit
    def learn(Q, counts, states, actions, rewards, next_states, terminated):
        """One batched Q-learning step: targets, visit counts, step sizes, update."""
        targets = q_learning_targets(Q, rewards, next_states, terminated, args.gamma)
        counts = counts.at[states, actions].add(1)
        if args.robbins_monro:
            step_sizes = robbins_monro_step_size(counts[states, actions], args.lr_power)
        else:
            step_sizes = jnp.full((args.num_envs,), args.learning_rate)
        Q, td = q_learning_update(Q, states, actions, targets, step_sizes)
        return Q, counts, td, step_sizes

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print, last_log = 0, 0.0, 0
    stats = {"td_error": 0.0, "step_size": args.learning_rate}
    num_iterations = args.total_timesteps // args.num_envs
    start_time = time.time()
    states = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.int32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Act: epsilon-greedy on the table, epsilon decaying linearly
        global_step += args.num_envs
        epsilon = linear_schedule(
            args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step
        )
        actions, key = act(Q, states, epsilon, key)
        actions = np.asarray(actions)
        obs, reward, terminated, truncated, infos = envs.step(actions)
        ep_return += reward
        ep_length += 1
        done = terminated | truncated
        # ---- 3. Update: one batched Q-learning step on the real transitions
        # The target's next state is the true one: after any end that is infos["final_obs"]
        # (same-step autoreset put the next episode's first state in obs). Only a termination
        # cuts the bootstrap; a truncated episode's value goes on.
        next_states = np.array(obs)
        if done.any():
            next_states[done] = infos["final_obs"][done].astype(np.int64)
        Q, counts, td, step_sizes = learn(
            Q,
            counts,
            states,
            actions,
            reward.astype(np.float32),
            next_states.astype(np.int32),
            terminated.astype(np.float32),
        )
        states = np.asarray(obs, dtype=np.int32)

        # ---- 4. Logging
        for i in np.flatnonzero(done):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-20:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0
        if global_step - last_log >= 1000 or iteration == num_iterations:
            last_log = global_step
            stats = {"td_error": float(jnp.abs(td).mean()), "step_size": float(step_sizes.mean())}
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("losses/td_error", stats["td_error"], global_step)
            writer.add_scalar("charts/learning_rate", stats["step_size"], global_step)
            writer.add_scalar("charts/epsilon", epsilon, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.3f}  "
                    f"SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)
    envs.close()
    wall_time = time.time() - start_time

    # ---- 5. Summary: the greedy policy against the model's optimum (value iteration); save, evaluate
    env = gym.make(args.env_id)
    greedy = jnp.argmax(Q, -1)
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "greedy_mean_return": float(
            np.mean(run_policy(env, np.asarray(greedy), args.rollout_episodes, args.seed))
        ),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": stats,
    }
    model = mdp_from_env(env)
    if model is not None:
        P, R, start = (jnp.asarray(x, dtype=jnp.float32) for x in model)
        V_star, _ = value_iteration(P, R, args.gamma)
        optimal = float(start @ V_star)
        achieved = float(start @ policy_value(P, R, greedy, args.gamma))
        writer.add_scalar("charts/optimal_start_value", optimal, global_step)
        writer.add_scalar("charts/greedy_start_value", achieved, global_step)
        summary.update(
            optimal_start_value=optimal,
            greedy_start_value=achieved,
            optimality_ratio=achieved / optimal if optimal != 0 else float("nan"),
        )
    env.close()
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.msgpack_serialize({"q": np.asarray(Q)}))
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, seed=args.seed + 10_000)
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
