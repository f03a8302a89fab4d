"""TD3+BC: TD3 on a fixed dataset with a normalised behaviour-cloning term -- the JAX twin.

TD3's critics (clipped double Q, target policy smoothing, delayed actor, Polyak targets) learn from the
dataset's transitions; the actor minimises -lambda Q(s, pi(s)) + (pi(s) - a)^2, lambda = alpha / mean |Q|
(no gradient through lambda). States are normalised by the dataset's statistics (saved with the model);
a timeout bootstraps, only a termination cuts. --no-bc drops the BC term (plain offline TD3).
Papers: Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning",
        arXiv:2106.06860; Fujimoto, van Hoof & Meger 2018 (TD3), arXiv:1802.09477.
Twin:   algos/td3_bc_torch.py (`diff algos/td3_bc_torch.py algos/td3_bc_jax.py`: only the framework).
Docs:   docs/algorithms/td3_bc.md
Run:    python algos/td3_bc_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import flax.linen as nn
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from tensorboardX import SummaryWriter

import offline_data


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the evaluation environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    dataset: str = "pendulum-medium"
    """offline dataset (algos/offline_data.py); Box actions only"""
    total_steps: int = 10_000
    """gradient steps (critic updates)"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the dataset"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target networks: target <- tau * online + (1 - tau) * target"""
    learning_rate: float = 3e-4
    """Adam learning rate of the actor and of the two critics"""
    policy_noise: float = 0.2
    """std of the target policy smoothing noise, as a fraction of the action half-range"""
    noise_clip: float = 0.5
    """the smoothing noise is clipped to +-noise_clip (fraction of the half-range)"""
    policy_frequency: int = 2
    """actor and target updates happen once every policy_frequency critic updates"""
    alpha: float = 2.5
    """weight of the Q term: lambda = alpha / mean |Q(s, pi(s))| (paper: 2.5, on actions in [-1, 1])"""
    bc: bool = True
    """keep the behaviour-cloning term; --no-bc is plain offline TD3 (alpha -> infinity)"""
    hidden_size: int = 128
    """width of the two hidden layers of the actor and of each critic (paper: 256)"""
    eval_every: int = 1_000
    """gradient steps between evaluations"""
    eval_episodes: int = 10
    """episodes per evaluation (and for the saved-model evaluation)"""
    save_model: bool = False
    """save the trained parameters and the state statistics to the run directory and evaluate them"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_steps=60, batch_size=32, hidden_size=32, eval_every=30, eval_episodes=1, save_model=True
)

LOG_EVERY = 100  # gradient steps between logged losses (and the JAX twin's scan length)
STATE_EPS = 1e-3  # added to the dataset's state std (the paper's epsilon)


# ----------------------------------------------------------------------------- pure math
def state_normalizer(observations, eps=STATE_EPS):
    """(mean, std + eps) of the dataset's states, per dimension (numpy, population std). A constant
    dimension gets std eps, not 0: its normalised value is 0 instead of a division by zero."""
    return observations.mean(0).astype(np.float32), (observations.std(0) + eps).astype(np.float32)


def prepare_dataset(data, state_mean, state_std):
    """The arrays the update reads (numpy): states normalised, and the target's done flag from
    `terminals` alone: a timeout is where the collector stopped, not the end of the task, so its s'
    is bootstrapped from like any other."""
    return {
        "obs": ((data["observations"] - state_mean) / state_std).astype(np.float32),
        "next_obs": ((data["next_observations"] - state_mean) / state_std).astype(np.float32),
        "actions": data["actions"].astype(np.float32),
        "rewards": data["rewards"].astype(np.float32),
        "terminals": data["terminals"].astype(np.float32),
    }


def smoothed_target_actions(target_actions, noise, noise_clip, action_scale, action_low, action_high):
    """Target policy smoothing: a' = clip(mu'(s') + clip(noise, -c, c) * scale, low, high), with
    noise ~ N(0, policy_noise^2) given. The target then averages Q over a small neighbourhood of a',
    so a narrow spike of the critic at one action cannot be exploited."""
    smoothing = jnp.clip(noise, -noise_clip, noise_clip) * action_scale
    return jnp.maximum(jnp.minimum(target_actions + smoothing, action_high), action_low)


def td3_target(rewards, terminals, next_q1, next_q2, gamma):
    """r + gamma * (1 - terminals) * min(Q1', Q2')(s', a'), clipped double Q."""
    return rewards + gamma * (1.0 - terminals) * jnp.minimum(next_q1, next_q2)


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def bc_lambda(q, alpha):
    """lambda = alpha / mean |Q(s, pi(s))|, a constant to the gradient. Multiplying Q by c divides lambda
    by c, so lambda * Q is scale-free and one alpha serves any reward scale."""
    return alpha / jax.lax.stop_gradient(jnp.abs(q).mean())


def td3_bc_actor_loss(q, policy_actions, data_actions, alpha, bc=True):
    """-lambda * mean Q(s, pi(s)) + mean (pi(s) - a)^2; returns (loss, bc_loss). bc=False drops the BC
    term and lambda: -mean Q, TD3's actor loss (the alpha -> infinity limit, up to a scale)."""
    bc_loss = ((policy_actions - data_actions) ** 2).mean()
    if not bc:
        return -q.mean(), bc_loss
    return -bc_lambda(q, alpha) * q.mean() + bc_loss, bc_loss


# ----------------------------------------------------------------------------- networks
def layer_init(features):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the torch twin does the same)."""
    return nn.Dense(features, kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"))


class QNetwork(nn.Module):
    """Q(s, a): the concatenated (normalised) observation and action through a hidden-hidden ReLU MLP."""

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

    def q1(self, qf_params, obs, actions):
        """The first critic alone (the actor's objective)."""
        return self.qf.apply(jax.tree.map(lambda p: p[0], qf_params), obs, actions)


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError). Returns the
    dataset's info."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("policy_noise", args.policy_noise >= 0, ">= 0 (0: no smoothing)"),
        ("noise_clip", args.noise_clip >= 0, ">= 0 (0: no smoothing)"),
        ("policy_frequency", args.policy_frequency >= 1, ">= 1"),
        ("alpha", args.alpha > 0, "> 0 (--no-bc drops the BC term)"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    info = offline_data.dataset_info(args.dataset)
    if info["discrete"]:
        raise ValueError(
            f"--dataset {args.dataset} has discrete actions; TD3+BC's deterministic actor needs Box actions. "
            f"For discrete offline data use algos/cql_jax.py --discrete"
        )
    return info


def run_episodes(policy, env_id, episodes, seed, state_mean, state_std):
    """The deterministic policy on the normalised states, `episodes` environments in lockstep (one
    batched forward pass per step); episode i is seeded seed + i. Returns the undiscounted returns."""
    envs = [offline_data.make_env(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    totals, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        actions = policy(((obs - state_mean) / state_std).astype(np.float32))
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return totals


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved actor and state statistics into a fresh network; run the deterministic policy."""
    with open(model_path, "rb") as f:
        saved = flax.serialization.msgpack_restore(f.read())
    space = offline_data.make_env(env_id).action_space
    state_mean, state_std = np.asarray(saved["state_mean"]), np.asarray(saved["state_std"])
    agent = Agent(
        len(state_mean),
        int(np.prod(space.shape)),
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    apply = jax.jit(agent.actor.apply)

    def policy(obs):
        return np.asarray(apply(saved["actor"], obs))

    return run_episodes(policy, env_id, eval_episodes, seed, state_mean, state_std)


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, data, networks, optimisers
    info = check_args(args)
    env_id = info["env_id"]
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.dataset}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, jax and the evaluation environments (episode i gets seed + 10_000 + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)

    # The data: states normalised by the dataset's own statistics, kept on the device
    data = offline_data.load_dataset(args.dataset)
    state_mean, state_std = state_normalizer(data["observations"])
    arrays = prepare_dataset(data, state_mean, state_std)
    dataset = {k: jnp.asarray(v) for k, v in arrays.items()}
    size = len(arrays["rewards"])

    space = offline_data.make_env(env_id).action_space
    obs_dim, action_dim = arrays["obs"].shape[1], int(np.prod(space.shape))
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
        "bc_loss": jnp.zeros(()),
        "lambda": jnp.zeros(()),
        "pi_values": jnp.zeros(()),
    }
    apply = jax.jit(agent.actor.apply)

    def policy(obs):
        return np.asarray(apply(state["params"]["actor"], obs))

    @jax.jit
    def update(state, dataset, idx, key):
        """A block of gradient steps (lax.scan over the rows of idx) as one jitted call. Each step: one
        critic step and, every policy_frequency-th, the actor and the Polyak targets (lax.cond)."""

        def one_step(carry, rows):
            state, key = carry
            b = jax.tree.map(lambda v: v[rows], dataset)
            # One critic step; every policy_frequency-th step also the actor and the Polyak targets
            key, noise_key = jax.random.split(key)
            params, target_params = state["params"], state["target"]
            noise = jax.random.normal(noise_key, b["actions"].shape) * args.policy_noise
            next_actions = smoothed_target_actions(
                agent.actor.apply(target_params["actor"], b["next_obs"]),
                noise,
                args.noise_clip,
                action_scale,
                action_low,
                action_high,
            )
            next_q = agent.q_values(target_params["qf"], b["next_obs"], next_actions)
            target = td3_target(b["rewards"], b["terminals"], next_q[0], next_q[1], args.gamma)

            def q_loss_fn(qf_params):
                q = agent.q_values(qf_params, b["obs"], b["actions"])
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
                    pi = agent.actor.apply(actor_params, b["obs"])
                    q_pi = agent.q1(qf_params, b["obs"], pi)
                    actor_loss, bc_loss = td3_bc_actor_loss(q_pi, pi, b["actions"], args.alpha, args.bc)
                    return actor_loss, (bc_loss, bc_lambda(q_pi, args.alpha), q_pi.mean())

                (actor_loss, (bc_loss, lmbda, pi_values)), actor_grads = jax.value_and_grad(
                    actor_loss_fn, has_aux=True
                )(actor_params)
                actor_updates, actor_opt = actor_optimizer.update(actor_grads, actor_opt)
                actor_params = optax.apply_updates(actor_params, actor_updates)
                online = {"actor": actor_params, "qf": qf_params}
                target_params = optax.incremental_update(
                    online, target_params, args.tau
                )  # target += tau * (online - target)
                return actor_params, actor_opt, target_params, actor_loss, bc_loss, lmbda, pi_values

            def skip(operand):
                actor_params, actor_opt, target_params = operand
                return (
                    actor_params,
                    actor_opt,
                    target_params,
                    state["actor_loss"],
                    state["bc_loss"],
                    state["lambda"],
                    state["pi_values"],
                )

            actor_params, actor_opt, target_params, actor_loss, bc_loss, lmbda, pi_values = jax.lax.cond(
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
                "bc_loss": bc_loss,
                "lambda": lmbda,
                "pi_values": pi_values,
            }
            losses = {
                "qf1_loss": qf1_loss,
                "qf2_loss": qf2_loss,
                "qf1_values": qf1_values,
                "qf2_values": qf2_values,
                "actor_loss": actor_loss,
                "bc_loss": bc_loss,
                "lambda": lmbda,
                "pi_values": pi_values,
            }
            return (state, key), losses

        (state, key), losses = jax.lax.scan(one_step, (state, key), idx)
        return state, jax.tree.map(lambda v: v[-1], losses), key

    episode_returns, losses, last_print, mean_return = [], {}, 0.0, float("nan")
    start_time = time.time()
    step = 0
    while step < args.total_steps:
        # ---- 2. Update: a block of gradient steps up to the next log point, evaluation or the end; the
        # minibatch indices of the whole block are drawn at once (numpy, the same in both twins)
        block = min(
            LOG_EVERY - step % LOG_EVERY, args.eval_every - step % args.eval_every, args.total_steps - step
        )
        idx = jnp.asarray(rng.integers(0, size, size=(block, args.batch_size)))
        state, step_losses, key = update(state, dataset, idx, key)
        step += block

        if step % LOG_EVERY == 0 or step == args.total_steps:
            losses = {name: float(value) for name, value in step_losses.items()}
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar("charts/SPS", int(step / (time.time() - start_time)), step)

        # ---- 3. Evaluation: the deterministic policy, episode i seeded seed + 10_000 + i
        if step % args.eval_every == 0 or step == args.total_steps:
            returns = run_episodes(
                policy, env_id, args.eval_episodes, args.seed + 10_000, state_mean, state_std
            )
            mean_return = float(returns.mean())
            for r in returns:
                episode_returns.append((step, float(r)))
                writer.add_scalar("eval/episodic_return", r, step)
            writer.add_scalar(
                "eval/normalized_score", float(offline_data.normalized_score(args.dataset, mean_return)), step
            )
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>7,d}/{args.total_steps:,d}  eval return {mean_return:7.1f}  "
                f"SPS {int(step / (time.time() - start_time)):5,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 4. Summary
    wall_time = time.time() - start_time
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, mean_return)),
        "sps": args.total_steps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(
                flax.serialization.to_bytes(
                    {**state["params"], "state_mean": state_mean, "state_std": state_std}
                )
            )
        eval_returns = evaluate(model_path, env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size)
        for i, r in enumerate(eval_returns):
            writer.add_scalar("eval/saved_model_return", r, i)
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
