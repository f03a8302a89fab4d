"""Model-based policy optimisation (MBPO): SAC on real data plus short model rollouts -- the PyTorch twin.

SAC trained mostly on short branched rollouts of a probabilistic dynamics ensemble, started from real
states; the ensemble is refit on the real replay buffer every few hundred steps.
Paper:  Janner, Fu, Zhang and Levine 2019, "When to Trust Your Model: Model-Based Policy
        Optimization", arXiv:1906.08253 (the SAC inside: Haarnoja et al. 2018, arXiv:1801.01290
        and arXiv:1812.05905; the probabilistic ensemble: Chua et al. 2018, arXiv:1805.12114).
Twin:   algos/mbpo_jax.py (`diff algos/mbpo_torch.py algos/mbpo_jax.py` shows only the framework).
Docs:   docs/algorithms/mbpo.md
Run:    python algos/mbpo_torch.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter


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
    return (2.0 * (np.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def sample_squashed(mean, log_std, noise, action_scale, action_bias):
    """Reparameterised sample of a = scale * tanh(u) + bias, u = mean + std * noise, and its
    log-density by the change of variables (summed over the action axis):

        log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2) - sum_i log(scale_i).
    """
    std = log_std.exp()
    u = mean + std * noise
    gaussian_logp = (-0.5 * noise**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)
    log_prob = gaussian_logp - tanh_log_det_jacobian(u) - torch.log(action_scale).sum()
    return torch.tanh(u) * action_scale + action_bias, log_prob


def soft_q_target(rewards, terminated, next_q1, next_q2, next_log_prob, alpha, gamma):
    """r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log pi(a' | s')), a' ~ pi(s')."""
    soft_value = torch.min(next_q1, next_q2) - alpha * next_log_prob
    return rewards + gamma * (1.0 - terminated) * soft_value


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def sac_actor_loss(q1, q2, log_prob, alpha):
    """mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a)), a the reparameterised sample."""
    return (alpha * log_prob - torch.min(q1, q2)).mean()


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-alpha * mean(log pi + target_entropy), alpha = exp(log_alpha), log pi held fixed."""
    return -(log_alpha.exp() * (log_prob + target_entropy).detach()).mean()


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
    mean, std = x.mean(0), x.std(0, correction=0)
    return mean, torch.where(std < 1e-6, torch.ones_like(std), std)


def bound_log_var(raw, max_log_var, min_log_var):
    """Soft bounds of the predicted log-variance (Chua et al. 2018, appendix A.1): smooth, so the
    gradient never dies, and below max_log_var / above min_log_var; both bounds are learned.

        lv = max - softplus(max - raw);  lv = min + softplus(lv - min)
    """
    log_var = max_log_var - F.softplus(max_log_var - raw)
    return min_log_var + F.softplus(log_var - min_log_var)


def gaussian_nll(mean, log_var, target):
    """Negative log-likelihood of target under N(mean, exp(log_var)) per element, without the
    constant 0.5 log(2 pi), averaged over the last two axes (batch, output): one value per member.

        0.5 * ((target - mean)^2 * exp(-log_var) + log_var)
    """
    return (0.5 * ((target - mean) ** 2 * torch.exp(-log_var) + log_var)).mean((-2, -1))


def model_loss(mean, log_var, target, max_log_var, min_log_var):
    """The ensemble's training loss: the members' Gaussian NLLs summed, plus the small penalty
    0.01 * (sum max_log_var - sum min_log_var) that keeps the learned bounds tight."""
    return gaussian_nll(mean, log_var, target).sum() + 0.01 * (max_log_var.sum() - min_log_var.sum())


def select_elites(holdout_losses, num_elites):
    """Indices of the num_elites members with the lowest held-out loss, best first."""
    return np.argsort(np.asarray(holdout_losses), kind="stable")[:num_elites]


def no_termination(obs, actions, next_obs):
    """Pendulum never terminates (only the 200-step time limit truncates): all False."""
    return torch.zeros(obs.shape[0], dtype=torch.bool, device=obs.device)


# The termination rule of model rollouts, per env (the model predicts s' and r, not done).
TERMINATION_FNS = {"Pendulum-v1": no_termination}


def model_rollout(model_fn, policy_fn, start_obs, members, model_noise, action_noise, termination_fn):
    """Branched rollouts from the real states start_obs (N, D), len(members) steps. At step t the
    policy acts, a = policy_fn(obs, action_noise[t]); model_fn(obs, a) gives every member's mean and
    log-variance of [s' - s, r], shape (E, N, D + 1); rollout i uses member members[t, i] and the
    sample mean + exp(log_var / 2) * model_noise[t]. A rollout stops once termination_fn says so:
    valid[t, i] is False for the steps after it. Returns the stacked transitions, leading axes (T, N)."""
    n, obs_dim = start_obs.shape
    rows = torch.arange(n, device=start_obs.device)
    obs, alive = start_obs, torch.ones(n, dtype=torch.bool, device=start_obs.device)
    out = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "valid")}
    for t in range(members.shape[0]):
        actions = policy_fn(obs, action_noise[t])
        mean, log_var = model_fn(obs, actions)
        mean, log_var = mean[members[t], rows], log_var[members[t], rows]
        sample = mean + torch.exp(0.5 * log_var) * model_noise[t]
        next_obs, rewards = obs + sample[:, :obs_dim], sample[:, obs_dim]
        terminated = termination_fn(obs, actions, next_obs)
        for k, v in zip(out, (obs, actions, rewards, next_obs, terminated.float(), alive)):
            out[k].append(v)
        alive = alive & ~terminated
        obs = next_obs
    return {k: torch.stack(v) for k, v in out.items()}


# ----------------------------------------------------------------------------- networks
def layer_init(layer):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the JAX twin does the same)."""
    nn.init.kaiming_uniform_(layer.weight, a=np.sqrt(5))
    nn.init.zeros_(layer.bias)
    return layer


class QNetwork(nn.Module):
    """Q(s, a): the concatenated observation and action through a hidden-hidden ReLU MLP."""

    def __init__(self, obs_dim, action_dim, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim + action_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, 1)),
        )

    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], -1)).squeeze(-1)


class Actor(nn.Module):
    """Squashed Gaussian policy: a ReLU trunk, then the mean and log std of u, a = scale tanh(u) + bias."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
        )
        self.mean = layer_init(nn.Linear(hidden_size, action_dim))
        self.log_std = layer_init(nn.Linear(hidden_size, action_dim))
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))

    def forward(self, obs):
        h = self.trunk(obs)
        log_std = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(h), log_std

    def sample(self, obs, noise=None):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self(obs)
        noise = torch.randn_like(mean) if noise is None else noise
        return sample_squashed(mean, log_std, noise, self.action_scale, self.action_bias)

    def deterministic(self, obs):
        """The evaluation action: tanh of the mean, scaled into the bounds."""
        return torch.tanh(self(obs)[0]) * self.action_scale + self.action_bias


class EnsembleLinear(nn.Module):
    """E independent dense layers applied at once: x (E, N, in) -> (E, N, out), one batched matmul."""

    def __init__(self, ensemble_size, in_features, out_features):
        super().__init__()
        bound = 1.0 / np.sqrt(in_features)  # torch's default Linear init, per member
        self.weight = nn.Parameter(
            torch.empty(ensemble_size, in_features, out_features).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, out_features))

    def forward(self, x):
        return torch.baddbmm(self.bias, x, self.weight)


class DynamicsEnsemble(nn.Module):
    """E probabilistic networks p(s' - s, r | s, a) = N(mean, diag(exp(log_var))): normalised inputs,
    SiLU hidden layers, a head of 2 (D + 1) outputs split into the mean and the raw log-variance,
    then the soft bounds of bound_log_var (max/min log-variance learned, shared by the members)."""

    def __init__(self, ensemble_size, in_dim, out_dim, hidden_size, layers):
        super().__init__()
        sizes = [in_dim] + [hidden_size] * layers
        self.hidden = nn.ModuleList(
            EnsembleLinear(ensemble_size, a, b) for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.head = EnsembleLinear(ensemble_size, hidden_size, 2 * out_dim)
        self.max_log_var = nn.Parameter(torch.full((out_dim,), 0.5))
        self.min_log_var = nn.Parameter(torch.full((out_dim,), -10.0))
        self.register_buffer("input_mean", torch.zeros(in_dim))
        self.register_buffer("input_std", torch.ones(in_dim))
        self.ensemble_size, self.out_dim = ensemble_size, out_dim

    def forward(self, x):
        """x: (N, in) shared by every member, or (E, N, in) one batch per member -> (E, N, out) twice."""
        x = (x - self.input_mean) / self.input_std
        if x.dim() == 2:
            x = x.expand(self.ensemble_size, *x.shape)
        for layer in self.hidden:
            x = F.silu(layer(x))
        mean, raw = self.head(x).split(self.out_dim, -1)
        return mean, bound_log_var(raw, self.max_log_var, self.min_log_var)


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
            f"For discrete actions use algos/dqn_torch.py or algos/ppo_torch.py"
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
    actor = Actor(
        int(np.prod(env.observation_space.shape)),
        int(np.prod(space.shape)),
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    actor.load_state_dict(torch.load(model_path, map_location="cpu")["actor"])
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = actor.deterministic(torch.as_tensor(obs, dtype=torch.float32)).numpy()
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

    # Seeding: python, numpy, torch and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(min(2, torch.get_num_threads()))  # see algos/sac_torch.py
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args.env_id, 1)
    envs.action_space.seed(args.seed)
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(space.shape))
    actor = Actor(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    qf1, qf2 = (
        QNetwork(obs_dim, action_dim, args.hidden_size),
        QNetwork(obs_dim, action_dim, args.hidden_size),
    )
    qf1_target, qf2_target = (
        QNetwork(obs_dim, action_dim, args.hidden_size),
        QNetwork(obs_dim, action_dim, args.hidden_size),
    )
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    for net in (actor, qf1, qf2, qf1_target, qf2_target):
        net.to(device)
    q_params = list(qf1.parameters()) + list(qf2.parameters())
    target_params = list(qf1_target.parameters()) + list(qf2_target.parameters())
    q_optimizer = torch.optim.Adam(q_params, lr=args.q_lr)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr)
    target_entropy = -float(action_dim)
    log_alpha = torch.tensor(
        np.log(args.alpha), dtype=torch.float32, device=device, requires_grad=args.autotune
    )
    alpha_optimizer = torch.optim.Adam([log_alpha], lr=args.alpha_lr)
    model = DynamicsEnsemble(
        args.ensemble_size, obs_dim + action_dim, obs_dim + 1, args.model_hidden_size, args.model_layers
    ).to(device)
    model_optimizer = torch.optim.Adam(model.parameters(), lr=args.model_lr)
    termination_fn = TERMINATION_FNS[args.env_id]
    elites = np.arange(args.num_elites)

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

    def train_model(n):
        """Refit the ensemble on the first n real transitions; return (train NLL, held-out MSE per member)."""
        perm = np.random.permutation(n)
        n_holdout = max(1, int(n * args.holdout_ratio))
        train_idx, holdout_idx = perm[n_holdout:], perm[:n_holdout]
        inputs = torch.as_tensor(np.concatenate([obs_buf[:n], actions_buf[:n]], -1), device=device)
        targets = torch.as_tensor(
            np.concatenate([next_obs_buf[:n] - obs_buf[:n], rewards_buf[:n, None]], -1), device=device
        )
        model.input_mean, model.input_std = fit_normaliser(inputs[train_idx])
        for _ in range(args.model_train_steps):
            idx = torch.as_tensor(
                train_idx[np.random.randint(0, len(train_idx), (args.ensemble_size, args.model_batch_size))],
                device=device,
            )
            mean, log_var = model(inputs[idx])
            loss = model_loss(mean, log_var, targets[idx], model.max_log_var, model.min_log_var)
            model_optimizer.zero_grad()
            loss.backward()
            model_optimizer.step()
        with torch.no_grad():
            mean, _ = model(inputs[holdout_idx])
            holdout_mse = ((mean - targets[holdout_idx]) ** 2).mean((-2, -1)).cpu().numpy()
        return loss.item(), holdout_mse

    def policy_fn(obs, noise):
        return actor.sample(obs, noise)[0]

    def model_fn(obs, actions):
        return model(torch.cat([obs, actions], -1))

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
            with torch.no_grad():
                actions = (
                    actor.sample(torch.as_tensor(obs, dtype=torch.float32, device=device))[0].cpu().numpy()
                )
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
            members = elites[np.random.randint(0, args.num_elites, size=(length, args.rollout_batch_size))]
            with torch.no_grad():
                rollout = model_rollout(
                    model_fn,
                    policy_fn,
                    torch.as_tensor(obs_buf[start], device=device),
                    torch.as_tensor(members, device=device),
                    torch.randn(length, args.rollout_batch_size, obs_dim + 1, device=device),
                    torch.randn(length, args.rollout_batch_size, action_dim, device=device),
                    termination_fn,
                )
            valid = rollout.pop("valid").cpu().numpy().reshape(-1)
            for k, v in rollout.items():
                v = v.cpu().numpy().reshape(length * args.rollout_batch_size, *v.shape[2:])[valid]
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
        for _ in range(args.updates_per_step):
            idx_r = np.random.randint(0, global_step, size=n_real)
            idx_m = np.random.randint(0, model_count, size=n_model)
            b_obs = torch.as_tensor(np.concatenate([obs_buf[idx_r], model_buf["obs"][idx_m]]), device=device)
            b_next_obs = torch.as_tensor(
                np.concatenate([next_obs_buf[idx_r], model_buf["next_obs"][idx_m]]), device=device
            )
            b_actions = torch.as_tensor(
                np.concatenate([actions_buf[idx_r], model_buf["actions"][idx_m]]), device=device
            )
            b_rewards = torch.as_tensor(
                np.concatenate([rewards_buf[idx_r], model_buf["rewards"][idx_m]]), device=device
            )
            b_terminated = torch.as_tensor(
                np.concatenate([terminated_buf[idx_r], model_buf["terminated"][idx_m]]), device=device
            )
            alpha = log_alpha.detach().exp()

            with torch.no_grad():
                next_actions, next_log_prob = actor.sample(b_next_obs)
                target = soft_q_target(
                    b_rewards,
                    b_terminated,
                    qf1_target(b_next_obs, next_actions),
                    qf2_target(b_next_obs, next_actions),
                    next_log_prob,
                    alpha,
                    args.gamma,
                )
            q1, q2 = qf1(b_obs, b_actions), qf2(b_obs, b_actions)
            qf1_loss, qf2_loss = critic_losses(q1, q2, target)
            q_optimizer.zero_grad()
            (qf1_loss + qf2_loss).backward()
            q_optimizer.step()

            actions_pi, log_prob = actor.sample(b_obs)
            actor_loss = sac_actor_loss(qf1(b_obs, actions_pi), qf2(b_obs, actions_pi), log_prob, alpha)
            actor_optimizer.zero_grad()
            actor_loss.backward(inputs=list(actor.parameters()))
            actor_optimizer.step()

            alpha_loss = temperature_loss(log_alpha, log_prob, target_entropy)
            if args.autotune:
                alpha_optimizer.zero_grad()
                alpha_loss.backward()
                alpha_optimizer.step()

            with torch.no_grad():
                torch._foreach_lerp_(target_params, q_params, args.tau)  # target += tau * (online - target)

        # losses and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            losses = {
                "qf1_loss": qf1_loss.item(),
                "qf2_loss": qf2_loss.item(),
                "qf1_values": q1.mean().item(),
                "qf2_values": q2.mean().item(),
                "actor_loss": actor_loss.item(),
                "alpha": alpha.item(),
                "alpha_loss": alpha_loss.item(),
                **model_losses,
            }
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
        "alpha": float(log_alpha.exp().item()),
        "sps": args.total_timesteps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_timesteps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(
            {
                "actor": actor.state_dict(),
                "qf1": qf1.state_dict(),
                "qf2": qf2.state_dict(),
                "dynamics": model.state_dict(),
            },
            model_path,
        )
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
