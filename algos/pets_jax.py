"""PETS: probabilistic ensembles with trajectory sampling, CEM model-predictive control -- the JAX twin.

No policy and no value function: an ensemble of probabilistic networks learns the dynamics, and at
every environment step the cross-entropy method searches action sequences through it (trajectory
sampling TS-1, the task's known reward), executes the first action of the best plan and replans.
Paper:  Chua, Calandra, McAllister & Levine 2018, "Deep Reinforcement Learning in a Handful of
        Trials using Probabilistic Dynamics Models", arXiv:1805.12114.
Twin:   algos/pets_torch.py (`diff algos/pets_torch.py algos/pets_jax.py` shows only the framework).
Docs:   docs/algorithms/pets.md
Run:    python algos/pets_jax.py --seed 1
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
    """gymnasium environment id (Box actions; its reward function must be known to this script)"""
    total_timesteps: int = 3_000
    """total environment steps (Pendulum-v1: 200 a episode, so 3,000 = 15 episodes)"""
    warmup_episodes: int = 1
    """episodes of uniformly random actions before the first model fit"""
    ensemble_size: int = 5
    """number of probabilistic networks in the dynamics ensemble"""
    hidden_size: int = 64
    """width of the three hidden layers of each member (paper: 200 to 500)"""
    model_lr: float = 1e-3
    """Adam learning rate of the ensemble"""
    model_updates: int = 300
    """Adam steps of the ensemble after each episode, on all the data so far (paper: 5 epochs)"""
    model_batch_size: int = 64
    """transitions per member per gradient step, from the member's bootstrap resample (paper: 32)"""
    logvar_bound_coef: float = 0.01
    """weight of the penalty sum(max_logvar) - sum(min_logvar) that keeps the soft bounds tight"""
    horizon: int = 25
    """planning horizon of the MPC: imagined steps per candidate action sequence"""
    population: int = 100
    """candidate action sequences per CEM iteration (paper: 400 to 500)"""
    num_elites: int = 10
    """best candidates that CEM refits its mean and std to (paper: 40 to 50)"""
    cem_iterations: int = 5
    """CEM iterations per environment step"""
    cem_smoothing: float = 0.1
    """CEM refit: new = smoothing * old + (1 - smoothing) * elite statistic"""
    particles: int = 2
    """imagined trajectories per candidate, each through random members (TS-1; paper: 20)"""
    save_model: bool = False
    """save the trained ensemble (and its normalisation) to the run directory and evaluate the MPC"""
    eval_episodes: int = 10
    """episodes of the evaluation after --save-model (the MPC with the saved model)"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_timesteps=300,
    warmup_episodes=1,
    ensemble_size=2,
    hidden_size=16,
    model_updates=5,
    horizon=3,
    population=8,
    num_elites=2,
    cem_iterations=2,
    particles=2,
    save_model=True,
    eval_episodes=1,
)

MAX_LOGVAR_INIT, MIN_LOGVAR_INIT = 0.5, -10.0
# The environments whose reward this script knows, as a function of (s, a): see pendulum_reward.
KNOWN_REWARDS = ("Pendulum-v1",)


# ----------------------------------------------------------------------------- pure math
def pendulum_reward(obs, action):
    """Pendulum-v1's reward from the observation before the step, (cos th, sin th, thdot), and the
    action: -(th^2 + 0.1 thdot^2 + 0.001 u^2), th = atan2(sin, cos) in (-pi, pi] (the environment's
    angle_normalize), u the torque clipped into [-2, 2]."""
    th = jnp.arctan2(obs[..., 1], obs[..., 0])
    u = jnp.clip(action[..., 0], -2.0, 2.0)
    return -(th**2 + 0.1 * obs[..., 2] ** 2 + 0.001 * u**2)


def soft_bound_logvar(raw, max_logvar, min_logvar):
    """Squeeze a raw log-variance softly into [min_logvar, max_logvar] (PETS appendix A.1):
    first max - softplus(max - raw) (at most max, ~raw far below it), then
    min + softplus(. - min) (at least min). Smooth, so the gradient never vanishes at a hard clip."""
    logvar = max_logvar - jax.nn.softplus(max_logvar - raw)
    return min_logvar + jax.nn.softplus(logvar - min_logvar)


def gaussian_nll(mean, logvar, target):
    """Negative log-likelihood of target under N(mean, exp(logvar)), diagonal: summed over the last
    (output) axis, averaged over all the others (members, batch):

        0.5 * sum_d [ (y_d - mu_d)^2 exp(-logvar_d) + logvar_d + log(2 pi) ].
    """
    per_dim = (target - mean) ** 2 * jnp.exp(-logvar) + logvar + np.log(2.0 * np.pi)
    return 0.5 * per_dim.sum(-1).mean()


def ensemble_loss(mean, logvar, target, max_logvar, min_logvar, bound_coef):
    """The ensemble's training loss: the Gaussian NLL plus bound_coef * (sum max_logvar - sum min_logvar),
    which pulls the learnable soft bounds towards each other (otherwise max could grow freely)."""
    return gaussian_nll(mean, logvar, target) + bound_coef * (max_logvar.sum() - min_logvar.sum())


def ts1_group(x, perm, ensemble_size):
    """TS-1 routing: the rows of x (N, d) in the order perm, split into ensemble_size equal groups
    (E, N / E, d); group e goes through member e, so each row meets a uniformly random member."""
    return x[perm].reshape(ensemble_size, -1, x.shape[-1])


def ts1_ungroup(y, perm):
    """Undo ts1_group: (E, N / E, d) back to (N, d) in the original row order."""
    flat = y.reshape(-1, y.shape[-1])
    return jnp.zeros_like(flat).at[perm].set(flat)


def cem_refit(samples, values, mean, std, num_elites, smoothing):
    """One CEM refit: the num_elites samples (population, horizon, action_dim) with the highest values
    (population,), their mean and (population) std, blended with the old ones:
    new = smoothing * old + (1 - smoothing) * elite statistic."""
    elites = samples[jax.lax.top_k(values, num_elites)[1]]
    new_mean = smoothing * mean + (1.0 - smoothing) * elites.mean(0)
    new_std = smoothing * std + (1.0 - smoothing) * elites.std(0)
    return new_mean, new_std


def cem_optimize(objective, mean, std, low, high, noise, num_elites, smoothing):
    """The cross-entropy method over action sequences. noise (iterations, population, horizon,
    action_dim) holds standard normal draws; each iteration samples clip(mean + std * noise[i], low,
    high), scores them with objective(samples, i) -> (population,) and refits mean and std to the
    elites. Returns the final mean (horizon, action_dim): MPC executes its first action."""
    for i in range(noise.shape[0]):
        samples = jnp.clip(mean + std * noise[i], low, high)
        mean, std = cem_refit(samples, objective(samples, i), mean, std, num_elites, smoothing)
    return mean


def shift_mean(mean, fill):
    """Warm start of the next step's CEM: drop the executed first action, append fill (the middle of
    the action range) at the end."""
    return jnp.concatenate([mean[1:], fill[None]], 0)


# ----------------------------------------------------------------------------- networks
class EnsembleLinear(nn.Module):
    """ensemble_size independent linear layers applied at once: x (E, N, in) -> (E, N, out), one
    batched matmul. torch's default weights per member, uniform in +-1/sqrt(fan_in); zero biases
    (the torch twin does the same)."""

    ensemble_size: int
    out_features: int

    @nn.compact
    def __call__(self, x):
        in_features = x.shape[-1]
        bound = 1.0 / np.sqrt(in_features)
        uniform = lambda key, shape: jax.random.uniform(key, shape, jnp.float32, -bound, bound)
        weight = self.param("kernel", uniform, (self.ensemble_size, in_features, self.out_features))
        bias = self.param("bias", nn.initializers.zeros, (self.ensemble_size, 1, self.out_features))
        return bias + jnp.einsum("eni,eio->eno", x, weight)


class ProbabilisticEnsemble(nn.Module):
    """E members, each an MLP with three SiLU (swish) hidden layers mapping the normalised input to
    the mean and the soft-bounded log-variance of a diagonal Gaussian over the normalised target.
    max_logvar / min_logvar are learnable, one per output dimension, shared by the members.
    The normalisation statistics live in a dict `norm` beside the parameters, saved with them."""

    ensemble_size: int
    out_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, x):
        """Normalised inputs (E, N, in) -> normalised (mean, logvar), each (E, N, out)."""
        for _ in range(3):
            x = nn.silu(EnsembleLinear(self.ensemble_size, self.hidden_size)(x))
        out = EnsembleLinear(self.ensemble_size, 2 * self.out_dim)(x)
        max_logvar = self.param("max_logvar", nn.initializers.constant(MAX_LOGVAR_INIT), (self.out_dim,))
        min_logvar = self.param("min_logvar", nn.initializers.constant(MIN_LOGVAR_INIT), (self.out_dim,))
        mean, raw = out[..., : self.out_dim], out[..., self.out_dim :]
        return mean, soft_bound_logvar(raw, max_logvar, min_logvar)


def make_normalizer(inputs, targets):
    """Mean and std of the raw inputs and targets (std floored at 1e-6)."""
    norm = {}
    for name, data in (("in", inputs), ("out", targets)):
        norm[f"{name}_mean"] = jnp.asarray(data.mean(0))
        norm[f"{name}_std"] = jnp.asarray(np.maximum(data.std(0), 1e-6))
    return norm


def ensemble_sample(model, params, norm, x, eps):
    """Raw inputs (E, N, in), standard normal eps (E, N, out) -> a raw target sample
    out_mean + out_std * (mean + exp(logvar / 2) * eps), one per row from its member."""
    mean, logvar = model.apply(params, (x - norm["in_mean"]) / norm["in_std"])
    return norm["out_mean"] + norm["out_std"] * (mean + jnp.exp(0.5 * logvar) * eps)


def make_fit(model, optimizer, bound_coef):
    """The jitted fit: lax.scan of Adam steps on ensemble_loss over the precomputed minibatch
    indices (num_updates, E, batch_size). One call per training phase."""

    def loss_fn(params, x, y):
        mean, logvar = model.apply(params, x)
        p = params["params"]
        return ensemble_loss(mean, logvar, y, p["max_logvar"], p["min_logvar"], bound_coef)

    @jax.jit
    def fit(params, opt_state, x, y, idx):
        def step(carry, batch_idx):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, x[batch_idx], y[batch_idx])
            updates, opt_state = optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), idx)
        return params, opt_state, losses[-1]

    return fit


def fit_ensemble(model, fit, params, opt_state, inputs, targets, num_updates, batch_size, rng):
    """num_updates Adam steps on ensemble_loss. Each member gets its own bootstrap resample of the
    N rows (N draws with replacement, from rng), and each step draws its own minibatch from it.
    Normalisation statistics are refreshed from all the data first. Returns the new parameters,
    optimiser state and normaliser, and the last loss."""
    norm = make_normalizer(inputs, targets)
    n, E = len(inputs), model.ensemble_size
    x = (jnp.asarray(inputs) - norm["in_mean"]) / norm["in_std"]
    y = (jnp.asarray(targets) - norm["out_mean"]) / norm["out_std"]
    bootstrap = rng.integers(0, n, size=(E, n))
    idx = np.stack(
        [
            np.take_along_axis(bootstrap, rng.integers(0, n, size=(E, batch_size)), 1)
            for _ in range(num_updates)
        ]
    )
    params, opt_state, loss = fit(params, opt_state, x, y, jnp.asarray(idx))
    return params, opt_state, norm, float(loss)


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
    last observation is infos["final_obs"][i]. The model learns s' - s from that one."""
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
        ("warmup_episodes", args.warmup_episodes >= 1, ">= 1"),
        ("ensemble_size", args.ensemble_size >= 1, ">= 1"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("model_lr", args.model_lr > 0, "> 0"),
        ("model_updates", args.model_updates >= 1, ">= 1"),
        ("model_batch_size", args.model_batch_size >= 1, ">= 1"),
        ("logvar_bound_coef", args.logvar_bound_coef >= 0, ">= 0"),
        ("horizon", args.horizon >= 1, ">= 1"),
        ("population", args.population >= 1, ">= 1"),
        ("num_elites", args.num_elites >= 1, ">= 1"),
        ("cem_iterations", args.cem_iterations >= 1, ">= 1"),
        ("cem_smoothing", 0 <= args.cem_smoothing < 1, "in [0, 1)"),
        ("particles", args.particles >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("num_elites", args.num_elites <= args.population, "<= --population"),
        # TS-1 sends equal groups of the population * particles rows through the members
        (
            "population",
            args.ensemble_size >= 1 and args.population * args.particles % args.ensemble_size == 0,
            "such that --population * --particles is a multiple of --ensemble-size",
        ),
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
    if args.env_id not in KNOWN_REWARDS:
        raise ValueError(
            f"--env-id {args.env_id}: PETS plans with the task's known reward function, and this script "
            f"knows it for {', '.join(KNOWN_REWARDS)} only"
        )


class Planner:
    """CEM model-predictive control through the ensemble with TS-1 trajectory sampling. The whole
    planner (noise, CEM iterations, imagined rollouts, key splits) is one jitted call per step."""

    def __init__(self, model, args, low, high, key):
        self.model, self.args, self.key = model, args, key
        self.low, self.high = jnp.asarray(low), jnp.asarray(high)
        self.fill = (self.low + self.high) / 2.0
        self.init_std = (self.high - self.low) / 4.0
        self.mean = jnp.tile(self.fill, (args.horizon, 1))
        self.plan = jax.jit(self._plan)

    def returns(self, params, norm, obs, samples, key):
        """Expected return of each candidate (population, horizon, action_dim) from obs: the known
        reward summed along `particles` imagined trajectories per candidate, averaged over them."""
        a, E, P = self.args, self.model.ensemble_size, self.args.particles
        actions = jnp.repeat(samples, P, 0)  # (population * P, horizon, action_dim)
        state = jnp.broadcast_to(obs, (actions.shape[0], obs.shape[-1]))

        def step(carry, t):
            state, total = carry
            total = total + pendulum_reward(state, actions[:, t])
            perm_key, eps_key = jax.random.split(jax.random.fold_in(key, t))
            perm = jax.random.permutation(perm_key, actions.shape[0])
            x = ts1_group(jnp.concatenate([state, actions[:, t]], -1), perm, E)
            delta = ensemble_sample(
                self.model, params, norm, x, jax.random.normal(eps_key, (E, x.shape[1], state.shape[-1]))
            )
            return (state + ts1_ungroup(delta, perm), total), None

        (_, total), _ = jax.lax.scan(step, (state, jnp.zeros(actions.shape[0])), jnp.arange(a.horizon))
        return total.reshape(-1, P).mean(1)

    def _plan(self, params, norm, obs, prev_mean, key):
        a = self.args
        key, noise_key, returns_key = jax.random.split(key, 3)
        noise = jax.random.normal(noise_key, (a.cem_iterations, a.population, a.horizon, self.low.shape[0]))
        objective = lambda samples, i: self.returns(
            params, norm, obs, samples, jax.random.fold_in(returns_key, i)
        )
        mean = cem_optimize(
            objective,
            prev_mean,
            jnp.broadcast_to(self.init_std, prev_mean.shape),
            self.low,
            self.high,
            noise,
            a.num_elites,
            a.cem_smoothing,
        )
        return mean[0], shift_mean(mean, self.fill), key

    def act(self, params, norm, obs):
        """Plan from obs (obs_dim,), return the first action; keep the shifted mean for the next step."""
        action, self.mean, self.key = self.plan(
            params, norm, jnp.asarray(obs, dtype=jnp.float32), self.mean, self.key
        )
        return np.asarray(action)

    def reset(self):
        self.mean = jnp.tile(self.fill, (self.args.horizon, 1))


def evaluate(model_path, env_id, eval_episodes, seed, args):
    """Load the saved ensemble into a fresh network; run the MPC with it (no further training)."""
    env = gym.make(env_id)
    space = env.action_space
    obs_dim, action_dim = int(np.prod(env.observation_space.shape)), int(np.prod(space.shape))
    model = ProbabilisticEnsemble(args.ensemble_size, obs_dim, args.hidden_size)
    template = {
        "params": model.init(jax.random.PRNGKey(0), jnp.zeros((args.ensemble_size, 1, obs_dim + action_dim))),
        "norm": make_normalizer(
            np.zeros((2, obs_dim + action_dim), np.float32), np.zeros((2, obs_dim), np.float32)
        ),
    }
    with open(model_path, "rb") as f:
        saved = flax.serialization.from_bytes(template, f.read())
    planner = Planner(model, args, space.low, space.high, jax.random.PRNGKey(seed))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        planner.reset()
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(planner.act(saved["params"], saved["norm"], obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, the environment, the ensemble and its optimiser, the planner, the data
    # One small jitted call per environment step: run it on the calling thread (docs/contributing.md).
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)

    envs = make_envs(args.env_id, 1)
    envs.action_space.seed(args.seed)
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(space.shape))
    model = ProbabilisticEnsemble(args.ensemble_size, obs_dim, args.hidden_size)
    key, init_key, planner_key = jax.random.split(key, 3)
    params = model.init(init_key, jnp.zeros((args.ensemble_size, 1, obs_dim + action_dim)))
    optimizer = optax.adam(args.model_lr)
    opt_state = optimizer.init(params)
    fit = make_fit(model, optimizer, args.logvar_bound_coef)
    norm = None
    planner = Planner(model, args, space.low, space.high, planner_key)

    # All the data: (s, a) inputs and s' - s targets.
    inputs_buf = np.zeros((args.total_timesteps, obs_dim + action_dim), dtype=np.float32)
    targets_buf = np.zeros((args.total_timesteps, obs_dim), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return, ep_length = np.zeros(1), np.zeros(1, dtype=np.int64)
    losses, last_print, model_fitted = {}, 0.0, False
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 2. Act: random during the warm-up episodes, then the MPC through the model
        if not model_fitted:
            actions = envs.action_space.sample()
        else:
            actions = planner.act(params, norm, obs[0])[None].astype(np.float32)
        next_obs, reward, terminated, truncated, infos = envs.step(actions)
        ep_return += reward
        ep_length += 1

        # ---- 3. Store: an ended episode's next observation is its true last one, not the reset
        real_next_obs = transition_next_obs(next_obs, infos)
        inputs_buf[global_step - 1] = np.concatenate([obs[0], actions[0]])
        targets_buf[global_step - 1] = real_next_obs[0] - obs[0]
        obs = next_obs
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-5:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0
            planner.reset()

            # ---- 4. Model: after each episode past the warm-up, fit the ensemble on all the data so far
            if len(episode_returns) >= args.warmup_episodes and global_step < args.total_timesteps:
                params, opt_state, norm, loss = fit_ensemble(
                    model,
                    fit,
                    params,
                    opt_state,
                    inputs_buf[:global_step],
                    targets_buf[:global_step],
                    args.model_updates,
                    args.model_batch_size,
                    rng,
                )
                model_fitted = True
                losses = {
                    "model_loss": loss,
                    "max_logvar": float(params["params"]["max_logvar"].mean()),
                    "min_logvar": float(params["params"]["min_logvar"].mean()),
                }
                for name, value in losses.items():
                    writer.add_scalar(f"losses/{name}", value, global_step)

        # SPS and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(5) {mean_recent:7.1f}  "
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
            f.write(flax.serialization.to_bytes({"params": params, "norm": norm}))
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, args.seed + 10_000, args)
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
