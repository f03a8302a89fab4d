"""REINFORCE (Monte Carlo policy gradient) with reward-to-go and a learned baseline -- the JAX twin.

One complete episode per environment, then one gradient step on -mean_t(log pi(a_t | s_t) w_t), w_t
the reward-to-go G_t (or G_0) minus a learned V(s_t) (or not); every update also logs the variance
of all four estimators on the same batch.
Papers: Williams 1992, "Simple Statistical Gradient-Following Algorithms for Connectionist
        Reinforcement Learning", Machine Learning 8; Sutton et al. 1999, "Policy Gradient Methods for
        Reinforcement Learning with Function Approximation", NeurIPS.
Twin:   algos/reinforce_torch.py (`diff algos/reinforce_torch.py algos/reinforce_jax.py`: the framework).
Docs:   docs/algorithms/reinforce.md
Run:    python algos/reinforce_jax.py --seed 1
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
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 300_000
    """total recorded environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments = complete episodes per gradient step"""
    learning_rate: float = 1e-3
    """Adam learning rate (policy and baseline)"""
    gamma: float = 0.99
    """discount factor"""
    reward_to_go: bool = True
    """weight log pi(a_t | s_t) by the return from t on (False: by the whole episode's return)"""
    baseline: bool = True
    """subtract a learned state-value baseline V(s_t) from the weights"""
    norm_adv: bool = True
    """normalise the weights over the batch (mean 0, std 1)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_timesteps=1000, num_envs=4, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
@jax.jit
def returns_to_go(rewards, dones, gamma):
    """Discounted return from each step on, (T, N) arrays, backwards:
        G_t = r_t + gamma * (1 - done_t) * G_{t+1},   G_T = 0
    dones[t] = 1 on the last step of an episode, so nothing flows across an episode boundary (a
    truncation's bootstrap value, if any, is already folded into rewards[t])."""

    def step(next_return, xs):
        reward, done = xs
        ret = reward + gamma * (1.0 - done) * next_return
        return ret, ret

    _, returns = jax.lax.scan(step, jnp.zeros_like(rewards[0]), (rewards, dones), reverse=True)
    return returns


def categorical_log_prob(logits, actions):
    """log pi(a | s) of integer actions under softmax(logits)."""
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp_all, actions[..., None].astype(jnp.int32), axis=-1).squeeze(-1)


def reinforce_loss(logp, weights, mask):
    """The score-function surrogate as a loss: -sum(mask * logp * w) / sum(mask). Its gradient is
    minus the REINFORCE estimate mean_t grad log pi(a_t | s_t) w_t over the recorded steps; the
    weights are constants (no gradient flows into them)."""
    return -(mask * logp * jax.lax.stop_gradient(weights)).sum() / mask.sum()


def masked_normalize(x, mask):
    """(x - mean) / (std + 1e-8) over the recorded steps; unrecorded steps come out as 0."""
    count = mask.sum()
    mean = (x * mask).sum() / count
    std = jnp.sqrt((((x - mean) * mask) ** 2).sum() / (count - 1))
    return mask * (x - mean) / (std + 1e-8)


@jax.jit
def output_layer_score(hidden, logits, actions):
    """grad log pi(a | s) with respect to the policy's output layer (logits = W h + b), in closed
    form: d log pi(a|s) / d logits = onehot(a) - softmax(logits), so the score is
    (onehot(a) - pi(s)) outer h for W (flattened as (num_actions, hidden), row by row) followed by
    onehot(a) - pi(s) for b. hidden (..., H), logits (..., A), actions (...) -> (..., A * H + A)."""
    delta = jax.nn.one_hot(actions, logits.shape[-1], dtype=logits.dtype) - jax.nn.softmax(logits, axis=-1)
    weight_score = (delta[..., :, None] * hidden[..., None, :]).reshape(delta.shape[:-1] + (-1,))
    return jnp.concatenate([weight_score, delta], axis=-1)


@jax.jit
def estimator_variance(scores, weights, mask):
    """Variance across episodes of the single-episode policy-gradient estimate, the trace of its
    covariance. Column e of the (T, N) batch is episode e: g_e = sum_t mask w_t s_t with s_t the
    per-step score (scores (T, N, D)), and the result is sum_e ||g_e - mean_e g||^2 / (N - 1)."""
    per_episode = ((mask * weights)[..., None] * scores).sum(0)
    deviation = per_episode - per_episode.mean(0)
    return (deviation**2).sum() / (per_episode.shape[0] - 1)


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head; the policy and the baseline are two separate MLPs."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x, return_hidden=False):
        x = nn.tanh(layer_init(64)(x))
        x = nn.tanh(layer_init(64)(x))
        out = layer_init(self.out_dim, std=self.head_std)(x)
        return (x, out) if return_hidden else out  # the last hidden layer too, for output_layer_score


class Agent:
    """Separate 64-64 tanh policy and baseline (the baseline is unused with --no-baseline);
    params = {"actor": ..., "critic": ...}."""

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

    def actor_hidden_and_logits(self, params, obs):
        """The policy's last hidden layer h and its logits W h + b (what output_layer_score needs)."""
        return self.actor.apply(params["actor"], obs, return_hidden=True)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions from the policy; the key is split inside the jitted call."""
        key, sample_key = jax.random.split(key)
        logits = self.actor.apply(params["actor"], obs)
        return jax.random.categorical(sample_key, logits, axis=-1), key


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
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.norm_adv and args.num_envs < 2:
        raise ValueError(f"--norm-adv needs --num-envs >= 2 episodes per batch (got {args.num_envs})")
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

    # ---- 1. Setup: seeding, environments, networks, optimiser
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
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    optimizer = optax.adam(args.learning_rate)
    opt_state = optimizer.init(params)

    def loss_fn(params, batch):
        returns = returns_to_go(batch["rewards"], batch["dones"], args.gamma)
        weights = returns if args.reward_to_go else jnp.broadcast_to(returns[0], returns.shape)
        logp = categorical_log_prob(agent.actor.apply(params["actor"], batch["obs"]), batch["actions"])
        values = agent.get_value(params, batch["obs"])
        if args.baseline:
            weights = weights - jax.lax.stop_gradient(values)
        raw_weights = weights
        if args.norm_adv:
            weights = masked_normalize(weights, batch["mask"])
        mask = batch["mask"]
        pg_loss = reinforce_loss(logp, weights, mask)
        v_loss = 0.5 * ((values - returns) ** 2 * mask).sum() / mask.sum()
        loss = pg_loss + v_loss if args.baseline else pg_loss
        return loss, (pg_loss, v_loss, raw_weights)

    @jax.jit
    def update(params, opt_state, batch):
        """One gradient step, one jitted call; the batch is padded to a power-of-two length so
        that only a handful of shapes are ever compiled."""
        grads, (pg_loss, v_loss, raw_weights) = jax.grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        mask = batch["mask"]
        count = mask.sum()
        w_mean = (raw_weights * mask).sum() / count
        probs = jax.nn.softmax(agent.actor.apply(params["actor"], batch["obs"]), axis=-1)
        entropy = -(probs * jnp.log(probs + 1e-12)).sum(-1)
        stats = {
            "policy_loss": pg_loss,
            "value_loss": v_loss,
            "entropy": (entropy * mask).sum() / count,
            # spread of the unnormalised weights over the steps (not the gradient's: grad_var_*)
            "weight_variance": (((raw_weights - w_mean) * mask) ** 2).sum() / (count - 1),
        }
        return params, opt_state, stats

    @jax.jit
    def measure(params, batch):
        """The variance across the batch's episodes of the four single-episode gradient estimates,
        on the same batch and at the parameters the update differentiates at: weights G_0 ("plain"),
        G_t ("rtg"), and with --baseline G_0 - V(s_t) ("baseline") and G_t - V(s_t) ("rtg_baseline"),
        unnormalised, from the same returns (truncation bootstrap included) as the update. The
        gradient is taken with respect to the policy's output layer only (output_layer_score)."""
        returns = returns_to_go(batch["rewards"], batch["dones"], args.gamma)
        hidden, logits = agent.actor_hidden_and_logits(params, batch["obs"])
        scores = output_layer_score(hidden, logits, batch["actions"])
        weights = {"plain": jnp.broadcast_to(returns[0], returns.shape), "rtg": returns}
        if args.baseline:
            values = agent.get_value(params, batch["obs"])
            weights.update(baseline=weights["plain"] - values, rtg_baseline=returns - values)
        return {
            f"grad_var_{name}": estimator_variance(scores, w, batch["mask"]) for name, w in weights.items()
        }

    get_value = jax.jit(agent.get_value)

    episode_returns, recent = [], []
    global_step, iteration, last_print = 0, 0, 0.0
    stats = {}
    grad_variances = {}  # name -> the logged variance of each update, for the summary's medians
    start_time = time.time()
    reset_seed = args.seed

    while global_step < args.total_timesteps:
        iteration += 1
        # ---- 2. Rollout: one complete episode per environment, (T, N) lists of the recorded steps
        next_obs, _ = envs.reset(seed=reset_seed)
        reset_seed = None  # seeded once; later resets continue the environments' generators
        active = np.ones(args.num_envs, dtype=bool)
        obs_l, actions_l, rewards_l, dones_l, mask_l = [], [], [], [], []
        ep_return = np.zeros(args.num_envs)
        while active.any():
            obs_t = np.asarray(next_obs, dtype=np.float32)
            action, key = agent.act(params, obs_t, key)
            action = np.asarray(action)
            next_obs, reward, terminated, truncated, infos = envs.step(action)
            done = (terminated | truncated) & active
            reward = np.where(active, reward, 0.0).astype(np.float32)
            ep_return += reward
            # Time-limit truncation is not a real end: with a baseline, the return goes on as
            # gamma * V(final_obs), folded into this step's reward. Without a baseline there is no
            # estimate of it and the episode is cut there.
            only_truncated = truncated & ~terminated & active
            if args.baseline and only_truncated.any():
                final_obs = np.stack(infos["final_obs"][only_truncated]).astype(np.float32)
                reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))
            obs_l.append(obs_t)
            actions_l.append(action)
            rewards_l.append(reward)
            dones_l.append(done.astype(np.float32))
            mask_l.append(active.astype(np.float32))
            global_step += int(active.sum())
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", len(obs_l), global_step)
            active &= ~done

        # ---- 3. Batch: the recorded steps as (T, N) arrays
        # Padded to a power-of-two length with mask 0: a few compiled shapes instead of one per length.
        length = len(obs_l)
        padded = 1 << (length - 1).bit_length()
        pad = lambda x: np.concatenate(
            [np.stack(x), np.zeros((padded - length,) + np.shape(x[0]), np.float32)]
        )
        batch = {
            "obs": pad(obs_l),
            "actions": pad(actions_l).astype(np.int32),
            "rewards": pad(rewards_l),
            "dones": pad(dones_l),
            "mask": pad(mask_l),
        }

        # ---- 4. Estimator variance: the four estimators on this batch, measured, not used by the update
        # No random numbers are drawn; with --no-baseline there is no V, only "plain" and "rtg".
        measured = measure(params, batch) if args.num_envs >= 2 else {}  # a variance needs 2 episodes

        # ---- 5. Update: one gradient step on the policy (and the baseline's regression on the returns)
        # The weights (reward-to-go or G_0, minus V(s_t)) are formed inside loss_fn.
        params, opt_state, stats = update(params, opt_state, batch)

        # ---- 6. Logging
        stats = {name: float(value) for name, value in {**stats, **measured}.items()}
        for name, value in measured.items():
            grad_variances.setdefault(name.removeprefix("grad_var_"), []).append(float(value))
        sps = int(global_step / (time.time() - start_time))
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or global_step >= args.total_timesteps):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.1f}  "
                f"SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    # ---- 7. Summary: close, save, evaluate
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
        "losses": stats,
        # median over the updates of each estimator's variance (losses/grad_var_*)
        "grad_variance": {
            name: float(np.median(grad_variances[name]))
            for name in ("plain", "rtg", "baseline", "rtg_baseline")
            if name in grad_variances
        },
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(params))
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
