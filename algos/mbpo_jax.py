"""Model-based policy optimisation (MBPO): SAC on real data plus short model rollouts -- the JAX twin.

SAC trained mostly on short branched rollouts of a probabilistic dynamics ensemble, started from real
states; the ensemble is refit on the real replay buffer every few hundred steps.
Paper:  Janner, Fu, Zhang and Levine 2019, "When to Trust Your Model: Model-Based Policy
        Optimization", arXiv:1906.08253 (the SAC inside: Haarnoja et al. 2018, arXiv:1801.01290
        and arXiv:1812.05905; the probabilistic ensemble: Chua et al. 2018, arXiv:1805.12114).
Twin:   algos/mbpo_torch.py (`diff algos/mbpo_torch.py algos/mbpo_jax.py` shows only the framework).
Docs:   docs/algorithms/mbpo.md
Run:    python algos/mbpo_jax.py --seed 1
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
    """gymnasium environment id (Box actions with finite bounds, a termination rule in TERMINATION_FNS)"""
    total_timesteps: int = 3_000
    """total environment steps"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """transitions per SAC gradient step, real and model together"""
    real_ratio: float = 0.05
    """fraction of each SAC batch drawn from the real buffer, the rest from the model buffer"""
    updates_per_step: int = 10
    """SAC gradient steps per environment step (paper: 20)"""
    learning_starts: int = 400
    """warm-up: uniformly random actions, no model and no SAC update for this many steps (paper: 5k)"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor"""
    q_lr: float = 1e-3
    """Adam learning rate of the two critics (paper: 3e-4)"""
    alpha_lr: float = 1e-3
    """Adam learning rate of log alpha, the automatic temperature (paper: 3e-4)"""
    alpha: float = 0.2
    """entropy temperature: the fixed value, or the initial one with --autotune (paper: 1.0)"""
    autotune: bool = True
    """tune alpha so that the policy's entropy tracks the target -dim(A)"""
    hidden_size: int = 256
    """width of the two hidden layers of the actor and of each critic"""
    ensemble_size: int = 7
    """members of the dynamics ensemble"""
    num_elites: int = 5
    """members with the lowest held-out error that the rollouts use"""
    model_hidden_size: int = 200
    """width of the hidden layers of each ensemble member"""
    model_layers: int = 3
    """hidden layers of each ensemble member (paper: 4)"""
    model_lr: float = 1e-3
    """Adam learning rate of the ensemble"""
    model_batch_size: int = 256
    """transitions per ensemble gradient step (each member draws its own)"""
    model_train_steps: int = 200
    """ensemble gradient steps per refit (paper: until the held-out loss stops improving)"""
    holdout_ratio: float = 0.2
    """fraction of the real buffer held out to rank the members (elites)"""
    model_train_freq: int = 100
    """real steps between refits of the ensemble, each followed by fresh rollouts (paper: 250)"""
    rollout_batch_size: int = 2_000
    """branched rollouts started from real buffer states at each refit (paper: 100k)"""
    model_buffer_size: int = 50_000
    """capacity of the model buffer, a ring (paper: the last epoch's rollouts)"""
    epoch_length: int = 200
    """environment steps per epoch of the rollout-length schedule (paper: 1,000)"""
    rollout_min_length: int = 1
    """rollout length up to rollout_min_epoch"""
    rollout_max_length: int = 5
    """rollout length from rollout_max_epoch on (linear in between)"""
    rollout_min_epoch: int = 2
    """epoch at which the rollout length starts to grow"""
    rollout_max_epoch: int = 10
    """epoch at which the rollout length reaches rollout_max_length"""
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
    total_timesteps=400,
    learning_starts=200,
    batch_size=32,
    hidden_size=32,
    updates_per_step=2,
    ensemble_size=3,
    num_elites=2,
    model_hidden_size=32,
    model_layers=2,
    model_batch_size=32,
    model_train_steps=10,
    model_train_freq=50,
    rollout_batch_size=64,
    model_buffer_size=1_000,
    epoch_length=50,
    rollout_min_epoch=4,
    rollout_max_epoch=6,
    rollout_max_length=3,
    save_model=True,
    eval_episodes=1,
)

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
RETURN_WINDOW = 5  # final_mean_return: mean of the last 5 episodes (1,000 steps on Pendulum)


# ----------------------------------------------------------------------------- pure math: SAC
def tanh_log_det_jacobian(u):
    """sum_i log(1 - tanh(u_i)^2) over the last (action) axis, in the stable form

    log(1 - tanh(u)^2) = log(4 e^{-2u} / (1 + e^{-2u})^2) = 2 (log 2 - u - softplus(-2u)).
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
    """r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log pi(a' | s')), a' ~ pi(s')."""
    soft_value = jnp.minimum(next_q1, next_q2) - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminated) * soft_value


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def sac_actor_loss(q1, q2, log_prob, alpha):
    """mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a)), a the reparameterised sample."""
    return (alpha * log_prob - jnp.minimum(q1, q2)).mean()


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-alpha * mean(log pi + target_entropy), alpha = exp(log_alpha), log pi held fixed."""
    return -(jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy)).mean()


# ----------------------------------------------------------------------------- pure math: the model
def rollout_length(epoch, min_length, max_length, min_epoch, max_epoch):
    """The paper's linear schedule: min_length up to min_epoch, then linear in the epoch to
    max_length at max_epoch, then max_length; rounded down to whole steps.

        k(e) = floor(min_length + clip((e - min_epoch) / (max_epoch - min_epoch), 0, 1)
                     * (max_length - min_length))
    """
    if max_epoch <= min_epoch:
        return int(max_length if epoch >= max_epoch else min_length)
    frac = min(max((epoch - min_epoch) / (max_epoch - min_epoch), 0.0), 1.0)
    return int(min_length + frac * (max_length - min_length))


def real_model_split(batch_size, real_ratio):
    """(transitions from the real buffer, transitions from the model buffer) of one SAC batch:
    int(batch_size * real_ratio) real ones, the rest from the model."""
    n_real = int(batch_size * real_ratio)
    return n_real, batch_size - n_real


def fit_normaliser(x):
    """Per-feature mean and (population) standard deviation of the model inputs (rows of x); a
    constant feature gets std 1, so normalising never divides by zero."""
    mean, std = x.mean(0), x.std(0)
    return mean, jnp.where(std < 1e-6, jnp.ones_like(std), std)


def bound_log_var(raw, max_log_var, min_log_var):
    """Soft bounds of the predicted log-variance (Chua et al. 2018, appendix A.1): smooth, so the
    gradient never dies, and below max_log_var / above min_log_var; both bounds are learned.

        lv = max - softplus(max - raw);  lv = min + softplus(lv - min)
    """
    log_var = max_log_var - jax.nn.softplus(max_log_var - raw)
    return min_log_var + jax.nn.softplus(log_var - min_log_var)


def gaussian_nll(mean, log_var, target):
    """Negative log-likelihood of target under N(mean, exp(log_var)) per element, without the
    constant 0.5 log(2 pi), averaged over the last two axes (batch, output): one value per member.

        0.5 * ((target - mean)^2 * exp(-log_var) + log_var)
    """
    return (0.5 * ((target - mean) ** 2 * jnp.exp(-log_var) + log_var)).mean((-2, -1))


def model_loss(mean, log_var, target, max_log_var, min_log_var):
    """The ensemble's training loss: the members' Gaussian NLLs summed, plus the small penalty
    0.01 * (sum max_log_var - sum min_log_var) that keeps the learned bounds tight."""
    return gaussian_nll(mean, log_var, target).sum() + 0.01 * (max_log_var.sum() - min_log_var.sum())


def select_elites(holdout_losses, num_elites):
    """Indices of the num_elites members with the lowest held-out loss, best first."""
    return np.argsort(np.asarray(holdout_losses), kind="stable")[:num_elites]


def no_termination(obs, actions, next_obs):
    """Pendulum never terminates (only the 200-step time limit truncates): all False."""
    return jnp.zeros(obs.shape[0], dtype=bool)


# The termination rule of model rollouts, per env (the model predicts s' and r, not done).
TERMINATION_FNS = {"Pendulum-v1": no_termination}


def model_rollout(model_fn, policy_fn, start_obs, members, model_noise, action_noise, termination_fn):
    """Branched rollouts from the real states start_obs (N, D), len(members) steps. At step t the
    policy acts, a = policy_fn(obs, action_noise[t]); model_fn(obs, a) gives every member's mean and
    log-variance of [s' - s, r], shape (E, N, D + 1); rollout i uses member members[t, i] and the
    sample mean + exp(log_var / 2) * model_noise[t]. A rollout stops once termination_fn says so:
    valid[t, i] is False for the steps after it. Returns the stacked transitions, leading axes (T, N)."""
    n, obs_dim = start_obs.shape
    rows = jnp.arange(n)

    def step(carry, xs):
        obs, alive = carry
        member, noise, a_noise = xs
        actions = policy_fn(obs, a_noise)
        mean, log_var = model_fn(obs, actions)
        mean, log_var = mean[member, rows], log_var[member, rows]
        sample = mean + jnp.exp(0.5 * log_var) * noise
        next_obs, rewards = obs + sample[:, :obs_dim], sample[:, obs_dim]
        terminated = termination_fn(obs, actions, next_obs)
        out = {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "next_obs": next_obs,
            "terminated": terminated.astype(jnp.float32),
            "valid": alive,
        }
        return (next_obs, alive & ~terminated), out

    _, out = jax.lax.scan(step, (start_obs, jnp.ones(n, dtype=bool)), (members, model_noise, action_noise))
    return out


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
    """Squashed Gaussian policy: a ReLU trunk, then the mean and log std of u, a = scale tanh(u) + bias."""

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

    def sample(self, actor_params, obs, key=None, noise=None):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self.actor.apply(actor_params, obs)
        noise = jax.random.normal(key, mean.shape) if noise is None else noise
        return sample_squashed(mean, log_std, noise, self.action_scale, self.action_bias)

    @partial(jax.jit, static_argnums=0)
    def act(self, actor_params, obs, key):
        """A sampled action and the next key, the key split inside the jitted call."""
        key, sample_key = jax.random.split(key)
        return self.sample(actor_params, obs, sample_key)[0], key

    def deterministic(self, actor_params, obs):
        """The evaluation action: tanh of the mean, scaled into the bounds."""
        return jnp.tanh(self.actor.apply(actor_params, obs)[0]) * self.action_scale + self.action_bias


class Member(nn.Module):
    """One ensemble member on normalised inputs: SiLU hidden layers, a head of 2 * out_dim outputs."""

    out_dim: int
    hidden_size: int
    layers: int

    @nn.compact
    def __call__(self, x):
        for _ in range(self.layers):
            x = nn.silu(layer_init(self.hidden_size)(x))
        return layer_init(2 * self.out_dim)(x)


class DynamicsEnsemble:
    """E probabilistic networks p(s' - s, r | s, a) = N(mean, diag(exp(log_var))): normalised inputs,
    SiLU hidden layers, a head of 2 (D + 1) outputs split into the mean and the raw log-variance,
    then the soft bounds of bound_log_var (max/min log-variance learned, shared by the members).
    params = {"members": E members' parameters stacked on a leading axis, "max_log_var", "min_log_var"};
    the normaliser {"mean", "std"} is a separate, untrained pytree."""

    def __init__(self, ensemble_size, in_dim, out_dim, hidden_size, layers):
        self.member = Member(out_dim, hidden_size, layers)
        self.ensemble_size, self.in_dim, self.out_dim = ensemble_size, in_dim, out_dim

    def init(self, key):
        keys = jax.random.split(key, self.ensemble_size)
        members = jax.vmap(self.member.init, in_axes=(0, None))(keys, jnp.zeros((1, self.in_dim)))
        return {
            "members": members,
            "max_log_var": jnp.full((self.out_dim,), 0.5, dtype=jnp.float32),
            "min_log_var": jnp.full((self.out_dim,), -10.0, dtype=jnp.float32),
        }

    def apply(self, params, norm, x):
        """x: (N, in) shared by every member, or (E, N, in) one batch per member -> (E, N, out) twice."""
        x = (x - norm["mean"]) / norm["std"]
        in_axes = (0, None) if x.ndim == 2 else (0, 0)
        out = jax.vmap(self.member.apply, in_axes=in_axes)(params["members"], x)
        mean, raw = jnp.split(out, 2, axis=-1)
        return mean, bound_log_var(raw, params["max_log_var"], params["min_log_var"])


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
    """The s' to store for each env's transition: at an episode's end, infos["final_obs"][i]."""
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
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("real_ratio", 0 <= args.real_ratio <= 1, "in [0, 1]"),
        ("updates_per_step", args.updates_per_step >= 1, ">= 1"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("policy_lr", args.policy_lr > 0, "> 0"),
        ("q_lr", args.q_lr > 0, "> 0"),
        ("alpha_lr", args.alpha_lr > 0, "> 0"),
        ("alpha", args.alpha > 0 if args.autotune else args.alpha >= 0, "> 0 with --autotune, else >= 0"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("ensemble_size", args.ensemble_size >= 1, ">= 1"),
        ("num_elites", args.num_elites >= 1, ">= 1"),
        ("model_hidden_size", args.model_hidden_size >= 1, ">= 1"),
        ("model_layers", args.model_layers >= 1, ">= 1"),
        ("model_lr", args.model_lr > 0, "> 0"),
        ("model_batch_size", args.model_batch_size >= 1, ">= 1"),
        ("model_train_steps", args.model_train_steps >= 1, ">= 1"),
        ("holdout_ratio", 0 < args.holdout_ratio < 1, "in (0, 1)"),
        ("model_train_freq", args.model_train_freq >= 1, ">= 1"),
        ("rollout_batch_size", args.rollout_batch_size >= 1, ">= 1"),
        ("model_buffer_size", args.model_buffer_size >= 1, ">= 1"),
        ("epoch_length", args.epoch_length >= 1, ">= 1"),
        ("rollout_min_length", args.rollout_min_length >= 1, ">= 1"),
        ("rollout_max_length", args.rollout_max_length >= 1, ">= 1"),
        ("rollout_min_epoch", args.rollout_min_epoch >= 0, ">= 0"),
        ("rollout_max_epoch", args.rollout_max_epoch >= 0, ">= 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("num_elites", args.num_elites <= args.ensemble_size, "<= --ensemble-size"),
        ("rollout_max_length", args.rollout_max_length >= args.rollout_min_length, ">= --rollout-min-length"),
        ("learning_starts", args.learning_starts >= args.batch_size, ">= --batch-size"),
        ("learning_starts", args.learning_starts >= args.model_batch_size, ">= --model-batch-size"),
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
    if args.env_id not in TERMINATION_FNS:
        raise ValueError(
            f"--env-id {args.env_id} has no termination rule for model rollouts; add one to TERMINATION_FNS"
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

    # ---- 1. Setup: seeding, environments, networks, the ensemble, optimisers, buffers
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
    key, init_key, model_key = jax.random.split(key, 3)
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
    model = DynamicsEnsemble(
        args.ensemble_size, obs_dim + action_dim, obs_dim + 1, args.model_hidden_size, args.model_layers
    )
    model_params = model.init(model_key)
    model_optimizer = optax.adam(args.model_lr)
    model_opt = model_optimizer.init(model_params)
    norm = {"mean": jnp.zeros(obs_dim + action_dim), "std": jnp.ones(obs_dim + action_dim)}
    termination_fn = TERMINATION_FNS[args.env_id]
    elites = np.arange(args.num_elites)

    def update(state, batch, key):
        """One gradient step, critics, actor, temperature and the Polyak targets."""
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

    @jax.jit
    def update_many(state, batches, key):
        """updates_per_step SAC steps, one per batch (leading axis), as one jitted lax.scan."""

        def body(carry, batch):
            state, key = carry
            state, losses, key = update(state, batch, key)
            return (state, key), losses

        (state, key), losses = jax.lax.scan(body, (state, key), batches)
        return state, jax.tree.map(lambda x: x[-1], losses), key

    @jax.jit
    def model_train_steps(model_params, model_opt, norm, inputs, targets):
        """model_train_steps ensemble gradient steps (inputs: (steps, E, B, in)) as one jitted lax.scan."""

        def body(carry, batch):
            model_params, model_opt = carry

            def loss_fn(p):
                mean, log_var = model.apply(p, norm, batch[0])
                return model_loss(mean, log_var, batch[1], p["max_log_var"], p["min_log_var"])

            loss, grads = jax.value_and_grad(loss_fn)(model_params)
            updates, model_opt = model_optimizer.update(grads, model_opt)
            return (optax.apply_updates(model_params, updates), model_opt), loss

        (model_params, model_opt), loss = jax.lax.scan(body, (model_params, model_opt), (inputs, targets))
        return model_params, model_opt, loss[-1]

    @jax.jit
    def holdout_errors(model_params, norm, inputs, targets, mask):
        """Each member's mean squared error of the predicted mean on the held-out rows (mask: the
        rows in use; the held-out set is padded to a fixed size, so this compiles once)."""
        mean, _ = model.apply(model_params, norm, inputs)
        return (((mean - targets) ** 2).mean(-1) * mask).sum(-1) / mask.sum()

    @partial(jax.jit, static_argnums=5)
    def rollout_fn(actor_params, model_params, norm, start_obs, elites, length, key):
        """The branched rollouts, the draws of members and noise included, as one jitted call."""
        key, member_key, noise_key, action_key = jax.random.split(key, 4)
        n = start_obs.shape[0]
        members = elites[jax.random.randint(member_key, (length, n), 0, elites.shape[0])]
        model_noise = jax.random.normal(noise_key, (length, n, obs_dim + 1))
        action_noise = jax.random.normal(action_key, (length, n, action_dim))
        policy_fn = lambda obs, noise: agent.sample(actor_params, obs, noise=noise)[0]
        model_fn = lambda obs, actions: model.apply(model_params, norm, jnp.concatenate([obs, actions], -1))
        return model_rollout(
            model_fn, policy_fn, start_obs, members, model_noise, action_noise, termination_fn
        ), key

    # Buffers on the host (each sampled batch moves to the device). Real buffer: every real transition
    # (total_timesteps of them). Model buffer: a ring.
    capacity = args.total_timesteps
    obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    next_obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((capacity, action_dim), dtype=np.float32)
    rewards_buf = np.zeros(capacity, dtype=np.float32)
    terminated_buf = np.zeros(capacity, dtype=np.float32)
    model_buf = {
        "obs": np.zeros((args.model_buffer_size, obs_dim), dtype=np.float32),
        "next_obs": np.zeros((args.model_buffer_size, obs_dim), dtype=np.float32),
        "actions": np.zeros((args.model_buffer_size, action_dim), dtype=np.float32),
        "rewards": np.zeros(args.model_buffer_size, dtype=np.float32),
        "terminated": np.zeros(args.model_buffer_size, dtype=np.float32),
    }
    model_ptr, model_count = 0, 0
    n_real, n_model = real_model_split(args.batch_size, args.real_ratio)
    max_holdout = max(1, int(args.total_timesteps * args.holdout_ratio))

    def train_model(n):
        """Refit the ensemble on the first n real transitions; return (train NLL, held-out MSE per member)."""
        nonlocal model_params, model_opt, norm
        perm = np.random.permutation(n)
        n_holdout = max(1, int(n * args.holdout_ratio))
        train_idx, holdout_idx = perm[n_holdout:], perm[:n_holdout]
        inputs = np.concatenate([obs_buf[:n], actions_buf[:n]], -1)
        targets = np.concatenate([next_obs_buf[:n] - obs_buf[:n], rewards_buf[:n, None]], -1)
        mean, std = fit_normaliser(jnp.asarray(inputs[train_idx]))
        norm = {"mean": mean, "std": std}
        idx = train_idx[
            np.random.randint(
                0, len(train_idx), (args.model_train_steps, args.ensemble_size, args.model_batch_size)
            )
        ]
        model_params, model_opt, loss = model_train_steps(
            model_params, model_opt, norm, inputs[idx], targets[idx]
        )
        pad = np.resize(holdout_idx, max_holdout)  # repeats the held-out rows; the mask counts each once
        mask = (np.arange(max_holdout) < n_holdout).astype(np.float32)
        holdout_mse = np.asarray(holdout_errors(model_params, norm, inputs[pad], targets[pad], mask))
        return float(loss), holdout_mse

    episode_returns, recent = [], []
    ep_return, ep_length = np.zeros(1), np.zeros(1, dtype=np.int64)
    losses, model_losses, last_print, length = {}, {}, 0.0, args.rollout_min_length
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
        slot = global_step - 1
        obs_buf[slot], next_obs_buf[slot], actions_buf[slot] = obs[0], real_next_obs[0], actions[0]
        rewards_buf[slot], terminated_buf[slot] = reward[0], terminated[0]
        obs = next_obs
        # episode statistics of every env whose episode ended at this step
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-RETURN_WINDOW:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        if global_step <= args.learning_starts:
            continue

        # ---- 4. Model: refit the ensemble, pick the elites, add branched rollouts to the model buffer
        if (global_step - args.learning_starts - 1) % args.model_train_freq == 0:
            model_nll, holdout_mse = train_model(global_step)
            elites = select_elites(holdout_mse, args.num_elites)
            length = rollout_length(
                global_step // args.epoch_length,
                args.rollout_min_length,
                args.rollout_max_length,
                args.rollout_min_epoch,
                args.rollout_max_epoch,
            )
            start = np.random.randint(0, global_step, size=args.rollout_batch_size)
            rollout, key = rollout_fn(
                state["params"]["actor"], model_params, norm, obs_buf[start], jnp.asarray(elites), length, key
            )
            rollout = {k: np.asarray(v) for k, v in rollout.items()}
            valid = rollout.pop("valid").reshape(-1)
            for k, v in rollout.items():
                v = v.reshape(length * args.rollout_batch_size, *v.shape[2:])[valid]
                slots = (model_ptr + np.arange(len(v))) % args.model_buffer_size
                model_buf[k][slots] = v
            model_ptr = (model_ptr + int(valid.sum())) % args.model_buffer_size
            model_count = min(model_count + int(valid.sum()), args.model_buffer_size)
            model_losses = {
                "model_nll": model_nll,
                "model_holdout_mse": float(holdout_mse[elites].mean()),
                "rollout_length": float(length),
            }

        # ---- 5. Update: updates_per_step SAC steps on batches of n_real real, n_model model transitions
        idx_r = np.random.randint(0, global_step, size=(args.updates_per_step, n_real))
        idx_m = np.random.randint(0, model_count, size=(args.updates_per_step, n_model))
        batches = {
            "obs": np.concatenate([obs_buf[idx_r], model_buf["obs"][idx_m]], 1),
            "next_obs": np.concatenate([next_obs_buf[idx_r], model_buf["next_obs"][idx_m]], 1),
            "actions": np.concatenate([actions_buf[idx_r], model_buf["actions"][idx_m]], 1),
            "rewards": np.concatenate([rewards_buf[idx_r], model_buf["rewards"][idx_m]], 1),
            "terminated": np.concatenate([terminated_buf[idx_r], model_buf["terminated"][idx_m]], 1),
        }
        state, step_losses, key = update_many(state, batches, key)

        # losses and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            losses = {**{name: float(value) for name, value in step_losses.items()}, **model_losses}
            sps = int(global_step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  "
                    f"return({RETURN_WINDOW}) {mean_recent:7.1f}  "
                    f"k {length}  alpha {losses['alpha']:.3f}  SPS {sps:6,d}",
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
        with open(os.path.join(run_dir, "dynamics.msgpack"), "wb") as f:
            f.write(flax.serialization.to_bytes({"model": model_params, "norm": norm}))
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
