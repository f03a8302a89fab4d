"""Policy evaluation and value iteration on a known tabular MDP -- the JAX twin.

The model comes as arrays (P[s, a, s'] and R[s, a]); V^pi by the linear solve and by sweeps, then
V* and Q* by Bellman optimality sweeps to a tolerance, and the greedy policy run in the environment.
Book:   Sutton & Barto 2018, "Reinforcement Learning: An Introduction" (2nd ed.), chapters 3-4;
        Bellman 1957, "Dynamic Programming".
Twin:   algos/value_iteration_torch.py (`diff algos/value_iteration_torch.py algos/value_iteration_jax.py`:
        the framework).
Docs:   docs/algorithms/value_iteration.md
Run:    python algos/value_iteration_jax.py --seed 1
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
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "FrozenLake-v1"
    """gymnasium toy-text environment id that exposes its model (env.unwrapped.P)"""
    gamma: float = 0.99
    """discount factor"""
    tol: float = 1e-6
    """stop value iteration when a sweep changes V by less than this (sup norm)"""
    max_sweeps: int = 10_000
    """upper bound on the number of value-iteration sweeps"""
    eval_sweeps: int = 1000
    """sweeps of iterative policy evaluation of the uniform random policy (compared with the linear solve)"""
    rollout_episodes: int = 1000
    """episodes of the greedy policy run in the environment after planning (the curve)"""
    save_model: bool = False
    """save Q* to the run directory and evaluate the saved greedy policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(max_sweeps=50, eval_sweeps=50, rollout_episodes=20, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
def q_from_v(V, P, R, gamma):
    """One-step lookahead: Q(s, a) = R(s, a) + gamma * sum_s' P(s' | s, a) V(s'). Shapes: V (S,),
    P (S, A, S), R (S, A) -> (S, A)."""
    return R + gamma * P @ V


def bellman_expectation_backup(V, P, R, pi, gamma):
    """(T^pi V)(s) = sum_a pi(a | s) Q_V(s, a), with pi (S, A) a table of action probabilities."""
    return (pi * q_from_v(V, P, R, gamma)).sum(-1)


def policy_evaluation_linear(P, R, pi, gamma):
    """V^pi as the solution of the linear Bellman system (I - gamma P_pi) V = r_pi, where
    P_pi(s, s') = sum_a pi(a | s) P(s' | s, a) and r_pi(s) = sum_a pi(a | s) R(s, a)."""
    P_pi = jnp.einsum("sa,sat->st", pi, P)
    r_pi = (pi * R).sum(-1)
    eye = jnp.eye(P.shape[0], dtype=P.dtype)
    return jnp.linalg.solve(eye - gamma * P_pi, r_pi)


def policy_evaluation_iterative(P, R, pi, gamma, num_sweeps):
    """V^pi by repeating the expectation backup from V = 0: a gamma-contraction, so after k sweeps
    the sup-norm error is at most gamma^k times the initial one."""
    V = jnp.zeros(P.shape[0], dtype=P.dtype)
    return jax.lax.fori_loop(0, num_sweeps, lambda _, V: bellman_expectation_backup(V, P, R, pi, gamma), V)


@jax.jit
def value_iteration_sweep(V, P, R, gamma):
    """One application of the Bellman optimality operator: (T V)(s) = max_a Q_V(s, a).
    Returns (T V, Q_V)."""
    Q = q_from_v(V, P, R, gamma)
    return Q.max(-1), Q


def greedy_policy(Q):
    """argmax_a Q(s, a) per state; ties go to the lowest action index."""
    return Q.argmax(-1)


def value_iteration(P, R, gamma, tol, max_sweeps):
    """Sweep from V = 0 until a sweep changes V by less than tol (sup norm). Returns (V, Q, changes),
    changes[k] = ||V_{k+1} - V_k||_inf. The last Q is Q* = R + gamma P V* up to the tolerance."""
    V = jnp.zeros(P.shape[0], dtype=P.dtype)
    changes = []
    for _ in range(max_sweeps):
        V_new, Q = value_iteration_sweep(V, P, R, gamma)
        changes.append(float(jnp.abs(V_new - V).max()))
        V = V_new
        if changes[-1] < tol:
            break
    return V, q_from_v(V, P, R, gamma), changes


# ----------------------------------------------------------------------------- model and environment
def mdp_from_env(env):
    """(P, R, start) as float32 numpy arrays from a toy-text env's model env.unwrapped.P, where
    P[s][a] is a list of (probability, next_state, reward, terminated). A terminated transition adds
    its reward to R but no mass to P: nothing is bootstrapped after the end."""
    model = env.unwrapped.P
    num_states, num_actions = env.observation_space.n, env.action_space.n
    P = np.zeros((num_states, num_actions, num_states), dtype=np.float32)
    R = np.zeros((num_states, num_actions), dtype=np.float32)
    for s in range(num_states):
        for a in range(num_actions):
            for prob, next_state, reward, terminated in model[s][a]:
                R[s, a] += prob * reward
                if not terminated:
                    P[s, a, next_state] += prob
    start = np.asarray(env.unwrapped.initial_state_distrib, dtype=np.float32)
    return P, R, start


def check_args(args):
    """Refuse bad flags before any environment is built or any run directory written (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words)
        ("seed", args.seed >= 0, ">= 0"),
        ("gamma", 0 <= args.gamma < 1, "in [0, 1) (a contraction)"),
        ("tol", args.tol > 0, "> 0"),
        ("max_sweeps", args.max_sweeps >= 1, ">= 1"),
        ("eval_sweeps", args.eval_sweeps >= 1, ">= 1"),
        ("rollout_episodes", args.rollout_episodes >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    env = gym.make(args.env_id)  # env construction only: no step taken
    if not (
        isinstance(env.observation_space, gym.spaces.Discrete)
        and isinstance(env.action_space, gym.spaces.Discrete)
        and hasattr(env.unwrapped, "P")
    ):
        raise ValueError(
            f"--env-id {args.env_id} does not expose a tabular model (env.unwrapped.P with Discrete "
            f"spaces); this script plans with a known model. Without one, learn from samples: "
            f"algos/q_learning_jax.py (Discrete observations) or algos/ppo_jax.py"
        )
    env.close()


def run_policy(env, policy, episodes, seed):
    """Run a deterministic tabular policy (an int per state); return the undiscounted returns and
    lengths. The first reset is seeded, the following ones continue the env's generator."""
    returns, lengths = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        done, total, length = False, 0.0, 0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(policy[obs]))
            total += float(reward)
            length += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(length)
    return returns, lengths


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved Q* table; run its greedy policy."""
    env = gym.make(env_id)
    with open(model_path, "rb") as f:
        Q = flax.serialization.msgpack_restore(f.read())["q"]
    returns, _ = run_policy(env, np.asarray(greedy_policy(jnp.asarray(Q))), eval_episodes, seed)
    env.close()
    return returns


# ----------------------------------------------------------------------------- planning
def train(args: Args) -> dict:
    check_args(args)
    # ---- 1. Setup: seeding, the model as arrays on the device
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy and the environment (planning is deterministic: it needs no jax key).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)

    env = gym.make(args.env_id)
    P_np, R_np, start_np = mdp_from_env(env)
    # the model (P, R) and every sweep on the device; the greedy policy comes back to act in the env
    P, R, start = jnp.asarray(P_np), jnp.asarray(R_np), jnp.asarray(start_np)
    num_states, num_actions = R.shape
    start_time = time.time()

    # ---- 2. Policy evaluation: the uniform random policy, two ways
    uniform = jnp.full((num_states, num_actions), 1.0 / num_actions)
    v_linear = policy_evaluation_linear(P, R, uniform, args.gamma)
    v_iterative = policy_evaluation_iterative(P, R, uniform, args.gamma, args.eval_sweeps)
    eval_gap = float(jnp.abs(v_linear - v_iterative).max())
    writer.add_scalar("losses/policy_eval_gap", eval_gap, 0)

    # ---- 3. Value iteration: then the error of every sweep against the converged V*
    V, Q, changes = value_iteration(P, R, args.gamma, args.tol, args.max_sweeps)
    errors, V_k = [], jnp.zeros(num_states)
    for _ in changes:
        errors.append(float(jnp.abs(V_k - V).max()))
        V_k, _ = value_iteration_sweep(V_k, P, R, args.gamma)
    for sweep, (change, error) in enumerate(zip(changes, errors)):
        writer.add_scalar("losses/bellman_residual", change, sweep)
        writer.add_scalar("losses/sup_norm_error", error, sweep)
        if sweep > 0 and errors[sweep - 1] > 0:
            writer.add_scalar("charts/contraction_ratio", error / errors[sweep - 1], sweep)

    # ---- 4. Greedy policy: exact value by the linear solve, and run in the environment
    policy = greedy_policy(Q)
    policy_table = jax.nn.one_hot(policy, num_actions, dtype=P.dtype)
    v_greedy = policy_evaluation_linear(P, R, policy_table, args.gamma)
    optimal_start_value = float(start @ V)
    greedy_start_value = float(start @ v_greedy)
    writer.add_scalar("charts/optimal_start_value", optimal_start_value, 0)
    writer.add_scalar("charts/greedy_start_value", greedy_start_value, 0)

    episode_returns, global_step = [], 0
    returns, lengths = run_policy(env, np.asarray(policy), args.rollout_episodes, args.seed)
    for ret, length in zip(returns, lengths):
        global_step += length
        episode_returns.append((global_step, ret))
        writer.add_scalar("charts/episodic_return", ret, global_step)
        writer.add_scalar("charts/episodic_length", length, global_step)
    wall_time = time.time() - start_time
    sps = int(global_step / wall_time)
    writer.add_scalar("charts/SPS", sps, global_step)
    if args.progress:
        print(
            f"\rsweeps {len(changes)}  V*(start) {optimal_start_value:.4f}  greedy mean return "
            f"{np.mean(returns):.4f} over {len(returns)} episodes  SPS {sps:,d}",
            file=sys.stderr,
            flush=True,
        )
    env.close()

    # ---- 5. Summary: save, evaluate
    recent = [r for _, r in episode_returns[-20:]]
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "greedy_mean_return": float(np.mean(returns)) if returns else float("nan"),
        "sup_norm_errors": list(enumerate(errors)),
        "num_sweeps": len(changes),
        "optimal_start_value": optimal_start_value,
        "greedy_start_value": greedy_start_value,
        "v_star": np.asarray(V).tolist(),
        "policy": np.asarray(policy).tolist(),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {
            "policy_eval_gap": eval_gap,
            "bellman_residual": changes[-1],
            "sup_norm_error": errors[-1],
        },
    }
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
