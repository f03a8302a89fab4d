"""IQL: Implicit Q-Learning, offline RL that never queries an action outside the data -- the JAX twin.

V(s) is fitted by expectile regression to min(Q1', Q2')(s, a) at the data's actions, the twin critics
regress on r + gamma (1 - terminal) V(s'), and the policy by advantage-weighted regression, weights
exp(beta (Q - V)). States are normalised by the dataset's statistics (saved with the model); a timeout
bootstraps, only a termination cuts; the evaluation plays the Gaussian policy's mean.
Paper:  Kostrikov, Nair & Levine 2021, "Offline Reinforcement Learning with Implicit Q-Learning",
        arXiv:2110.06169.
Twin:   algos/iql_torch.py (`diff algos/iql_torch.py algos/iql_jax.py` shows only the framework).
Docs:   docs/algorithms/iql.md
Run:    python algos/iql_jax.py --dataset pointmaze-stitch --expectile 0.9 --beta 10 --seed 1
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
    """gradient steps (each: one value, one actor and one critic update)"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the dataset"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    learning_rate: float = 3e-4
    """Adam learning rate of the value network, the critics and the actor (constant; paper: actor's decays)"""
    expectile: float = 0.7
    """expectile of the value regression: 0.5 fits the mean of Q over the data's actions, -> 1 the max"""
    beta: float = 3.0
    """inverse temperature of the advantage weights exp(beta (Q - V))"""
    max_weight: float = 100.0
    """the advantage weights are clamped at this value"""
    hidden_size: int = 128
    """width of the two hidden layers of every network (paper: 256)"""
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
STATE_EPS = 1e-3  # added to the dataset's state std
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the policy's log-std is clipped to this range


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


def expectile_loss(diff, expectile):
    """Mean of |tau - 1(u < 0)| u^2 over u = Q - V: a positive error (V below Q) weighs tau, a negative
    one 1 - tau. Minimised over V, it gives the tau-expectile of Q: tau 0.5 the mean, tau -> 1 the max."""
    weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff**2).mean()


def iql_target(rewards, terminals, next_v, gamma):
    """r + gamma * (1 - terminals) * V(s'): the critics bootstrap from the value network, never from
    Q at an action the data did not take."""
    return rewards + gamma * (1.0 - terminals) * next_v


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def advantage_weights(advantages, beta, max_weight):
    """min(exp(beta A), max_weight), a constant to the gradient. exp(+large) overflows to inf and is
    clamped like any other large weight."""
    return jnp.minimum(jnp.exp(beta * jax.lax.stop_gradient(advantages)), max_weight)


def gaussian_log_prob(mean, log_std, actions):
    """log N(a; mean, diag(exp(log_std))^2), summed over the action dimensions."""
    z = (actions - mean) / jnp.exp(log_std)
    return (-0.5 * z**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)


def awr_actor_loss(log_probs, advantages, beta, max_weight):
    """-mean of min(exp(beta A), max_weight) * log pi(a|s) on the data's actions: weighted behaviour
    cloning, the weights growing with the advantage A = Q - V. Returns (loss, mean weight)."""
    weights = advantage_weights(advantages, beta, max_weight)
    return -(weights * log_probs).mean(), weights.mean()


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


class ValueNetwork(nn.Module):
    """V(s): the (normalised) observation through a hidden-hidden ReLU MLP."""

    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(layer_init(self.hidden_size)(obs))
        x = nn.relu(layer_init(self.hidden_size)(x))
        return layer_init(1)(x).squeeze(-1)


class Actor(nn.Module):
    """Gaussian policy: mean = scale * tanh(MLP(s)) + bias (inside any finite Box), log-std a free
    parameter per action dimension (state-independent, clipped to [LOG_STD_MIN, LOG_STD_MAX])."""

    action_dim: int
    hidden_size: int
    action_scale: tuple
    action_bias: tuple

    @nn.compact
    def __call__(self, obs):
        """(mean, log_std); the deterministic policy of the evaluation is the mean."""
        x = nn.relu(layer_init(self.hidden_size)(obs))
        x = nn.relu(layer_init(self.hidden_size)(x))
        x = layer_init(self.action_dim)(x)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        mean = jnp.tanh(x) * jnp.asarray(self.action_scale) + jnp.asarray(self.action_bias)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class Agent:
    """The actor, the value network and the twin critics. params = {"actor": ..., "vf": ..., "qf": ...};
    "qf" holds both critics' parameters stacked on a leading axis of 2, applied with one vmap."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.actor = Actor(
            action_dim,
            hidden_size,
            tuple(float(x) for x in action_scale),
            tuple(float(x) for x in action_bias),
        )
        self.vf = ValueNetwork(hidden_size)
        self.qf = QNetwork(hidden_size)

    def init(self, key):
        actor_key, vf_key, qf_key = jax.random.split(key, 3)
        obs, actions = jnp.zeros((1, self.obs_dim)), jnp.zeros((1, self.action_dim))
        qf_params = jax.vmap(self.qf.init, in_axes=(0, None, None))(jax.random.split(qf_key, 2), obs, actions)
        return {"actor": self.actor.init(actor_key, obs), "vf": self.vf.init(vf_key, obs), "qf": qf_params}

    def q_values(self, qf_params, obs, actions):
        """Both critics at once: (2, batch)."""
        return jax.vmap(self.qf.apply, in_axes=(0, None, None))(qf_params, obs, actions)


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
        ("expectile", 0 < args.expectile < 1, "in (0, 1) (0.5 fits the mean)"),
        ("beta", args.beta >= 0, ">= 0 (0 is behaviour cloning)"),
        ("max_weight", args.max_weight > 0, "> 0"),
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
            f"--dataset {args.dataset} has discrete actions; IQL's Gaussian policy needs Box actions. "
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
        return np.asarray(apply(saved["actor"], obs)[0])

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
    agent = Agent(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    params = agent.init(key)
    v_optimizer = optax.adam(args.learning_rate)
    q_optimizer = optax.adam(args.learning_rate)
    actor_optimizer = optax.adam(args.learning_rate)
    state = {
        "params": params,
        "target_qf": params["qf"],
        "v_opt": v_optimizer.init(params["vf"]),
        "q_opt": q_optimizer.init(params["qf"]),
        "actor_opt": actor_optimizer.init(params["actor"]),
    }
    apply = jax.jit(agent.actor.apply)

    def policy(obs):
        return np.asarray(apply(state["params"]["actor"], obs)[0])

    @jax.jit
    def update(state, dataset, idx):
        """A block of gradient steps (lax.scan over the rows of idx) as one jitted call. Each step: the
        value network, the actor, the critics and the Polyak targets, in that order."""

        def one_step(state, rows):
            b = jax.tree.map(lambda v: v[rows], dataset)
            params = state["params"]
            # Value: V(s) towards the upper expectile of min(Q1', Q2')(s, a) over the data's actions
            target_q = agent.q_values(state["target_qf"], b["obs"], b["actions"]).min(0)

            def value_loss_fn(vf_params):
                v = agent.vf.apply(vf_params, b["obs"])
                return expectile_loss(target_q - v, args.expectile), v.mean()

            (value_loss, v_values), v_grads = jax.value_and_grad(value_loss_fn, has_aux=True)(params["vf"])
            v_updates, v_opt = v_optimizer.update(v_grads, state["v_opt"])
            vf_params = optax.apply_updates(params["vf"], v_updates)

            # Actor: advantage-weighted log-likelihood of the data's actions (A with the new V)
            advantages = target_q - agent.vf.apply(vf_params, b["obs"])

            def actor_loss_fn(actor_params):
                mean, log_std = agent.actor.apply(actor_params, b["obs"])
                actor_loss, mean_weight = awr_actor_loss(
                    gaussian_log_prob(mean, log_std, b["actions"]), advantages, args.beta, args.max_weight
                )
                return actor_loss, (mean_weight, log_std.mean())

            (actor_loss, (mean_weight, log_std)), actor_grads = jax.value_and_grad(
                actor_loss_fn, has_aux=True
            )(params["actor"])
            actor_updates, actor_opt = actor_optimizer.update(actor_grads, state["actor_opt"])
            actor_params = optax.apply_updates(params["actor"], actor_updates)

            # Critics: r + gamma (1 - terminals) V(s'), then the Polyak targets
            target = iql_target(
                b["rewards"], b["terminals"], agent.vf.apply(vf_params, b["next_obs"]), args.gamma
            )

            def q_loss_fn(qf_params):
                q = agent.q_values(qf_params, b["obs"], b["actions"])
                qf1_loss, qf2_loss = critic_losses(q[0], q[1], target)
                return qf1_loss + qf2_loss, (qf1_loss, qf2_loss, q[0].mean())

            q_grads, (qf1_loss, qf2_loss, qf1_values) = jax.grad(q_loss_fn, has_aux=True)(params["qf"])
            q_updates, q_opt = q_optimizer.update(q_grads, state["q_opt"])
            qf_params = optax.apply_updates(params["qf"], q_updates)
            target_qf = optax.incremental_update(
                qf_params, state["target_qf"], args.tau
            )  # target += tau * (online - target)
            state = {
                "params": {"actor": actor_params, "vf": vf_params, "qf": qf_params},
                "target_qf": target_qf,
                "v_opt": v_opt,
                "q_opt": q_opt,
                "actor_opt": actor_opt,
            }
            losses = {
                "value_loss": value_loss,
                "qf1_loss": qf1_loss,
                "qf2_loss": qf2_loss,
                "actor_loss": actor_loss,
                "v_values": v_values,
                "qf1_values": qf1_values,
                "advantage": advantages.mean(),
                "mean_weight": mean_weight,
                "log_std": log_std,
            }
            return state, losses

        state, losses = jax.lax.scan(one_step, state, idx)
        return state, jax.tree.map(lambda v: v[-1], losses)

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
        state, step_losses = update(state, dataset, idx)
        step += block

        if step % LOG_EVERY == 0 or step == args.total_steps:
            losses = {name: value.item() for name, value in step_losses.items()}
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar("charts/SPS", int(step / (time.time() - start_time)), step)

        # ---- 3. Evaluation: the deterministic policy (the mean), episode i seeded seed + 10_000 + i
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
                f"\rstep {step:>7,d}/{args.total_steps:,d}  eval return {mean_return:7.2f}  "
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
