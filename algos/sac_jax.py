"""Soft actor-critic (SAC) with automatic temperature, continuous actions -- the JAX twin.

Off-policy actor-critic for the maximum-entropy objective: twin soft Q-critics with Polyak targets,
a tanh-squashed Gaussian actor, and a temperature tuned so that the entropy tracks a target.
Papers: Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep Reinforcement
        Learning with a Stochastic Actor", arXiv:1801.01290;
        Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905.
Twin:   algos/sac_torch.py (`diff algos/sac_torch.py algos/sac_jax.py` shows only the framework).
Docs:   docs/algorithms/sac.md
Run:    python algos/sac_jax.py --seed 1
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
    env_id: str = "Pendulum-v1"
    """gymnasium environment id (Box actions with finite bounds; CleanRL: Hopper-v4)"""
    total_timesteps: int = 30_000
    """total environment steps (CleanRL: 1M)"""
    buffer_size: int = 1_000_000
    """replay buffer capacity (capped at total_timesteps)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the replay buffer"""
    learning_starts: int = 5_000
    """warm-up: uniformly random actions and no update for this many steps"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor"""
    q_lr: float = 1e-3
    """Adam learning rate of the two critics (paper: 3e-4)"""
    alpha_lr: float = 1e-3
    """Adam learning rate of log alpha, the automatic temperature (paper: 3e-4)"""
    alpha: float = 0.2
    """entropy temperature: the fixed value, or the initial one with --autotune (CleanRL: 1.0)"""
    autotune: bool = True
    """tune alpha so that the policy's entropy tracks the target -dim(A)"""
    hidden_size: int = 256
    """width of the two hidden layers of the actor and of each critic"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_timesteps=600, learning_starts=300, batch_size=32, hidden_size=32, save_model=True, eval_episodes=1
)

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


# ----------------------------------------------------------------------------- pure math
def tanh_log_det_jacobian(u):
    """sum_i log(1 - tanh(u_i)^2) over the last (action) axis, in the stable form

        log(1 - tanh(u)^2) = log(4 e^{-2u} / (1 + e^{-2u})^2) = 2 (log 2 - u - softplus(-2u)).

    The direct form rounds 1 - tanh(u)^2 to 0 in float32 once |u| passes about 9, and log(0) = -inf;
    the stable form is finite for any finite u.
    """
    return (2.0 * (np.log(2.0) - u - jax.nn.softplus(-2.0 * u))).sum(-1)


def sample_squashed(mean, log_std, noise, action_scale, action_bias):
    """Reparameterised sample of a = scale * tanh(u) + bias, u = mean + std * noise, and its
    log-density by the change of variables (summed over the action axis):

        log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2) - sum_i log(scale_i).
    """
    std = jnp.exp(log_std)
    u = mean + std * noise
    gaussian_logp = (-0.5 * noise**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)
    log_prob = gaussian_logp - tanh_log_det_jacobian(u) - jnp.log(action_scale).sum()
    return jnp.tanh(u) * action_scale + action_bias, log_prob


def soft_q_target(rewards, terminated, next_q1, next_q2, next_log_prob, alpha, gamma):
    """r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log pi(a' | s')), a' ~ pi(s').

    Only a termination cuts the bootstrap: a time-limit truncation stored its true final
    observation as s' and bootstraps from it like any other step."""
    soft_value = jnp.minimum(next_q1, next_q2) - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminated) * soft_value


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def sac_actor_loss(q1, q2, log_prob, alpha):
    """mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a)), a the reparameterised sample: minimising it
    maximises the soft value, reward-to-go plus alpha times entropy."""
    return (alpha * log_prob - jnp.minimum(q1, q2)).mean()


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-alpha * mean(log pi + target_entropy), alpha = exp(log_alpha), log pi held fixed: alpha is
    the Lagrange multiplier of the constraint entropy >= target_entropy; it grows while the entropy
    is below the target and shrinks towards 0 while it is above."""
    return -(jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy)).mean()


# ----------------------------------------------------------------------------- networks
def layer_init(features):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the torch twin does the same)."""
    return nn.Dense(features, kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"))


class QNetwork(nn.Module):
    """Q(s, a): the concatenated observation and action through a hidden-hidden ReLU MLP."""

    hidden_size: int

    @nn.compact
    def __call__(self, obs, actions):
        x = jnp.concatenate([obs, actions], -1)
        x = nn.relu(layer_init(self.hidden_size)(x))
        x = nn.relu(layer_init(self.hidden_size)(x))
        return layer_init(1)(x).squeeze(-1)


class Actor(nn.Module):
    """Squashed Gaussian policy: a ReLU trunk, then the mean and log std of u, a = scale tanh(u) + bias.
    log std is squashed into [LOG_STD_MIN, LOG_STD_MAX] by a tanh, so it cannot run away."""

    action_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        h = nn.relu(layer_init(self.hidden_size)(obs))
        h = nn.relu(layer_init(self.hidden_size)(h))
        mean = layer_init(self.action_dim)(h)
        log_std = jnp.tanh(layer_init(self.action_dim)(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std


class Agent:
    """The actor and the twin critics. params = {"actor": ..., "qf": ...}; "qf" holds both critics'
    parameters stacked on a leading axis of 2, applied with one vmap (one batched matmul per layer)."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.actor = Actor(action_dim, hidden_size)
        self.qf = QNetwork(hidden_size)
        self.action_scale = jnp.asarray(action_scale, dtype=jnp.float32)
        self.action_bias = jnp.asarray(action_bias, dtype=jnp.float32)

    def init(self, key):
        actor_key, qf_key = jax.random.split(key)
        obs, actions = jnp.zeros((1, self.obs_dim)), jnp.zeros((1, self.action_dim))
        qf_params = jax.vmap(self.qf.init, in_axes=(0, None, None))(jax.random.split(qf_key, 2), obs, actions)
        return {"actor": self.actor.init(actor_key, obs), "qf": qf_params}

    def q_values(self, qf_params, obs, actions):
        """Both critics at once: (2, batch)."""
        return jax.vmap(self.qf.apply, in_axes=(0, None, None))(qf_params, obs, actions)

    def sample(self, actor_params, obs, key):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self.actor.apply(actor_params, obs)
        noise = jax.random.normal(key, mean.shape)
        return sample_squashed(mean, log_std, noise, self.action_scale, self.action_bias)

    @partial(jax.jit, static_argnums=0)
    def act(self, actor_params, obs, key):
        """A sampled action and the next key. The key is split inside the jitted call: splitting
        outside costs a second dispatch per step."""
        key, sample_key = jax.random.split(key)
        return self.sample(actor_params, obs, sample_key)[0], key

    def deterministic(self, actor_params, obs):
        """The evaluation action: tanh of the mean, scaled into the bounds."""
        return jnp.tanh(self.actor.apply(actor_params, obs)[0]) * self.action_scale + self.action_bias


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


def transition_next_obs(next_obs, infos):
    """The s' to store for each env's transition. With SAME_STEP autoreset, an env whose episode
    ended at this step already returned the next episode's first observation in next_obs; its true
    last observation is infos["final_obs"][i]. A truncated transition bootstraps from that one."""
    real_next_obs = next_obs.copy()
    if "_final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("buffer_size", args.buffer_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("policy_lr", args.policy_lr > 0, "> 0"),
        ("q_lr", args.q_lr > 0, "> 0"),
        ("alpha_lr", args.alpha_lr > 0, "> 0"),
        ("alpha", args.alpha > 0 if args.autotune else args.alpha >= 0, "> 0 with --autotune, else >= 0"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("buffer_size", args.buffer_size >= args.batch_size, ">= --batch-size"),
        ("learning_starts", args.learning_starts >= args.batch_size, ">= --batch-size"),
        ("total_timesteps", args.total_timesteps > args.learning_starts, "> --learning-starts"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Box actions. "
            f"For discrete actions use algos/dqn_jax.py or algos/ppo_jax.py"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"--env-id {args.env_id} has unbounded actions; the tanh squashing needs finite bounds"
        )


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved parameters into a fresh network; run the deterministic policy (tanh of the mean)."""
    env = gym.make(env_id)
    space = env.action_space
    agent = Agent(
        int(np.prod(env.observation_space.shape)),
        int(np.prod(space.shape)),
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(agent.init(jax.random.PRNGKey(0)), f.read())
    deterministic = jax.jit(agent.deterministic)
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            action = np.asarray(deterministic(params["actor"], obs))
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environments, networks, optimisers, replay buffer
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

    envs = make_envs(args.env_id, 1)
    envs.action_space.seed(args.seed)
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(space.shape))
    agent = Agent(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    target_entropy = -float(action_dim)
    q_optimizer = optax.adam(args.q_lr)
    actor_optimizer = optax.adam(args.policy_lr)
    alpha_optimizer = optax.adam(args.alpha_lr)
    state = {
        "params": params,
        "qf_target": params["qf"],
        "log_alpha": jnp.asarray(np.log(args.alpha), dtype=jnp.float32),
        "q_opt": q_optimizer.init(params["qf"]),
        "actor_opt": actor_optimizer.init(params["actor"]),
    }
    state["alpha_opt"] = alpha_optimizer.init(state["log_alpha"])

    @jax.jit
    def update(state, batch, key):
        """One gradient step, critics, actor, temperature and the Polyak targets, as one jitted call."""
        key, next_key, pi_key = jax.random.split(key, 3)
        params, log_alpha = state["params"], state["log_alpha"]
        alpha = jnp.exp(log_alpha)

        next_actions, next_log_prob = agent.sample(params["actor"], batch["next_obs"], next_key)
        next_q = agent.q_values(state["qf_target"], batch["next_obs"], next_actions)
        target = soft_q_target(
            batch["rewards"], batch["terminated"], next_q[0], next_q[1], next_log_prob, alpha, args.gamma
        )

        def q_loss_fn(qf_params):
            q = agent.q_values(qf_params, batch["obs"], batch["actions"])
            qf1_loss, qf2_loss = critic_losses(q[0], q[1], target)
            return qf1_loss + qf2_loss, (qf1_loss, qf2_loss, q[0].mean(), q[1].mean())

        q_grads, (qf1_loss, qf2_loss, qf1_values, qf2_values) = jax.grad(q_loss_fn, has_aux=True)(
            params["qf"]
        )
        q_updates, q_opt = q_optimizer.update(q_grads, state["q_opt"])
        qf_params = optax.apply_updates(params["qf"], q_updates)

        def actor_loss_fn(actor_params):
            actions_pi, log_prob = agent.sample(actor_params, batch["obs"], pi_key)
            q = agent.q_values(qf_params, batch["obs"], actions_pi)
            return sac_actor_loss(q[0], q[1], log_prob, alpha), log_prob

        (actor_loss, log_prob), actor_grads = jax.value_and_grad(actor_loss_fn, has_aux=True)(params["actor"])
        actor_updates, actor_opt = actor_optimizer.update(actor_grads, state["actor_opt"])
        actor_params = optax.apply_updates(params["actor"], actor_updates)

        alpha_loss, alpha_grad = jax.value_and_grad(temperature_loss)(log_alpha, log_prob, target_entropy)
        if args.autotune:
            alpha_updates, alpha_opt = alpha_optimizer.update(alpha_grad, state["alpha_opt"])
            log_alpha = optax.apply_updates(log_alpha, alpha_updates)
        else:
            alpha_opt = state["alpha_opt"]

        # target += tau * (online - target)
        qf_target = optax.incremental_update(qf_params, state["qf_target"], args.tau)
        state = {
            "params": {"actor": actor_params, "qf": qf_params},
            "qf_target": qf_target,
            "log_alpha": log_alpha,
            "q_opt": q_opt,
            "actor_opt": actor_opt,
            "alpha_opt": alpha_opt,
        }
        losses = {
            "qf1_loss": qf1_loss,
            "qf2_loss": qf2_loss,
            "qf1_values": qf1_values,
            "qf2_values": qf2_values,
            "actor_loss": actor_loss,
            "alpha": alpha,
            "alpha_loss": alpha_loss,
        }
        return state, losses, key

    # Replay buffer on the host (each sampled batch moves to the device): flat arrays, written in a ring.
    capacity = min(args.buffer_size, args.total_timesteps)
    obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    next_obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((capacity, action_dim), dtype=np.float32)
    rewards_buf = np.zeros(capacity, dtype=np.float32)
    terminated_buf = np.zeros(capacity, dtype=np.float32)

    episode_returns, recent = [], []
    ep_return, ep_length = np.zeros(1), np.zeros(1, dtype=np.int64)
    losses, last_print = {}, 0.0
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 2. Act: random during the warm-up, then a sample of the policy
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            actions, key = agent.act(state["params"]["actor"], obs, key)
            actions = np.asarray(actions)
        next_obs, reward, terminated, truncated, infos = envs.step(actions)
        ep_return += reward
        ep_length += 1

        # ---- 3. Store: an ended episode's next observation is its true last one, not the reset
        real_next_obs = transition_next_obs(next_obs, infos)
        slot = (global_step - 1) % capacity
        obs_buf[slot], next_obs_buf[slot], actions_buf[slot] = obs[0], real_next_obs[0], actions[0]
        rewards_buf[slot], terminated_buf[slot] = reward[0], terminated[0]
        obs = next_obs
        # episode statistics of every env whose episode ended at this step
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-10:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        if global_step <= args.learning_starts:
            continue

        # ---- 4. Update: critics, actor, temperature, then the Polyak targets
        idx = np.random.randint(0, min(global_step, capacity), size=args.batch_size)
        batch = {
            "obs": obs_buf[idx],
            "next_obs": next_obs_buf[idx],
            "actions": actions_buf[idx],
            "rewards": rewards_buf[idx],
            "terminated": terminated_buf[idx],
        }
        state, step_losses, key = update(state, batch, key)

        # losses and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            losses = {name: float(value) for name, value in step_losses.items()}
            sps = int(global_step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(10) {mean_recent:7.1f}  "
                    f"alpha {losses['alpha']:.3f}  SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 5. Summary: close, save, evaluate
    if args.progress:
        print(file=sys.stderr)
    envs.close()
    wall_time = time.time() - start_time
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "alpha": float(jnp.exp(state["log_alpha"])),
        "sps": args.total_timesteps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_timesteps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(state["params"]))
        eval_returns = evaluate(
            model_path, args.env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size
        )
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
