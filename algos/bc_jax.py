"""BC: behavioural cloning, supervised learning of a dataset's actions -- the JAX twin.

A policy fitted to an offline dataset's (s, a) pairs, with no reward and no environment step:
cross-entropy on logits for Discrete actions, MSE through a tanh-squashed actor for Box actions.
Papers: Pomerleau 1988, "ALVINN: An Autonomous Land Vehicle in a Neural Network" (NeurIPS 1, no
        arXiv id); Ross & Bagnell 2010, "Efficient Reductions for Imitation Learning" (AISTATS).
Twin:   algos/bc_torch.py (`diff algos/bc_torch.py algos/bc_jax.py` shows only the framework).
Docs:   docs/algorithms/bc.md
Run:    python algos/bc_jax.py --seed 1
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
    dataset: str = "pendulum-expert"
    """offline dataset (algos/offline_data.py); Discrete or Box actions"""
    dataset_episodes: int = 0
    """use only the first k trajectories of the dataset (0 = all of them)"""
    top_fraction: float = 1.0
    """keep this fraction of those trajectories, the highest returns (%BC of the DT paper; 1 = all)"""
    total_steps: int = 5_000
    """gradient steps"""
    batch_size: int = 256
    """(s, a) pairs per gradient step, drawn uniformly with replacement"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    hidden_size: int = 256
    """width of the two hidden layers of the policy"""
    eval_every: int = 1_000
    """gradient steps between evaluations"""
    eval_episodes: int = 10
    """episodes per evaluation (and for the saved-model evaluation)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    dataset="pointmaze-stitch",
    dataset_episodes=30,
    total_steps=20,
    batch_size=16,
    hidden_size=16,
    eval_every=10,
    eval_episodes=1,
    save_model=True,
)
LOG_EVERY = 100  # gradient steps between two logged losses


# ----------------------------------------------------------------------------- pure math
def squash_actions(pre_tanh, action_scale, action_bias):
    """mu(s) = scale * tanh(x) + bias: any real x lands inside the Box [bias - scale, bias + scale]."""
    return jnp.tanh(pre_tanh) * action_scale + action_bias


def bc_mse_loss(predicted, actions):
    """Box actions: the mean over the batch and the action dimensions of (mu(s) - a_data)^2."""
    return ((predicted - actions) ** 2).mean()


def bc_cross_entropy_loss(logits, actions):
    """Discrete actions: -mean log softmax(logits)[a_data], the negative log-likelihood of the data."""
    log_probs = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(log_probs, actions.astype(jnp.int32)[..., None], -1).squeeze(-1).mean()


def greedy_actions(logits):
    """The deterministic discrete policy: the most likely action."""
    return logits.argmax(-1)


def training_rows(bounds, returns, episodes, fraction):
    """Row indices BC trains on, in data order: the first `episodes` trajectories of [(start, end)]
    (0 = all of them; the dataset is stored trajectory after trajectory), and of those the
    ceil(fraction * N) with the highest returns (ties: the earlier trajectory). fraction 0.1 is "%BC"
    (Chen et al. 2021, the Decision Transformer paper): BC on the best 10% of the trajectories."""
    bounds = bounds[:episodes] if episodes else bounds
    best = np.argsort(-np.asarray(returns[: len(bounds)]), kind="stable")
    keep = np.sort(best[: max(1, int(np.ceil(fraction * len(bounds) - 1e-9)))])
    return np.concatenate([np.arange(bounds[i][0], bounds[i][1]) for i in keep])


# ----------------------------------------------------------------------------- networks
def layer_init(features):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the torch twin does the same)."""
    return nn.Dense(features, kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"))


class Policy(nn.Module):
    """The observation through two hidden ReLU layers to out_dim outputs: the logits (Discrete) or
    the pre-tanh action (Box, squashed by squash_actions)."""

    out_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(layer_init(self.hidden_size)(obs))
        x = nn.relu(layer_init(self.hidden_size)(x))
        return layer_init(self.out_dim)(x)


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError). Returns the
    dataset's info."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("dataset_episodes", args.dataset_episodes >= 0, ">= 0 (0 = all)"),
        ("top_fraction", 0 < args.top_fraction <= 1, "in (0, 1]"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
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
    trajectories = len(offline_data.episode_bounds(offline_data.load_dataset(args.dataset)))
    if args.dataset_episodes > trajectories:
        raise ValueError(
            f"--dataset-episodes must be <= the {trajectories} trajectories of {args.dataset} "
            f"(got {args.dataset_episodes})"
        )
    return info


def policy_head(env_id):
    """(discrete, out_dim, action_scale, action_bias) of env_id's action space."""
    space = offline_data.make_env(env_id).action_space
    if hasattr(space, "n"):
        return True, int(space.n), np.zeros(1, np.float32), np.zeros(1, np.float32)
    return (
        False,
        int(np.prod(space.shape)),
        ((space.high - space.low) / 2.0).astype(np.float32),
        ((space.high + space.low) / 2.0).astype(np.float32),
    )


def run_episodes(act, env_id, episodes, seed):
    """`episodes` environments stepped in lockstep, one batched policy call per step; episode i is
    seeded seed + i. `act` maps a batch of observations to a batch of actions. Returns the returns."""
    envs = [offline_data.make_env(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    totals, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        actions = act(obs)
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return totals


def make_act(policy, discrete, action_scale, action_bias, get_params):
    """The deterministic policy as a numpy function: argmax of the logits, or the squashed action.
    get_params() returns the current parameters (they change during training)."""

    @jax.jit
    def forward(params, obs):
        out = policy.apply(params, obs)
        return greedy_actions(out) if discrete else squash_actions(out, action_scale, action_bias)

    def act(obs):
        return np.asarray(forward(get_params(), jnp.asarray(obs, dtype=jnp.float32)))

    return act


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved parameters into a fresh network; run the deterministic policy."""
    discrete, out_dim, action_scale, action_bias = policy_head(env_id)
    obs_dim = int(np.prod(offline_data.make_env(env_id).observation_space.shape))
    policy = Policy(out_dim, hidden_size)
    template = {"policy": policy.init(jax.random.PRNGKey(0), jnp.zeros((1, obs_dim)))}
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(template, f.read())["policy"]
    act = make_act(policy, discrete, jnp.asarray(action_scale), jnp.asarray(action_bias), lambda: params)
    return run_episodes(act, env_id, eval_episodes, seed)


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, data, policy, optimiser
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

    # The data: the first dataset_episodes trajectories (all with 0), of those the top_fraction with
    # the highest returns (all with 1), on the device
    data = offline_data.load_dataset(args.dataset)
    rows = training_rows(
        offline_data.episode_bounds(data),
        offline_data.episode_returns(data),
        args.dataset_episodes,
        args.top_fraction,
    )
    size = len(rows)
    observations = jnp.asarray(data["observations"][rows])
    actions = jnp.asarray(data["actions"][rows])
    discrete, out_dim, action_scale, action_bias = policy_head(env_id)
    action_scale = jnp.asarray(action_scale)
    action_bias = jnp.asarray(action_bias)

    policy = Policy(out_dim, args.hidden_size)
    key, init_key = jax.random.split(key)
    params = policy.init(init_key, observations[:1])
    optimizer = optax.adam(args.learning_rate)
    state = {"params": params, "opt": optimizer.init(params)}

    def loss_fn(params, b_obs, b_actions):
        out = policy.apply(params, b_obs)
        if discrete:
            return bc_cross_entropy_loss(out, b_actions)
        return bc_mse_loss(squash_actions(out, action_scale, action_bias), b_actions)

    @jax.jit
    def update(state, observations, actions, indices):
        """len(indices) gradient steps, one per row of minibatch indices (lax.scan), as one jitted call."""

        def step(carry, idx):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, observations[idx], actions[idx])
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), step_losses = jax.lax.scan(step, (state["params"], state["opt"]), indices)
        return {"params": params, "opt": opt_state}, step_losses[-1]

    act = make_act(policy, discrete, action_scale, action_bias, lambda: state["params"])
    episode_returns, losses, last_mean, last_print = [], {}, float("nan"), 0.0
    start_time = time.time()
    step = 0
    while step < args.total_steps:
        # ---- 2. Update: gradient steps up to the next log or evaluation point, on minibatches drawn
        # with numpy (the same draws in both twins)
        chunk = min(
            LOG_EVERY - step % LOG_EVERY, args.eval_every - step % args.eval_every, args.total_steps - step
        )
        indices = jnp.asarray(rng.integers(0, size, size=(chunk, args.batch_size)))
        state, loss = update(state, observations, actions, indices)
        step += chunk

        if step % LOG_EVERY == 0 or step == args.total_steps:
            losses = {"bc_loss": loss.item()}
            sps = int(step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar("charts/SPS", sps, step)

        # ---- 3. Evaluation: the deterministic policy in fresh environments
        if step % args.eval_every == 0 or step == args.total_steps:
            returns = run_episodes(act, env_id, args.eval_episodes, args.seed + 10_000)
            for r in returns:
                episode_returns.append((step, float(r)))
                writer.add_scalar("eval/episodic_return", r, step)
            last_mean = float(returns.mean())
            writer.add_scalar(
                "eval/normalized_score", float(offline_data.normalized_score(args.dataset, last_mean)), step
            )
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>7,d}/{args.total_steps:,d}  loss {loss.item():.4f}  "
                f"eval return {last_mean:8.1f}  "
                f"SPS {int(step / (time.time() - start_time)):6,d}",
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
        "final_mean_return": last_mean,
        "normalized_score": float(offline_data.normalized_score(args.dataset, last_mean)),
        "dataset_size": int(size),
        "sps": args.total_steps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes({"policy": state["params"]}))
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
