"""Dreamer: an actor and a critic trained in the imagination of a learned world model -- the PyTorch twin.

An RSSM world model (GRU state h, Gaussian state z, decoder and reward heads) is fit to replayed sequences;
a tanh-Gaussian actor maximises imagined lambda-returns by backpropagating through the learned dynamics.
Paper:  Hafner, Lillicrap, Ba and Norouzi 2020, "Dream to Control: Learning Behaviors by Latent Imagination",
        arXiv:1912.01603; KL balancing, the slow critic and the discount weights from Hafner, Lillicrap,
        Norouzi and Ba 2021, "Mastering Atari with Discrete World Models", arXiv:2010.02193; the RSSM from
        Hafner et al. 2019, "Learning Latent Dynamics for Planning from Pixels", arXiv:1811.04551.
Twin:   algos/dreamer_jax.py (`diff algos/dreamer_torch.py algos/dreamer_jax.py` shows only the framework).
Docs:   docs/algorithms/dreamer.md
Run:    python algos/dreamer_torch.py --seed 1
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
    """seed of python, numpy, the framework and the environment"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "Pendulum-v1"
    """gymnasium id: vector observations, Box actions with finite bounds, listed in NEVER_TERMINATES"""
    total_timesteps: int = 6_000
    """total environment steps"""
    seed_episodes: int = 5
    """episodes of uniformly random actions before the first update"""
    train_every: int = 20
    """environment steps between two rounds of updates"""
    train_steps: int = 5
    """gradient updates (world model, actor, critic) per round (paper: 100 per 1,000 steps)"""
    batch_size: int = 16
    """sequences per update (paper: 50)"""
    seq_len: int = 50
    """steps per sequence (cut from one stored episode)"""
    horizon: int = 15
    """imagination horizon H of the actor and critic"""
    gamma: float = 0.99
    """discount factor of the imagined returns"""
    return_lambda: float = 0.95
    """lambda of the lambda-returns (0: one-step TD targets, 1: rewards to the horizon plus the bootstrap)"""
    kl_balance: float = 0.8
    """alpha: the prior's share of the KL gradient, the posterior's is 1 - alpha (DreamerV2's)"""
    free_nats: float = 1.0
    """floor of the KL loss in nats: no KL pressure below it (paper: 3; DreamerV2 on DMC: 1)"""
    kl_scale: float = 1.0
    """weight of the KL loss against reconstruction and reward"""
    entropy_coef: float = 1e-4
    """weight of the actor's entropy bonus (DreamerV2's; the paper adds action noise 0.3 instead)"""
    deter_size: int = 64
    """size of the deterministic GRU state h (paper: 200)"""
    stoch_size: int = 8
    """size of the stochastic Gaussian state z (paper: 30)"""
    hidden_size: int = 64
    """width of the hidden layers of every network (the paper's code: 400)"""
    model_lr: float = 1e-3
    """Adam learning rate of the world model (paper: 6e-4)"""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor (paper: 8e-5)"""
    critic_lr: float = 3e-4
    """Adam learning rate of the critic (paper: 8e-5)"""
    grad_clip: float = 100.0
    """maximal global gradient norm of each of the three optimisers"""
    critic_tau: float = 0.02
    """Polyak coefficient of the slow critic that gives the lambda-return targets (1: no slow critic)"""
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
    total_timesteps=500,
    seed_episodes=2,
    train_every=50,
    train_steps=2,
    batch_size=4,
    seq_len=10,
    horizon=3,
    deter_size=16,
    stoch_size=4,
    hidden_size=16,
    save_model=True,
    eval_episodes=1,
)

MIN_STD = 0.1  # lower bound of the RSSM's Gaussian standard deviations
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the actor's log std range
RETURN_WINDOW = 5  # final_mean_return: mean of the last 5 episodes (1,000 steps on Pendulum)
NEVER_TERMINATES = ("Pendulum-v1",)  # no continuation head: imagined episodes never end


# ----------------------------------------------------------------------------- pure math: the world model
def gaussian_stats(raw, min_std):
    """Split a head's output into the mean and the standard deviation softplus(raw_std) + min_std."""
    mean, raw_std = raw.chunk(2, -1)
    return mean, F.softplus(raw_std) + min_std


def gru_update(parts, h):
    """The GRU of DreamerV2 (one linear layer on [x, h] gives `parts`, 3 * deter wide):

        r = sigmoid(reset);  c = tanh(r * cand);  u = sigmoid(update - 1);  h' = u * c + (1 - u) * h
    (the -1 starts the update gate mostly closed, so h is carried over at first)."""
    reset, cand, update = parts.chunk(3, -1)
    reset = torch.sigmoid(reset)
    cand = torch.tanh(reset * cand)
    update = torch.sigmoid(update - 1.0)
    return update * cand + (1.0 - update) * h


def gaussian_kl(mean1, std1, mean2, std2):
    """KL(N(mean1, std1^2) || N(mean2, std2^2)) of diagonal Gaussians in closed form, summed over the
    last axis:

    log(std2 / std1) + (std1^2 + (mean1 - mean2)^2) / (2 std2^2) - 1/2  per dimension."""
    kl = torch.log(std2 / std1) + (std1**2 + (mean1 - mean2) ** 2) / (2.0 * std2**2) - 0.5
    return kl.sum(-1)


def kl_balance_loss(post_mean, post_std, prior_mean, prior_std, alpha, free_nats):
    """KL balancing (DreamerV2) with free nats: the same KL(post || prior) twice, each half with a
    stop-gradient on one side, averaged over the batch and clipped from below at free_nats:

        loss = alpha * max(mean KL(sg(post) || prior), free)
             + (1 - alpha) * max(mean KL(post || sg(prior)), free)

    The value is max(mean KL, free); the prior gets alpha of the gradient (it learns to predict the
    posterior) and the posterior 1 - alpha (it is regularised towards the prior). Returns (loss, mean KL)."""
    kl_prior = gaussian_kl(post_mean.detach(), post_std.detach(), prior_mean, prior_std).mean()
    kl_post = gaussian_kl(post_mean, post_std, prior_mean.detach(), prior_std.detach()).mean()
    loss = alpha * torch.clamp(kl_prior, min=free_nats) + (1.0 - alpha) * torch.clamp(kl_post, min=free_nats)
    return loss, kl_post.detach()


def world_model_loss(obs_pred, obs, reward_pred, rewards, reward_mask, kl_loss, kl_scale):
    """Reconstruction (unit-variance Gaussian NLL without its constant, summed over the observation)
    + reward (the same, on the steps that have a reward: not the first of an episode) + the weighted KL.
    Returns (total, reconstruction, reward)."""
    recon = 0.5 * ((obs_pred - obs) ** 2).sum(-1).mean()
    reward = (0.5 * (reward_pred - rewards) ** 2 * reward_mask).sum() / reward_mask.sum().clamp(min=1.0)
    return recon + reward + kl_scale * kl_loss, recon, reward


# ----------------------------------------------------------------------------- pure math: behaviour
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


def lambda_returns(rewards, values, discounts, bootstrap, lambda_):
    """TD(lambda) returns of an imagined trajectory, by the backward recursion

        G_t = r_t + d_t * ((1 - lambda) * v_t + lambda * G_{t+1}),   G_H = bootstrap,

    where r_t is the reward of step t -> t+1, v_t = V(s_{t+1}) the value of the state it reaches and
    d_t its discount; rewards, values, discounts: (H, B), bootstrap: (B). Returns G_0..G_{H-1}, (H, B)."""
    returns, last = [], bootstrap
    for t in reversed(range(rewards.shape[0])):
        last = rewards[t] + discounts[t] * ((1.0 - lambda_) * values[t] + lambda_ * last)
        returns.append(last)
    return torch.stack(returns[::-1])


def discount_weights(discounts):
    """Weight of imagined step t in the actor and critic losses (DreamerV2): the product of the
    discounts before it, 1, d_0, d_0 d_1, ...; discounts (H, B) -> weights (H, B)."""
    ones = torch.ones_like(discounts[:1])
    return torch.cumprod(torch.cat([ones, discounts[:-1]], 0), 0)


def actor_loss_fn(returns, log_probs, weights, entropy_coef):
    """Dynamics backprop: -mean(w_t * (G_t - eta * log pi(a_t | s_t))); the gradient of G_t flows back
    through the imagined rewards, values and states into the actions (the sampled -log pi is the
    entropy estimate)."""
    return -(weights * (returns - entropy_coef * log_probs)).mean()


def critic_loss_fn(values, targets, weights):
    """0.5 * mean(w_t * (V(s_t) - G_t)^2), the targets G_t (lambda-returns) held fixed."""
    return 0.5 * (weights * (values - targets.detach()) ** 2).mean()


def imagine(img_step, policy, h, z, noise, action_noise):
    """Roll the latent dynamics forward len(noise) steps from the start states (h, z), (N, .):
    a_t, log pi_t = policy(feat_t, action_noise[t]); (h, z) <- img_step(h, z, a_t, noise[t]) (a prior
    sample). Returns the features of s_0..s_H, (H + 1, N, deter + stoch), and the log-probs, (H, N)."""
    feats, log_probs = [torch.cat([h, z], -1)], []
    for t in range(noise.shape[0]):
        action, log_prob = policy(feats[-1], action_noise[t])
        h, z = img_step(h, z, action, noise[t])
        feats.append(torch.cat([h, z], -1))
        log_probs.append(log_prob)
    return torch.stack(feats), torch.stack(log_probs)


# ----------------------------------------------------------------------------- networks
def layer_init(layer):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the JAX twin does the same)."""
    nn.init.kaiming_uniform_(layer.weight, a=np.sqrt(5))
    nn.init.zeros_(layer.bias)
    return layer


def mlp(in_dim, hidden_size, out_dim):
    """Two ELU hidden layers, a linear output."""
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden_size)),
        nn.ELU(),
        layer_init(nn.Linear(hidden_size, hidden_size)),
        nn.ELU(),
        layer_init(nn.Linear(hidden_size, out_dim)),
    )


class WorldModel(nn.Module):
    """The RSSM with its heads. Encoder e(o); image step: x = elu(W [z, a]), h' = GRU(x, h),
    prior p(z' | h') = N(mean, std) from an ELU layer on h'; observe step: the posterior
    q(z | h, e(o)) from an ELU layer on [h, e(o)]; decoder o(h, z) and reward r(h, z)."""

    def __init__(self, obs_dim, action_dim, deter_size, stoch_size, hidden_size):
        super().__init__()
        self.encoder = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ELU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ELU(),
        )
        self.img_in = layer_init(nn.Linear(stoch_size + action_dim, hidden_size))
        self.gru = layer_init(nn.Linear(hidden_size + deter_size, 3 * deter_size))
        self.prior_hidden = layer_init(nn.Linear(deter_size, hidden_size))
        self.prior_out = layer_init(nn.Linear(hidden_size, 2 * stoch_size))
        self.post_hidden = layer_init(nn.Linear(deter_size + hidden_size, hidden_size))
        self.post_out = layer_init(nn.Linear(hidden_size, 2 * stoch_size))
        self.decoder = mlp(deter_size + stoch_size, hidden_size, obs_dim)
        self.reward = mlp(deter_size + stoch_size, hidden_size, 1)
        self.deter_size, self.stoch_size = deter_size, stoch_size

    def img_step(self, h, z, action):
        """(h', prior mean, prior std) of one step of the latent dynamics."""
        x = F.elu(self.img_in(torch.cat([z, action], -1)))
        h = gru_update(self.gru(torch.cat([x, h], -1)), h)
        mean, std = gaussian_stats(self.prior_out(F.elu(self.prior_hidden(h))), MIN_STD)
        return h, mean, std

    def obs_step(self, h, z, action, embed):
        """(h', prior mean, prior std, posterior mean, posterior std), given the next observation's
        embedding."""
        h, prior_mean, prior_std = self.img_step(h, z, action)
        post_mean, post_std = gaussian_stats(
            self.post_out(F.elu(self.post_hidden(torch.cat([h, embed], -1)))), MIN_STD
        )
        return h, prior_mean, prior_std, post_mean, post_std

    def imagine_step(self, h, z, action, noise):
        """One imagined step: h' and a sample of the prior z' = mean + std * noise."""
        h, mean, std = self.img_step(h, z, action)
        return h, mean + std * noise


class Actor(nn.Module):
    """Tanh-Gaussian policy on the model state (h, z): an ELU trunk, the mean and log std of u,
    a = scale tanh(u) + bias."""

    def __init__(self, feat_dim, action_dim, hidden_size, action_scale, action_bias):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Linear(feat_dim, hidden_size)),
            nn.ELU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ELU(),
        )
        self.mean = layer_init(nn.Linear(hidden_size, action_dim))
        self.log_std = layer_init(nn.Linear(hidden_size, action_dim))
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))

    def forward(self, feat):
        x = self.trunk(feat)
        log_std = torch.tanh(self.log_std(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(x), log_std

    def sample(self, feat, noise):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self(feat)
        return sample_squashed(mean, log_std, noise, self.action_scale, self.action_bias)

    def deterministic(self, feat):
        """The evaluation action: tanh of the mean, scaled into the bounds."""
        return torch.tanh(self(feat)[0]) * self.action_scale + self.action_bias


def observe(model, obs, prev_actions, noise):
    """Filter a batch of sequences from the zero state: obs (B, L, D), prev_actions (B, L, A) (the
    action before each observation), noise (L, B, stoch). Returns the states h, z and the prior and
    posterior statistics, each (L, B, .), z sampled from the posterior."""
    batch = obs.shape[0]
    h = obs.new_zeros(batch, model.deter_size)
    z = obs.new_zeros(batch, model.stoch_size)
    embed = model.encoder(obs)
    out = {k: [] for k in ("h", "z", "prior_mean", "prior_std", "post_mean", "post_std")}
    for t in range(obs.shape[1]):
        h, prior_mean, prior_std, post_mean, post_std = model.obs_step(h, z, prev_actions[:, t], embed[:, t])
        z = post_mean + post_std * noise[t]
        for k, v in zip(out, (h, z, prior_mean, prior_std, post_mean, post_std)):
            out[k].append(v)
    return {k: torch.stack(v) for k, v in out.items()}


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("seed_episodes", args.seed_episodes >= 1, ">= 1"),
        ("train_every", args.train_every >= 1, ">= 1"),
        ("train_steps", args.train_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("seq_len", args.seq_len >= 1, ">= 1"),
        ("horizon", args.horizon >= 1, ">= 1"),
        ("gamma", 0 < args.gamma <= 1, "in (0, 1]"),
        ("return_lambda", 0 <= args.return_lambda <= 1, "in [0, 1]"),
        ("kl_balance", 0 <= args.kl_balance <= 1, "in [0, 1]"),
        ("free_nats", args.free_nats >= 0, ">= 0"),
        ("kl_scale", args.kl_scale >= 0, ">= 0"),
        ("entropy_coef", args.entropy_coef >= 0, ">= 0"),
        ("deter_size", args.deter_size >= 1, ">= 1"),
        ("stoch_size", args.stoch_size >= 1, ">= 1"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("model_lr", args.model_lr > 0, "> 0"),
        ("actor_lr", args.actor_lr > 0, "> 0"),
        ("critic_lr", args.critic_lr > 0, "> 0"),
        ("grad_clip", args.grad_clip > 0, "> 0"),
        ("critic_tau", 0 < args.critic_tau <= 1, "in (0, 1]"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.env_id not in NEVER_TERMINATES:
        raise ValueError(
            f"--env-id {args.env_id} is not in NEVER_TERMINATES: this script learns no continuation head, "
            f"so it only runs environments whose episodes end by the time limit alone"
        )
    env = gym.make(args.env_id)  # env construction only: no step taken
    space, obs_space, limit = env.action_space, env.observation_space, env.spec.max_episode_steps
    env.close()
    if not isinstance(space, gym.spaces.Box) or not (
        np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
    ):
        raise ValueError(f"--env-id {args.env_id} needs Box actions with finite bounds (the tanh squashing)")
    if len(obs_space.shape) != 1:
        raise ValueError(
            f"--env-id {args.env_id} has observations of shape {obs_space.shape}; this script is for vectors"
        )
    if args.seq_len > limit + 1:
        raise ValueError(
            f"--seq-len must be <= {limit + 1}, the observations of one {limit}-step episode "
            f"(got {args.seq_len})"
        )
    if args.total_timesteps <= args.seed_episodes * limit:
        raise ValueError(
            f"--total-timesteps must be > --seed-episodes x {limit} = {args.seed_episodes * limit} random "
            f"steps, or no update happens (got {args.total_timesteps})"
        )


def evaluate(model_path, env_id, eval_episodes, seed, deter_size, stoch_size, hidden_size):
    """Load the saved parameters into fresh networks; filter each episode with the posterior mean and
    act with the deterministic policy (tanh of the mean)."""
    env = gym.make(env_id)
    space = env.action_space
    obs_dim, action_dim = int(np.prod(env.observation_space.shape)), int(np.prod(space.shape))
    model = WorldModel(obs_dim, action_dim, deter_size, stoch_size, hidden_size)
    actor = Actor(
        deter_size + stoch_size,
        action_dim,
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    saved = torch.load(model_path, map_location="cpu")
    model.load_state_dict(saved["world_model"])
    actor.load_state_dict(saved["actor"])
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        h, z, action = torch.zeros(1, deter_size), torch.zeros(1, stoch_size), torch.zeros(1, action_dim)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                embed = model.encoder(torch.as_tensor(obs, dtype=torch.float32)[None])
                h, _, _, z, _ = model.obs_step(h, z, action, embed)
                action = actor.deterministic(torch.cat([h, z], -1))
            obs, reward, terminated, truncated, _ = env.step(action[0].numpy())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environment, networks, optimisers
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # seeding: python, numpy, torch and the environment
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small networks: a second thread costs more than it saves
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    space = env.action_space
    obs_dim, action_dim = int(np.prod(env.observation_space.shape)), int(np.prod(space.shape))
    feat_dim = args.deter_size + args.stoch_size
    model = WorldModel(obs_dim, action_dim, args.deter_size, args.stoch_size, args.hidden_size)
    actor = Actor(
        feat_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    critic, critic_target = mlp(feat_dim, args.hidden_size, 1), mlp(feat_dim, args.hidden_size, 1)
    critic_target.load_state_dict(critic.state_dict())
    critic_target.requires_grad_(False)
    for net in (model, actor, critic, critic_target):
        net.to(device)
    model_optimizer = torch.optim.Adam(model.parameters(), lr=args.model_lr)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.actor_lr)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=args.critic_lr)
    critic_params, target_params = list(critic.parameters()), list(critic_target.parameters())

    # ---- 2. Replay: whole episodes, cut into sequence batches
    # Aligned per observation: obs[t], the action before it (zero at t = 0) and the reward of that
    # action (none at t = 0: reward_mask 0). Stored on the host; each sampled batch moves to the device.
    episodes = []

    def sample_batch():
        """batch_size windows of seq_len steps, each from a random stored episode at a random start."""
        rows = [episodes[i] for i in np.random.randint(0, len(episodes), size=args.batch_size)]
        starts = [np.random.randint(0, len(ep["obs"]) - args.seq_len + 1) for ep in rows]
        return {
            k: torch.as_tensor(
                np.stack([ep[k][s : s + args.seq_len] for ep, s in zip(rows, starts)]), device=device
            )
            for k in ("obs", "prev_actions", "rewards", "reward_mask")
        }

    # ---- 3. Update: the world model, then the actor and the critic in imagination
    def update(batch):
        """One step of the world model, then of the actor and the critic in imagination from its
        posterior states."""
        # the world model: reconstruction + reward + balanced KL with free nats
        states = observe(
            model,
            batch["obs"],
            batch["prev_actions"],
            torch.randn(args.seq_len, args.batch_size, args.stoch_size, device=device),
        )
        feat = torch.cat([states["h"], states["z"]], -1).transpose(0, 1)  # (B, L, feat)
        kl_loss, kl = kl_balance_loss(
            states["post_mean"],
            states["post_std"],
            states["prior_mean"],
            states["prior_std"],
            args.kl_balance,
            args.free_nats,
        )
        model_loss, recon_loss, reward_loss = world_model_loss(
            model.decoder(feat),
            batch["obs"],
            model.reward(feat).squeeze(-1),
            batch["rewards"],
            batch["reward_mask"],
            kl_loss,
            args.kl_scale,
        )
        model_optimizer.zero_grad()
        model_loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        model_optimizer.step()

        # imagination from every posterior state of the batch (held fixed), with the updated model
        n = args.batch_size * args.seq_len
        h0 = states["h"].detach().reshape(n, -1)
        z0 = states["z"].detach().reshape(n, -1)
        feats, log_probs = imagine(
            model.imagine_step,
            actor.sample,
            h0,
            z0,
            torch.randn(args.horizon, n, args.stoch_size, device=device),
            torch.randn(args.horizon, n, action_dim, device=device),
        )
        rewards = model.reward(feats[1:]).squeeze(-1)
        values = critic_target(feats[1:]).squeeze(-1)
        discounts = torch.full_like(rewards, args.gamma)  # NEVER_TERMINATES: no continuation head
        returns = lambda_returns(rewards, values, discounts, values[-1], args.return_lambda)
        weights = discount_weights(discounts).detach()

        # the actor: maximise the lambda-returns by backpropagating through the imagined dynamics
        actor_loss = actor_loss_fn(returns, log_probs, weights, args.entropy_coef)
        actor_optimizer.zero_grad()
        actor_loss.backward(inputs=list(actor.parameters()))  # the world model is not changed by the actor
        nn.utils.clip_grad_norm_(actor.parameters(), args.grad_clip)
        actor_optimizer.step()

        # the critic: regress the lambda-returns on the imagined states s_0..s_{H-1}
        critic_loss = critic_loss_fn(critic(feats[:-1].detach()).squeeze(-1), returns, weights)
        critic_optimizer.zero_grad()
        critic_loss.backward()
        nn.utils.clip_grad_norm_(critic.parameters(), args.grad_clip)
        critic_optimizer.step()
        with torch.no_grad():  # the slow critic: slow += tau * (online - slow)
            torch._foreach_lerp_(target_params, critic_params, args.critic_tau)
        return {
            "model_loss": model_loss.item(),
            "recon_loss": recon_loss.item(),
            "reward_loss": reward_loss.item(),
            "kl": kl.item(),
            "actor_loss": actor_loss.item(),
            "critic_loss": critic_loss.item(),
            "imagined_return": returns[0].mean().item(),
            "entropy": -log_probs.mean().item(),
        }

    # the first episode: its first observation, and the filter's zero state
    learning_starts = args.seed_episodes * env.spec.max_episode_steps
    episode_returns, recent, losses, last_print = [], [], {}, 0.0
    start_time = time.time()
    obs, _ = env.reset(seed=args.seed)
    ep = {"obs": [obs], "prev_actions": [np.zeros(action_dim)], "rewards": [0.0], "reward_mask": [0.0]}
    h, z, action = (
        torch.zeros(1, args.deter_size, device=device),
        torch.zeros(1, args.stoch_size, device=device),
        torch.zeros(1, action_dim, device=device),
    )

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 4. Act: random for the seed episodes, then a sample of the policy on the filtered state
        with torch.no_grad():
            embed = model.encoder(torch.as_tensor(obs, dtype=torch.float32, device=device)[None])
            h, _, _, post_mean, post_std = model.obs_step(h, z, action, embed)
            z = post_mean + post_std * torch.randn_like(post_std)
            if global_step <= learning_starts:
                action = torch.as_tensor(space.sample(), dtype=torch.float32, device=device)[None]
            else:
                action = actor.sample(torch.cat([h, z], -1), torch.randn(1, action_dim, device=device))[0]
        obs, reward, terminated, truncated, _ = env.step(action[0].cpu().numpy())
        for k, v in zip(ep, (obs, action[0].cpu().numpy(), reward, 1.0)):
            ep[k].append(v)

        # ---- 5. Store: a finished episode goes into the replay whole; the filter restarts from zero
        if terminated or truncated:
            episodes.append({k: np.asarray(v, dtype=np.float32) for k, v in ep.items()})
            episode_returns.append((global_step, float(np.sum(ep["rewards"]))))
            recent = [r for _, r in episode_returns[-RETURN_WINDOW:]]
            writer.add_scalar("charts/episodic_return", episode_returns[-1][1], global_step)
            writer.add_scalar("charts/episodic_length", len(ep["rewards"]) - 1, global_step)
            obs, _ = env.reset()
            ep = {
                "obs": [obs],
                "prev_actions": [np.zeros(action_dim)],
                "rewards": [0.0],
                "reward_mask": [0.0],
            }
            h, z, action = (
                torch.zeros(1, args.deter_size, device=device),
                torch.zeros(1, args.stoch_size, device=device),
                torch.zeros(1, action_dim, device=device),
            )

        # ---- 6. Train: train_steps updates every train_every steps after the seed episodes
        if global_step > learning_starts and global_step % args.train_every == 0:
            for _ in range(args.train_steps):
                losses = update(sample_batch())

        # logging: TensorBoard every 200 steps, and the progress line
        if global_step % 200 == 0 or global_step == args.total_timesteps:
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
                    f"kl {losses.get('kl', float('nan')):.2f}  SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: close, save, evaluate
    env.close()
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
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(
            {"world_model": model.state_dict(), "actor": actor.state_dict(), "critic": critic.state_dict()},
            model_path,
        )
        eval_returns = evaluate(
            model_path,
            args.env_id,
            args.eval_episodes,
            args.seed + 10_000,
            args.deter_size,
            args.stoch_size,
            args.hidden_size,
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
