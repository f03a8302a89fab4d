"""TD3: twin delayed deep deterministic policy gradient, continuous actions -- the JAX twin.

DDPG's deterministic actor-critic with three fixes against overestimation: clipped double-Q
targets from twin critics, target policy smoothing, and delayed actor and target updates.
Papers: Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods",
        arXiv:1802.09477; Lillicrap et al. 2015, "Continuous control with deep reinforcement
        learning" (DDPG), arXiv:1509.02971.
Twin:   algos/td3_torch.py (`diff algos/td3_torch.py algos/td3_jax.py` shows only the framework).
Docs:   docs/algorithms/td3.md
Run:    python algos/td3_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

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
    """warm-up: uniformly random actions and no update for this many steps (CleanRL: 25k)"""
    learning_rate: float = 3e-4
    """Adam learning rate of the actor and of the two critics"""
    exploration_noise: float = 0.1
    """std of the Gaussian exploration noise, as a fraction of the action half-range"""
    policy_noise: float = 0.2
    """std of the target policy smoothing noise, as a fraction of the action half-range"""
    noise_clip: float = 0.5
    """the smoothing noise is clipped to +-noise_clip (fraction of the half-range)"""
    policy_frequency: int = 2
    """actor and target updates happen once every policy_frequency critic updates"""
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


# ----------------------------------------------------------------------------- pure math
def smoothed_target_actions(target_actions, noise, noise_clip, action_scale, action_low, action_high):
    """Target policy smoothing: a' = clip(mu'(s') + clip(noise, -c, c) * scale, low, high), with
    noise ~ N(0, policy_noise^2) given. The target then averages Q over a small neighbourhood of a',
    so a narrow spike of the critic at one action cannot be exploited."""
    smoothing = jnp.clip(noise, -noise_clip, noise_clip) * action_scale
    return jnp.maximum(jnp.minimum(target_actions + smoothing, action_high), action_low)


def td3_target(rewards, terminated, next_q1, next_q2, gamma):
    """r + gamma * (1 - terminated) * min(Q1', Q2')(s', a'), clipped double Q.

    Only a termination cuts the bootstrap: a time-limit truncation stored its true final
    observation as s' and bootstraps from it like any other step."""
    return rewards + gamma * (1.0 - terminated) * jnp.minimum(next_q1, next_q2)


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def td3_actor_loss(q1):
    """-mean Q1(s, mu(s)): the deterministic policy gradient ascends the first critic's slope in a."""
    return -q1.mean()


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
    """Deterministic policy mu(s) = scale * tanh(MLP(s)) + bias, inside any finite Box."""

    action_dim: int
    hidden_size: int
    action_scale: tuple
    action_bias: tuple

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(layer_init(self.hidden_size)(obs))
        x = nn.relu(layer_init(self.hidden_size)(x))
        x = layer_init(self.action_dim)(x)
        return jnp.tanh(x) * jnp.asarray(self.action_scale) + jnp.asarray(self.action_bias)


class Agent:
    """The actor and the twin critics. params = {"actor": ..., "qf": ...}; "qf" holds both critics'
    parameters stacked on a leading axis of 2, applied with one vmap (one batched matmul per layer)."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.actor = Actor(
            action_dim,
            hidden_size,
            tuple(float(x) for x in action_scale),
            tuple(float(x) for x in action_bias),
        )
        self.qf = QNetwork(hidden_size)

    def init(self, key):
        actor_key, qf_key = jax.random.split(key)
        obs, actions = jnp.zeros((1, self.obs_dim)), jnp.zeros((1, self.action_dim))
        qf_params = jax.vmap(self.qf.init, in_axes=(0, None, None))(jax.random.split(qf_key, 2), obs, actions)
        return {"actor": self.actor.init(actor_key, obs), "qf": qf_params}

    def q_values(self, qf_params, obs, actions):
        """Both critics at once: (2, batch)."""
        return jax.vmap(self.qf.apply, in_axes=(0, None, None))(qf_params, obs, actions)


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
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("exploration_noise", args.exploration_noise >= 0, ">= 0"),
        ("policy_noise", args.policy_noise >= 0, ">= 0"),
        ("noise_clip", args.noise_clip >= 0, ">= 0"),
        ("policy_frequency", args.policy_frequency >= 1, ">= 1"),
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
    """Load the saved parameters into a fresh network; run the deterministic policy without noise."""
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
    policy = jax.jit(agent.actor.apply)
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            action = np.asarray(policy(params["actor"], obs))
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
    action_scale = jnp.asarray((space.high - space.low) / 2.0, dtype=jnp.float32)
    action_low = jnp.asarray(space.low, dtype=jnp.float32)
    action_high = jnp.asarray(space.high, dtype=jnp.float32)
    agent = Agent(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    q_optimizer = optax.adam(args.learning_rate)
    actor_optimizer = optax.adam(args.learning_rate)
    state = {
        "params": params,
        "target": params,
        "q_opt": q_optimizer.init(params["qf"]),
        "actor_opt": actor_optimizer.init(params["actor"]),
        "num_updates": jnp.zeros((), jnp.int32),
        "actor_loss": jnp.zeros(()),
    }

    @jax.jit
    def act(actor_params, obs, key):
        """The policy plus Gaussian noise, clipped to the bounds; the key is split inside the jitted call."""
        key, noise_key = jax.random.split(key)
        mu = agent.actor.apply(actor_params, obs)
        noisy = mu + jax.random.normal(noise_key, mu.shape) * action_scale * args.exploration_noise
        return jnp.maximum(jnp.minimum(noisy, action_high), action_low), key

    @jax.jit
    def update(state, batch, key):
        """One critic step and, every policy_frequency-th call, the actor and the Polyak targets
        (lax.cond), as one jitted call."""
        key, noise_key = jax.random.split(key)
        params, target_params = state["params"], state["target"]
        noise = jax.random.normal(noise_key, batch["actions"].shape) * args.policy_noise
        next_actions = smoothed_target_actions(
            agent.actor.apply(target_params["actor"], batch["next_obs"]),
            noise,
            args.noise_clip,
            action_scale,
            action_low,
            action_high,
        )
        next_q = agent.q_values(target_params["qf"], batch["next_obs"], next_actions)
        target = td3_target(batch["rewards"], batch["terminated"], next_q[0], next_q[1], args.gamma)

        def q_loss_fn(qf_params):
            q = agent.q_values(qf_params, batch["obs"], batch["actions"])
            qf1_loss, qf2_loss = critic_losses(q[0], q[1], target)
            return qf1_loss + qf2_loss, (qf1_loss, qf2_loss, q[0].mean(), q[1].mean())

        q_grads, (qf1_loss, qf2_loss, qf1_values, qf2_values) = jax.grad(q_loss_fn, has_aux=True)(
            params["qf"]
        )
        q_updates, q_opt = q_optimizer.update(q_grads, state["q_opt"])
        qf_params = optax.apply_updates(params["qf"], q_updates)
        num_updates = state["num_updates"] + 1

        def delayed(operand):
            actor_params, actor_opt, target_params = operand

            def actor_loss_fn(actor_params):
                q1 = jax.vmap(agent.qf.apply, in_axes=(0, None, None))(
                    qf_params, batch["obs"], agent.actor.apply(actor_params, batch["obs"])
                )[0]
                return td3_actor_loss(q1)

            actor_loss, actor_grads = jax.value_and_grad(actor_loss_fn)(actor_params)
            actor_updates, actor_opt = actor_optimizer.update(actor_grads, actor_opt)
            actor_params = optax.apply_updates(actor_params, actor_updates)
            online = {"actor": actor_params, "qf": qf_params}
            # target += tau * (online - target)
            target_params = optax.incremental_update(online, target_params, args.tau)
            return actor_params, actor_opt, target_params, actor_loss

        def skip(operand):
            actor_params, actor_opt, target_params = operand
            return actor_params, actor_opt, target_params, state["actor_loss"]

        actor_params, actor_opt, target_params, actor_loss = jax.lax.cond(
            num_updates % args.policy_frequency == 0,
            delayed,
            skip,
            (params["actor"], state["actor_opt"], target_params),
        )
        state = {
            "params": {"actor": actor_params, "qf": qf_params},
            "target": target_params,
            "q_opt": q_opt,
            "actor_opt": actor_opt,
            "num_updates": num_updates,
            "actor_loss": actor_loss,
        }
        losses = {
            "qf1_loss": qf1_loss,
            "qf2_loss": qf2_loss,
            "qf1_values": qf1_values,
            "qf2_values": qf2_values,
            "actor_loss": actor_loss,
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
        # ---- 2. Act: random during the warm-up, then the policy plus Gaussian noise, clipped
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            actions, key = act(state["params"]["actor"], obs, key)
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

        # ---- 4. Update: the critics; every policy_frequency-th step also the actor and the targets
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
                    f"SPS {sps:6,d}",
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
