"""PPO with the clipped surrogate, continuous (Box) actions -- the JAX twin.

Discrete PPO with a diagonal Gaussian policy (a state-independent log-std), running observation
normalisation and reward scaling, and actions clipped to the bounds only at env.step.
Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347;
        Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
        Advantage Estimation", arXiv:1506.02438.
Twin:   algos/ppo_continuous_torch.py (`diff algos/ppo_continuous_torch.py algos/ppo_continuous_jax.py`
        shows only the framework). Discrete-action PPO: algos/ppo_jax.py.
Docs:   docs/algorithms/ppo_continuous.md
Run:    python algos/ppo_continuous_jax.py --seed 1
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
from tensorboardX import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "InvertedPendulum-v5"
    """gymnasium environment id, continuous Box actions (CleanRL: HalfCheetah-v4)"""
    total_timesteps: int = 100_000
    """total environment steps, summed over the vector envs (CleanRL: 1M)"""
    num_envs: int = 1
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 2048
    """steps per environment per rollout"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor (also of the return whose running std scales the rewards)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 32
    """minibatches per epoch; must divide num_envs * num_steps"""
    update_epochs: int = 10
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """clip the value loss around the rollout's value estimates"""
    ent_coef: float = 0.0
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip"""
    save_model: bool = False
    """save the trained parameters and normalisation statistics, and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_timesteps=512,
    num_envs=2,
    num_steps=128,
    num_minibatches=4,
    update_epochs=2,
    save_model=True,
    eval_episodes=2,
)


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


def gaussian_log_prob(mean, log_std, actions):
    """log N(a; mean, diag(exp(log_std)^2)), summed over the last (action) axis:
        sum_i [ -0.5 ((a_i - mu_i) / sigma_i)^2 - log sigma_i - 0.5 log(2 pi) ].
    log_std broadcasts against mean (a (A,) vector for a state-independent std)."""
    z = (actions - mean) / jnp.exp(log_std)
    return (-0.5 * z**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)


def gaussian_entropy(log_std):
    """Entropy of a diagonal Gaussian, summed over the last (action) axis:
    sum_i [ 0.5 (1 + log(2 pi)) + log sigma_i ]. It does not depend on the mean."""
    return (0.5 * (1.0 + np.log(2.0 * np.pi)) + log_std).sum(-1)


# ----------------------------------------------------------------------------- normalisation
class RunningMeanStd:
    """Running mean and variance over a stream of batches (Chan et al.'s parallel update), in
    float64 numpy: environment-side statistics, the same class in both twins. Starts empty
    (count 0), so after updates it equals the mean and population variance of all data seen."""

    def __init__(self, shape=()):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = 0.0

    def update(self, x):
        x = np.asarray(x, dtype=np.float64)
        batch_mean, batch_var, batch_count = x.mean(axis=0), x.var(axis=0), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean = self.mean + delta * batch_count / total
        self.var = m2 / total
        self.count = total


def normalize_obs(obs, mean, var, clip=10.0):
    """(obs - mean) / sqrt(var + 1e-8), clipped to +-clip, as float32 for the network."""
    return np.clip((obs - mean) / np.sqrt(var + 1e-8), -clip, clip).astype(np.float32)


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
    """Separate 64-64 tanh actor (the Gaussian's mean) and critic; the log-std is a learned vector,
    one entry per action dimension, shared by all states (initialised to 0: sigma = 1).
    params = {"actor_mean": ..., "actor_logstd": ..., "critic": ...}."""

    def __init__(self, obs_dim, action_dim):
        self.obs_dim = obs_dim
        self.action_dim = action_dim
        self.critic = MLP(out_dim=1, head_std=1.0)
        self.actor_mean = MLP(out_dim=action_dim, head_std=0.01)

    def init(self, key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.obs_dim))
        return {
            "actor_mean": self.actor_mean.init(actor_key, dummy),
            "actor_logstd": jnp.zeros(self.action_dim),
            "critic": self.critic.init(critic_key, dummy),
        }

    def get_value(self, params, obs):
        return self.critic.apply(params["critic"], obs).squeeze(-1)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions a = mu + sigma * eps; return (action, log-prob, value, key). The action is
        the unclipped sample: clipping to the bounds happens at env.step, outside the policy. The key
        is split inside the jitted call: splitting outside costs a second dispatch."""
        key, sample_key = jax.random.split(key)
        mean = self.actor_mean.apply(params["actor_mean"], obs)
        action = mean + jnp.exp(params["actor_logstd"]) * jax.random.normal(sample_key, mean.shape)
        logp = gaussian_log_prob(mean, params["actor_logstd"], action)
        return action, logp, self.get_value(params, obs), key

    def evaluate_actions(self, params, obs, actions):
        """Log-prob of given actions, entropy and value, with gradients, for the update."""
        mean = self.actor_mean.apply(params["actor_mean"], obs)
        logp = gaussian_log_prob(mean, params["actor_logstd"], actions)
        entropy = gaussian_entropy(jnp.broadcast_to(params["actor_logstd"], mean.shape))
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
    batch_size = args.num_envs * args.num_steps
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
            f"a divisor of --num-envs * --num-steps = {batch_size}",
        ),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size,
            f">= one rollout, --num-envs * --num-steps = {batch_size}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for continuous "
            f"(Box) actions. For discrete actions use algos/ppo_jax.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters and observation statistics into a fresh network; run the
    deterministic policy (the mean action, clipped to the bounds) with the statistics frozen."""
    env = gym.make(env_id)
    obs_dim = int(np.prod(env.observation_space.shape))
    agent = Agent(obs_dim, int(np.prod(env.action_space.shape)))
    target = {
        "params": agent.init(jax.random.PRNGKey(0)),
        "obs_mean": np.zeros(obs_dim),
        "obs_var": np.ones(obs_dim),
        "obs_count": np.zeros(()),
    }
    with open(model_path, "rb") as f:
        saved = flax.serialization.from_bytes(target, f.read())
    params, obs_mean, obs_var = saved["params"], np.asarray(saved["obs_mean"]), np.asarray(saved["obs_var"])
    deterministic = jax.jit(lambda params, obs: agent.actor_mean.apply(params["actor_mean"], obs))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            mean = np.asarray(deterministic(params, normalize_obs(obs, obs_mean, obs_var)))
            action = np.clip(mean, env.action_space.low, env.action_space.high)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environments, networks, optimiser
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(envs.single_action_space.shape))
    action_low, action_high = envs.single_action_space.low, envs.single_action_space.high
    agent = Agent(obs_dim, action_dim)
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    updates_per_iteration = args.update_epochs * args.num_minibatches
    if args.anneal_lr:
        # The same per-iteration staircase as the torch twin: lr * (1 - (iteration - 1) / iterations).
        schedule = lambda count: (
            args.learning_rate * (1.0 - (count // updates_per_iteration) / num_iterations)
        )
    else:
        schedule = args.learning_rate
    optimizer = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=schedule, eps=1e-5),
    )
    opt_state = optimizer.init(params)

    # Running statistics: observations (per feature) and the discounted return (for the reward scale).
    obs_rms = RunningMeanStd(shape=(obs_dim,))
    return_rms = RunningMeanStd()
    discounted_return = np.zeros(args.num_envs)

    def loss_fn(params, mb):
        logp, entropy, value = agent.evaluate_actions(params, mb["obs"], mb["actions"])
        mb_adv = mb["advantages"]
        if args.norm_adv:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std(ddof=1) + 1e-8)
        pg_loss = ppo_policy_loss(logp, mb["logps"], mb_adv, args.clip_coef)
        v_loss = ppo_value_loss(
            value, mb["values"], mb["returns"], args.clip_coef if args.clip_vloss else None
        )
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

    @jax.jit
    def update(params, opt_state, batch, key):
        """The whole update, epochs x minibatches, as one jitted call (two nested lax.scans)."""

        def minibatch_step(carry, mb):
            params, opt_state = carry
            grads, stats = jax.grad(loss_fn, has_aux=True)(params, mb)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), stats

        def epoch_step(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape((args.num_minibatches, minibatch_size) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, shuffled)

        key, *epoch_keys = jax.random.split(key, args.update_epochs + 1)
        (params, opt_state), stats = jax.lax.scan(epoch_step, (params, opt_state), jnp.stack(epoch_keys))
        return params, opt_state, jax.tree.map(jnp.mean, stats), key

    get_value = jax.jit(agent.get_value)

    # Rollout storage, (T, N, ...), on the host: the envs step on numpy anyway.
    obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((args.num_steps, args.num_envs, action_dim), dtype=np.float32)
    logps_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    rewards_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    start_time = time.time()
    raw_obs = envs.reset(seed=args.seed)[0]
    obs_rms.update(raw_obs)
    next_obs = normalize_obs(raw_obs, obs_rms.mean, obs_rms.var)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            action, logp, value, key = agent.act(params, next_obs, key)
            action, logp, value = jax.device_get((action, logp, value))  # one host transfer, not three
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            # The environment gets the action clipped to its bounds; the buffer keeps the sample
            # itself, whose log-prob is the one the ratio needs.
            raw_obs, reward, terminated, truncated, infos = envs.step(
                np.clip(action, action_low, action_high)
            )
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # Reward scaling: divide by the running std of the discounted return (not mean-centred:
            # the sign of a reward is kept), clip to +-10, and restart the return at episode ends.
            discounted_return = discounted_return * args.gamma + reward
            return_rms.update(discounted_return)
            scaled_reward = np.clip(reward / np.sqrt(return_rms.var + 1e-8), -10.0, 10.0).astype(np.float32)
            discounted_return[done] = 0.0
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation (normalised with the current statistics). Fold gamma * V(final_obs) into
            # this step's scaled reward; the done flag then cuts the recursion as for a termination.
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = normalize_obs(
                    np.stack(infos["final_obs"][only_truncated]), obs_rms.mean, obs_rms.var
                )
                scaled_reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))
            rewards_buf[step] = scaled_reward
            dones_buf[step] = done
            obs_rms.update(raw_obs)
            next_obs = normalize_obs(raw_obs, obs_rms.mean, obs_rms.var)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Advantages: GAE, bootstrapped from the observation after the rollout
        last_value = get_value(params, next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Update: epochs x minibatches over the flattened batch
        batch = {
            "obs": obs_buf.reshape(batch_size, obs_dim),
            "actions": actions_buf.reshape(batch_size, action_dim),
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values_buf.reshape(-1),
        }
        params, opt_state, stats, key = update(params, opt_state, batch, key)
        learning_rate = opt_state[1].hyperparams["learning_rate"]  # the rate this update used

        # ---- 5. Logging
        b_returns, b_values = np.asarray(batch["returns"]), batch["values"]
        var_returns = b_returns.var(ddof=1)
        explained_var = np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
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
    }
    if args.save_model:
        # The policy was trained on normalised observations: its statistics are part of the model.
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(
                flax.serialization.to_bytes(
                    {
                        "params": params,
                        "obs_mean": obs_rms.mean,
                        "obs_var": obs_rms.var,
                        "obs_count": np.asarray(obs_rms.count),
                    }
                )
            )
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
