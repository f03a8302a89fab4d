"""PPO with the clipped surrogate, discrete actions, data parallel over devices -- the JAX twin.

algos/ppo_jax.py over the devices with jax.sharding, in one process: the parameters replicated, the
rollout batch sharded along one mesh axis; XLA inserts the all-reduces into the jitted update.
Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347;
        Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
        Advantage Estimation", arXiv:1506.02438.
Twin:   algos/ppo_ddp_torch.py (torchrun, DDP); the single-device original is algos/ppo_jax.py
        (`diff algos/ppo_jax.py algos/ppo_ddp_jax.py` shows the distribution).
Docs:   docs/algorithms/ppo_ddp.md
Run:    XLA_FLAGS=--xla_force_host_platform_device_count=2 python algos/ppo_ddp_jax.py --num-envs 4
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial

import flax.linen as nn
import flax.serialization
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tensorboardX import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 400_000
    """total environment steps, summed over the vector envs of every worker (CleanRL: 500k)"""
    num_envs: int = 8
    """parallel environments per worker, a torchrun rank or a JAX device (CleanRL's ppo.py: 4)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate (CleanRL: 2.5e-4; why 1e-3 here: docs/algorithms/ppo.md)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps (each worker's share)"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch (over all workers' shares: global mean and std)"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """clip the value loss around the rollout's value estimates"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_timesteps=2048, num_envs=4, num_steps=128, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
@jax.jit
def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    so nothing flows across an episode boundary. Returns (advantages, returns = A + V).
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)

    def step(next_advantage, xs):
        reward, value, next_value, done = xs
        not_done = 1.0 - done
        delta = reward + gamma * not_done * next_value - value
        advantage = delta + gamma * lam * not_done * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(last_value), (rewards, values, next_values, dones), reverse=True
    )
    return advantages, advantages + values


def ppo_policy_loss(logp, logp_old, advantages, clip_coef):
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old.

    The min makes the objective pessimistic: once the ratio has moved past the clip in the
    direction the advantage favours, the gradient is zero; a move in the wrong direction is never
    clipped away.
    """
    ratio = jnp.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -jnp.minimum(unclipped, clipped).mean()


def ppo_value_loss(values, values_old, returns, clip_coef):
    """0.5 * mean of the squared error; with clip_coef, the pessimistic max of the plain error and
    the error of a prediction kept within clip_coef of the rollout's estimate (clip_coef=None: plain)."""
    unclipped = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    values_clipped = values_old + jnp.clip(values - values_old, -clip_coef, clip_coef)
    clipped = (values_clipped - returns) ** 2
    return 0.5 * jnp.maximum(unclipped, clipped).mean()


# ----------------------------------------------------------------------------- distribution
def shard_major(x, num_shards):
    """(T, num_shards * N, ...) rollout -> (num_shards * T * N, ...) flat batch in which shard d's
    environments (columns d * N .. d * N + N - 1) are one contiguous block, flattened step-major as a
    torch rank flattens its own (T, N) rollout: sharding the flat batch along its first axis then
    leaves every device with its own environments' steps."""
    T, n = x.shape[0], x.shape[1] // num_shards
    return x.reshape((T, num_shards, n) + x.shape[2:]).swapaxes(0, 1).reshape((-1,) + x.shape[2:])


def normalize_advantages(adv):
    """(A - mean) / (std + 1e-8) with the mean and the (unbiased) std of the GLOBAL minibatch: on a
    sharded minibatch XLA computes the two reductions across the devices (all-reduces it inserts)."""
    return (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)


def make_optimizer(args, num_iterations):
    """Adam after a global-norm clip, with the torch twin's per-iteration linear annealing."""
    updates_per_iteration = args.update_epochs * args.num_minibatches
    if args.anneal_lr:
        # The same per-iteration staircase as the torch twin: lr * (1 - (iteration - 1) / iterations).
        schedule = lambda count: (
            args.learning_rate * (1.0 - (count // updates_per_iteration) / num_iterations)
        )
    else:
        schedule = args.learning_rate
    return optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=schedule, eps=1e-5),
    )


def ppo_loss(agent, args, params, mb):
    logp, entropy, value = agent.evaluate_actions(params, mb["obs"], mb["actions"])
    mb_adv = mb["advantages"]
    if args.norm_adv:
        mb_adv = normalize_advantages(mb_adv)
    pg_loss = ppo_policy_loss(logp, mb["logps"], mb_adv, args.clip_coef)
    v_loss = ppo_value_loss(value, mb["values"], mb["returns"], args.clip_coef if args.clip_vloss else None)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
    logratio = logp - mb["logps"]
    stats = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy_loss,
        # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
        "approx_kl": ((jnp.exp(logratio) - 1) - logratio).mean(),
        "clipfrac": (jnp.abs(jnp.exp(logratio) - 1.0) > args.clip_coef).mean(),
    }
    return loss, stats


def ppo_update(agent, optimizer, args, num_shards, params, opt_state, batch, key):
    """The whole update, epochs x minibatches, as one call to jit (two nested lax.scans), on a flat
    batch made of num_shards equal blocks (one per device). Each epoch draws one permutation of a
    block's positions, and every minibatch takes the same positions of every block, as the torch
    ranks do with their shared shuffling seed; with the blocks sharded over the devices, each
    minibatch is sharded too and XLA all-reduces the gradient. num_shards is the layout, not the
    device count: on one device the same call gives the same minibatches (the equality test)."""
    batch_size = jax.tree.leaves(batch)[0].shape[0]
    shard_size = batch_size // num_shards
    minibatch_size = shard_size // args.num_minibatches

    def minibatch_step(carry, mb):
        params, opt_state = carry
        grads, stats = jax.grad(partial(ppo_loss, agent, args), has_aux=True)(params, mb)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch_step(carry, epoch_key):
        perm = jax.random.permutation(epoch_key, shard_size)

        def minibatches(x):  # (shards * shard_size, ...) -> (minibatches, shards * minibatch_size, ...)
            x = x.reshape((num_shards, shard_size) + x.shape[1:])[:, perm]
            x = x.reshape((num_shards, args.num_minibatches, minibatch_size) + x.shape[2:]).swapaxes(0, 1)
            return x.reshape((args.num_minibatches, num_shards * minibatch_size) + x.shape[3:])

        return jax.lax.scan(minibatch_step, carry, jax.tree.map(minibatches, batch))

    key, *epoch_keys = jax.random.split(key, args.update_epochs + 1)
    (params, opt_state), stats = jax.lax.scan(epoch_step, (params, opt_state), jnp.stack(epoch_keys))
    return params, opt_state, jax.tree.map(jnp.mean, stats), key


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head; the actor and the critic are two separate MLPs."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(layer_init(64)(x))
        x = nn.tanh(layer_init(64)(x))
        return layer_init(self.out_dim, std=self.head_std)(x)


class Agent:
    """Separate 64-64 tanh actor and critic (no shared trunk); params = {"actor": ..., "critic": ...}."""

    def __init__(self, obs_dim, num_actions):
        self.obs_dim = obs_dim
        self.critic = MLP(out_dim=1, head_std=1.0)
        self.actor = MLP(out_dim=num_actions, head_std=0.01)

    def init(self, key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.obs_dim))
        return {"actor": self.actor.init(actor_key, dummy), "critic": self.critic.init(critic_key, dummy)}

    def get_value(self, params, obs):
        return self.critic.apply(params["critic"], obs).squeeze(-1)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions; return (action, log-prob, value, key). The key is split inside the
        jitted call: splitting outside would cost a second dispatch per step."""
        key, sample_key = jax.random.split(key)
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        action = jax.random.categorical(sample_key, logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1).squeeze(-1)
        return action, logp, self.get_value(params, obs), key

    def evaluate_actions(self, params, obs, actions):
        """Log-prob of given actions, entropy and value, with gradients, for the update."""
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=-1).squeeze(-1)
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
        return logp, entropy, self.get_value(params, obs)


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


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    batch_size = args.num_envs * args.num_steps  # one worker's share
    workers = len(jax.devices() if args.cuda else jax.devices("cpu"))  # the devices of the mesh
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("num_steps", args.num_steps >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size} (each worker's share)",
        ),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size * workers,
            f">= one rollout of {workers} workers x --num-envs x --num-steps = {batch_size * workers}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_jax.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(agent.init(jax.random.PRNGKey(0)), f.read())
    greedy = jax.jit(lambda params, obs: agent.actor.apply(params["actor"], obs).argmax(-1))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            action = int(greedy(params, obs))
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: the mesh, seeding, environments, networks, optimiser
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU.
    devices = jax.devices() if args.cuda else jax.devices("cpu")
    with jax.default_device(devices[0]):
        # One mesh axis, "batch", over every device: a sharded array splits its first axis into equal
        # device blocks, a replicated one is whole on every device.
        num_shards = len(devices)
        mesh = Mesh(np.array(devices), ("batch",))
        sharded, replicated = (
            NamedSharding(mesh, PartitionSpec("batch")),
            NamedSharding(mesh, PartitionSpec()),
        )
        batch_size = args.num_envs * args.num_steps  # this device's share of the global batch
        num_iterations = args.total_timesteps // (batch_size * num_shards)
        script = os.path.basename(__file__).removesuffix(".py")
        run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
        writer = SummaryWriter(run_dir)  # one process: it logs alone, as the torch twin's rank 0
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
            + f"\n|world_size|{num_shards}|",
        )

        # Seeding: python, numpy, jax and the environments (env i of device d gets seed + d * num_envs + i:
        # one vector env, device d's environments a contiguous block). One key for the whole run: the
        # sampling of a sharded batch draws the same numbers as unsharded (partitionable threefry).
        random.seed(args.seed)
        np.random.seed(args.seed)
        key = jax.random.PRNGKey(args.seed)

        num_envs = args.num_envs * num_shards
        envs = make_envs(args.env_id, num_envs)
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        agent = Agent(obs_dim, int(envs.single_action_space.n))
        key, init_key = jax.random.split(key)
        params = jax.device_put(agent.init(init_key), replicated)  # every device holds the parameters
        optimizer = make_optimizer(args, num_iterations)
        opt_state = optimizer.init(params)
        key = jax.device_put(key, replicated)
        update = jax.jit(partial(ppo_update, agent, optimizer, args, num_shards))

        get_value = jax.jit(agent.get_value)

        # Rollout storage, (T, N, ...), on the host: the envs step on numpy anyway.
        obs_buf = np.zeros((args.num_steps, num_envs, obs_dim), dtype=np.float32)
        actions_buf = np.zeros((args.num_steps, num_envs), dtype=np.int32)
        logps_buf = np.zeros((args.num_steps, num_envs), dtype=np.float32)
        rewards_buf = np.zeros((args.num_steps, num_envs), dtype=np.float32)
        dones_buf = np.zeros((args.num_steps, num_envs), dtype=np.float32)
        values_buf = np.zeros((args.num_steps, num_envs), dtype=np.float32)

        episode_returns, recent = [], []
        ep_return = np.zeros(num_envs)
        ep_length = np.zeros(num_envs, dtype=np.int64)
        global_step, last_print = 0, 0.0
        start_time = time.time()
        next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

        for iteration in range(1, num_iterations + 1):
            # ---- 2. Rollout: each device acts for its block of environments
            for step in range(args.num_steps):
                global_step += num_envs
                obs_buf[step] = next_obs
                action, logp, value, key = agent.act(params, jax.device_put(next_obs, sharded), key)
                action, logp, value = jax.device_get((action, logp, value))  # one host transfer, not three
                actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
                obs, reward, terminated, truncated, infos = envs.step(action)
                ep_return += reward
                ep_length += 1
                done = terminated | truncated
                # Time-limit truncation is not a real end: the return goes on from the true final
                # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
                # cuts the recursion as for a termination (whose bootstrap is 0).
                reward = reward.astype(np.float32)
                only_truncated = truncated & ~terminated
                if only_truncated.any():
                    final_obs = np.stack(infos["final_obs"][only_truncated]).astype(np.float32)
                    reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))
                rewards_buf[step] = reward
                dones_buf[step] = done
                next_obs = np.asarray(obs, dtype=np.float32)
                for i in np.flatnonzero(done):
                    episode_returns.append((global_step, float(ep_return[i])))
                    recent = [r for _, r in episode_returns[-20:]]
                    writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                    writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                    ep_return[i], ep_length[i] = 0.0, 0

            # ---- 3. Advantages: GAE per env column, bootstrapped from the observation after the rollout
            last_value = get_value(params, next_obs)
            advantages, returns = compute_gae(
                rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
            )

            # ---- 4. Update: epochs x minibatches over the flattened batch, sharded device-major
            rollout = {
                "obs": obs_buf,
                "actions": actions_buf,
                "logps": logps_buf,
                "advantages": np.asarray(advantages),
                "returns": np.asarray(returns),
                "values": values_buf,
            }
            batch = jax.device_put({k: shard_major(v, num_shards) for k, v in rollout.items()}, sharded)
            params, opt_state, stats, key = update(params, opt_state, batch, key)
            learning_rate = opt_state[1].hyperparams["learning_rate"]  # the rate this update used

            # ---- 5. Logging
            b_returns, b_values = rollout["returns"].reshape(-1), rollout["values"].reshape(-1)
            var_returns = b_returns.var(ddof=1)  # explained variance of the whole batch
            explained_var = (
                np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
            )
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("charts/learning_rate", float(learning_rate), global_step)
            for name, value in stats.items():
                writer.add_scalar(f"losses/{name}", float(value), global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.1f}  "
                    f"SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
        # ---- 6. Summary: close, save, evaluate
        if args.progress:
            print(file=sys.stderr)

        envs.close()
        wall_time = time.time() - start_time
        summary = {
            "episodic_returns": episode_returns,
            "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
            "sps": global_step / wall_time,
            "wall_time": wall_time,
            "global_step": global_step,
            "run_dir": run_dir,
            "losses": {name: float(value) for name, value in stats.items()},
            "world_size": num_shards,
            "rank": 0,
        }
        if args.save_model:
            model_path = os.path.join(run_dir, "model.msgpack")
            with open(model_path, "wb") as f:
                f.write(flax.serialization.to_bytes(jax.device_get(params)))
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
