"""Dreamer: an actor and a critic trained in the imagination of a learned world model -- the JAX twin.

An RSSM world model (GRU state h, Gaussian state z, decoder and reward heads) is fit to replayed sequences;
a tanh-Gaussian actor maximises imagined lambda-returns by backpropagating through the learned dynamics.
Paper:  Hafner, Lillicrap, Ba and Norouzi 2020, "Dream to Control: Learning Behaviors by Latent Imagination",
        arXiv:1912.01603; KL balancing, the slow critic and the discount weights from Hafner, Lillicrap,
        Norouzi and Ba 2021, "Mastering Atari with Discrete World Models", arXiv:2010.02193; the RSSM from
        Hafner et al. 2019, "Learning Latent Dynamics for Planning from Pixels", arXiv:1811.04551.
Twin:   algos/dreamer_torch.py (`diff algos/dreamer_torch.py algos/dreamer_jax.py` shows only the framework).
Docs:   docs/algorithms/dreamer.md
Run:    python algos/dreamer_jax.py --seed 1
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
    mean, raw_std = jnp.split(raw, 2, -1)
    return mean, jax.nn.softplus(raw_std) + min_std


def gru_update(parts, h):
    """The GRU of DreamerV2 (one linear layer on [x, h] gives `parts`, 3 * deter wide):

        r = sigmoid(reset);  c = tanh(r * cand);  u = sigmoid(update - 1);  h' = u * c + (1 - u) * h
    (the -1 starts the update gate mostly closed, so h is carried over at first)."""
    reset, cand, update = jnp.split(parts, 3, -1)
    reset = jax.nn.sigmoid(reset)
    cand = jnp.tanh(reset * cand)
    update = jax.nn.sigmoid(update - 1.0)
    return update * cand + (1.0 - update) * h


def gaussian_kl(mean1, std1, mean2, std2):
    """KL(N(mean1, std1^2) || N(mean2, std2^2)) of diagonal Gaussians in closed form, summed over the
    last axis:

    log(std2 / std1) + (std1^2 + (mean1 - mean2)^2) / (2 std2^2) - 1/2  per dimension."""
    kl = jnp.log(std2 / std1) + (std1**2 + (mean1 - mean2) ** 2) / (2.0 * std2**2) - 0.5
    return kl.sum(-1)


def kl_balance_loss(post_mean, post_std, prior_mean, prior_std, alpha, free_nats):
    """KL balancing (DreamerV2) with free nats: the same KL(post || prior) twice, each half with a
    stop-gradient on one side, averaged over the batch and clipped from below at free_nats:

        loss = alpha * max(mean KL(sg(post) || prior), free)
             + (1 - alpha) * max(mean KL(post || sg(prior)), free)

    The value is max(mean KL, free); the prior gets alpha of the gradient (it learns to predict the
    posterior) and the posterior 1 - alpha (it is regularised towards the prior). Returns (loss, mean KL)."""
    sg = jax.lax.stop_gradient
    kl_prior = gaussian_kl(sg(post_mean), sg(post_std), prior_mean, prior_std).mean()
    kl_post = gaussian_kl(post_mean, post_std, sg(prior_mean), sg(prior_std)).mean()
    loss = alpha * jnp.maximum(kl_prior, free_nats) + (1.0 - alpha) * jnp.maximum(kl_post, free_nats)
    return loss, sg(kl_post)


def world_model_loss(obs_pred, obs, reward_pred, rewards, reward_mask, kl_loss, kl_scale):
    """Reconstruction (unit-variance Gaussian NLL without its constant, summed over the observation)
    + reward (the same, on the steps that have a reward: not the first of an episode) + the weighted KL.
    Returns (total, reconstruction, reward)."""
    recon = 0.5 * ((obs_pred - obs) ** 2).sum(-1).mean()
    reward = (0.5 * (reward_pred - rewards) ** 2 * reward_mask).sum() / jnp.maximum(reward_mask.sum(), 1.0)
    return recon + reward + kl_scale * kl_loss, recon, reward


# ----------------------------------------------------------------------------- pure math: behaviour
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


def lambda_returns(rewards, values, discounts, bootstrap, lambda_):
    """TD(lambda) returns of an imagined trajectory, by the backward recursion

        G_t = r_t + d_t * ((1 - lambda) * v_t + lambda * G_{t+1}),   G_H = bootstrap,

    where r_t is the reward of step t -> t+1, v_t = V(s_{t+1}) the value of the state it reaches and
    d_t its discount; rewards, values, discounts: (H, B), bootstrap: (B). Returns G_0..G_{H-1}, (H, B)."""

    def step(last, xs):
        reward, value, discount = xs
        last = reward + discount * ((1.0 - lambda_) * value + lambda_ * last)
        return last, last

    _, returns = jax.lax.scan(step, bootstrap, (rewards, values, discounts), reverse=True)
    return returns


def discount_weights(discounts):
    """Weight of imagined step t in the actor and critic losses (DreamerV2): the product of the
    discounts before it, 1, d_0, d_0 d_1, ...; discounts (H, B) -> weights (H, B)."""
    ones = jnp.ones_like(discounts[:1])
    return jnp.cumprod(jnp.concatenate([ones, discounts[:-1]], 0), 0)


def actor_loss_fn(returns, log_probs, weights, entropy_coef):
    """Dynamics backprop: -mean(w_t * (G_t - eta * log pi(a_t | s_t))); the gradient of G_t flows back
    through the imagined rewards, values and states into the actions (the sampled -log pi is the
    entropy estimate)."""
    return -(weights * (returns - entropy_coef * log_probs)).mean()


def critic_loss_fn(values, targets, weights):
    """0.5 * mean(w_t * (V(s_t) - G_t)^2), the targets G_t (lambda-returns) held fixed."""
    return 0.5 * (weights * (values - jax.lax.stop_gradient(targets)) ** 2).mean()


def imagine(img_step, policy, h, z, noise, action_noise):
    """Roll the latent dynamics forward len(noise) steps from the start states (h, z), (N, .):
    a_t, log pi_t = policy(feat_t, action_noise[t]); (h, z) <- img_step(h, z, a_t, noise[t]) (a prior
    sample). Returns the features of s_0..s_H, (H + 1, N, deter + stoch), and the log-probs, (H, N)."""

    def step(carry, xs):
        h, z = carry
        eps, action_eps = xs
        action, log_prob = policy(jnp.concatenate([h, z], -1), action_eps)
        h, z = img_step(h, z, action, eps)
        return (h, z), (jnp.concatenate([h, z], -1), log_prob)

    _, (feats, log_probs) = jax.lax.scan(step, (h, z), (noise, action_noise))
    return jnp.concatenate([jnp.concatenate([h, z], -1)[None], feats], 0), log_probs


# ----------------------------------------------------------------------------- networks
def layer_init(features):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the torch twin does the same)."""
    return nn.Dense(features, kernel_init=nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform"))


class MLP(nn.Module):
    """Two ELU hidden layers, a linear output."""

    hidden_size: int
    out_dim: int

    @nn.compact
    def __call__(self, x):
        x = nn.elu(layer_init(self.hidden_size)(x))
        x = nn.elu(layer_init(self.hidden_size)(x))
        return layer_init(self.out_dim)(x)


class WorldModel(nn.Module):
    """The RSSM with its heads. Encoder e(o); image step: x = elu(W [z, a]), h' = GRU(x, h),
    prior p(z' | h') = N(mean, std) from an ELU layer on h'; observe step: the posterior
    q(z | h, e(o)) from an ELU layer on [h, e(o)]; decoder o(h, z) and reward r(h, z)."""

    obs_dim: int
    deter_size: int
    stoch_size: int
    hidden_size: int

    def setup(self):
        self.encoder_1, self.encoder_2 = layer_init(self.hidden_size), layer_init(self.hidden_size)
        self.img_in = layer_init(self.hidden_size)
        self.gru = layer_init(3 * self.deter_size)
        self.prior_hidden = layer_init(self.hidden_size)
        self.prior_out = layer_init(2 * self.stoch_size)
        self.post_hidden = layer_init(self.hidden_size)
        self.post_out = layer_init(2 * self.stoch_size)
        self.decoder = MLP(self.hidden_size, self.obs_dim)
        self.reward = MLP(self.hidden_size, 1)

    def __call__(self, obs, h, z, action):
        """Touches every layer once (for init): a filter step, then the decoder and the reward head."""
        h, _, _, z, _ = self.obs_step(h, z, action, self.encode(obs))
        feat = jnp.concatenate([h, z], -1)
        return self.decode(feat), self.reward_head(feat)

    def encode(self, obs):
        return nn.elu(self.encoder_2(nn.elu(self.encoder_1(obs))))

    def decode(self, feat):
        return self.decoder(feat)

    def reward_head(self, feat):
        return self.reward(feat).squeeze(-1)

    def img_step(self, h, z, action):
        """(h', prior mean, prior std) of one step of the latent dynamics."""
        x = nn.elu(self.img_in(jnp.concatenate([z, action], -1)))
        h = gru_update(self.gru(jnp.concatenate([x, h], -1)), h)
        mean, std = gaussian_stats(self.prior_out(nn.elu(self.prior_hidden(h))), MIN_STD)
        return h, mean, std

    def obs_step(self, h, z, action, embed):
        """(h', prior mean, prior std, posterior mean, posterior std), given the next observation's
        embedding."""
        h, prior_mean, prior_std = self.img_step(h, z, action)
        post_mean, post_std = gaussian_stats(
            self.post_out(nn.elu(self.post_hidden(jnp.concatenate([h, embed], -1)))), MIN_STD
        )
        return h, prior_mean, prior_std, post_mean, post_std

    def imagine_step(self, h, z, action, noise):
        """One imagined step: h' and a sample of the prior z' = mean + std * noise."""
        h, mean, std = self.img_step(h, z, action)
        return h, mean + std * noise


class Actor(nn.Module):
    """Tanh-Gaussian policy on the model state (h, z): an ELU trunk, the mean and log std of u,
    a = scale tanh(u) + bias."""

    action_dim: int
    hidden_size: int

    @nn.compact
    def __call__(self, feat):
        x = nn.elu(layer_init(self.hidden_size)(feat))
        x = nn.elu(layer_init(self.hidden_size)(x))
        mean = layer_init(self.action_dim)(x)
        log_std = jnp.tanh(layer_init(self.action_dim)(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std


def make_networks(obs_dim, action_dim, deter_size, stoch_size, hidden_size, key):
    """The world model, actor and critic with their initial parameters {"world_model", "actor", "critic"}."""
    model = WorldModel(obs_dim, deter_size, stoch_size, hidden_size)
    actor, critic = Actor(action_dim, hidden_size), MLP(hidden_size, 1)
    model_key, actor_key, critic_key = jax.random.split(key, 3)
    feat = jnp.zeros((1, deter_size + stoch_size))
    params = {
        "world_model": model.init(
            model_key,
            jnp.zeros((1, obs_dim)),
            jnp.zeros((1, deter_size)),
            jnp.zeros((1, stoch_size)),
            jnp.zeros((1, action_dim)),
        ),
        "actor": actor.init(actor_key, feat),
        "critic": critic.init(critic_key, feat),
    }
    return model, actor, critic, params


def observe(model, params, obs, prev_actions, noise):
    """Filter a batch of sequences from the zero state: obs (B, L, D), prev_actions (B, L, A) (the
    action before each observation), noise (L, B, stoch). Returns the states h, z and the prior and
    posterior statistics, each (L, B, .), z sampled from the posterior."""
    batch = obs.shape[0]
    h = jnp.zeros((batch, model.deter_size))
    z = jnp.zeros((batch, model.stoch_size))
    embed = model.apply(params, obs, method=WorldModel.encode)

    def step(carry, xs):
        h, z = carry
        action, e, eps = xs
        h, prior_mean, prior_std, post_mean, post_std = model.apply(
            params, h, z, action, e, method=WorldModel.obs_step
        )
        z = post_mean + post_std * eps
        return (h, z), {
            "h": h,
            "z": z,
            "prior_mean": prior_mean,
            "prior_std": prior_std,
            "post_mean": post_mean,
            "post_std": post_std,
        }

    _, out = jax.lax.scan(step, (h, z), (prev_actions.swapaxes(0, 1), embed.swapaxes(0, 1), noise))
    return out


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
    model, actor, _, template = make_networks(
        obs_dim, action_dim, deter_size, stoch_size, hidden_size, jax.random.PRNGKey(0)
    )
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(template, f.read())
    scale, bias = jnp.asarray((space.high - space.low) / 2.0), jnp.asarray((space.high + space.low) / 2.0)

    @jax.jit
    def step(h, z, action, obs):
        embed = model.apply(params["world_model"], obs[None], method=WorldModel.encode)
        h, _, _, z, _ = model.apply(params["world_model"], h, z, action, embed, method=WorldModel.obs_step)
        return h, z, jnp.tanh(actor.apply(params["actor"], jnp.concatenate([h, z], -1))[0]) * scale + bias

    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        h, z, action = jnp.zeros((1, deter_size)), jnp.zeros((1, stoch_size)), jnp.zeros((1, action_dim))
        done, total = False, 0.0
        while not done:
            h, z, action = step(h, z, action, jnp.asarray(obs, dtype=jnp.float32))
            obs, reward, terminated, truncated, _ = env.step(np.asarray(action[0]))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environment, networks, optimisers
    # one small jitted call per environment step: run it on the calling thread (speed only; see dqn.md)
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

    # seeding: python, numpy, jax and the environment
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    space = env.action_space
    obs_dim, action_dim = int(np.prod(env.observation_space.shape)), int(np.prod(space.shape))
    key, init_key = jax.random.split(key)
    model, actor, critic, params = make_networks(
        obs_dim, action_dim, args.deter_size, args.stoch_size, args.hidden_size, init_key
    )
    action_scale = jnp.asarray((space.high - space.low) / 2.0, dtype=jnp.float32)
    action_bias = jnp.asarray((space.high + space.low) / 2.0, dtype=jnp.float32)
    model_optimizer = optax.chain(optax.clip_by_global_norm(args.grad_clip), optax.adam(args.model_lr))
    actor_optimizer = optax.chain(optax.clip_by_global_norm(args.grad_clip), optax.adam(args.actor_lr))
    critic_optimizer = optax.chain(optax.clip_by_global_norm(args.grad_clip), optax.adam(args.critic_lr))
    state = {
        "params": params,
        "critic_target": params["critic"],
        "model_opt": model_optimizer.init(params["world_model"]),
        "actor_opt": actor_optimizer.init(params["actor"]),
        "critic_opt": critic_optimizer.init(params["critic"]),
    }

    # ---- 2. Replay: whole episodes, cut into sequence batches
    # Aligned per observation: obs[t], the action before it (zero at t = 0) and the reward of that
    # action (none at t = 0: reward_mask 0). Stored on the host; each sampled batch moves to the device.
    episodes = []

    def sample_batch():
        """batch_size windows of seq_len steps, each from a random stored episode at a random start."""
        rows = [episodes[i] for i in np.random.randint(0, len(episodes), size=args.batch_size)]
        starts = [np.random.randint(0, len(ep["obs"]) - args.seq_len + 1) for ep in rows]
        return {
            k: jnp.asarray(np.stack([ep[k][s : s + args.seq_len] for ep, s in zip(rows, starts)]))
            for k in ("obs", "prev_actions", "rewards", "reward_mask")
        }

    # ---- 3. Update: the world model, then the actor and the critic in imagination
    def policy_sample(actor_params, feat, noise):
        mean, log_std = actor.apply(actor_params, feat)
        return sample_squashed(mean, log_std, noise, action_scale, action_bias)

    @jax.jit
    def update(state, batch, key):
        """One step of the world model, then of the actor and the critic in imagination from its
        posterior states."""
        obs_key, img_key, act_key = jax.random.split(key, 3)
        params = state["params"]

        # the world model: reconstruction + reward + balanced KL with free nats
        def model_loss_of(wm_params):
            states = observe(
                model,
                wm_params,
                batch["obs"],
                batch["prev_actions"],
                jax.random.normal(obs_key, (args.seq_len, args.batch_size, args.stoch_size)),
            )
            feat = jnp.concatenate([states["h"], states["z"]], -1).swapaxes(0, 1)  # (B, L, feat)
            kl_loss, kl = kl_balance_loss(
                states["post_mean"],
                states["post_std"],
                states["prior_mean"],
                states["prior_std"],
                args.kl_balance,
                args.free_nats,
            )
            model_loss, recon_loss, reward_loss = world_model_loss(
                model.apply(wm_params, feat, method=WorldModel.decode),
                batch["obs"],
                model.apply(wm_params, feat, method=WorldModel.reward_head),
                batch["rewards"],
                batch["reward_mask"],
                kl_loss,
                args.kl_scale,
            )
            return model_loss, (states, recon_loss, reward_loss, kl)

        (model_loss, (states, recon_loss, reward_loss, kl)), model_grads = jax.value_and_grad(
            model_loss_of, has_aux=True
        )(params["world_model"])
        updates, model_opt = model_optimizer.update(model_grads, state["model_opt"])
        wm_params = optax.apply_updates(params["world_model"], updates)

        # imagination from every posterior state of the batch (held fixed), with the updated model
        n = args.batch_size * args.seq_len
        h0 = jax.lax.stop_gradient(states["h"]).reshape(n, -1)
        z0 = jax.lax.stop_gradient(states["z"]).reshape(n, -1)
        img_noise = jax.random.normal(img_key, (args.horizon, n, args.stoch_size))
        act_noise = jax.random.normal(act_key, (args.horizon, n, action_dim))

        def img_step(h, z, action, noise):
            return model.apply(wm_params, h, z, action, noise, method=WorldModel.imagine_step)

        # the actor: maximise the lambda-returns by backpropagating through the imagined dynamics
        def actor_loss_of(actor_params):
            feats, log_probs = imagine(
                img_step,
                lambda feat, noise: policy_sample(actor_params, feat, noise),
                h0,
                z0,
                img_noise,
                act_noise,
            )
            rewards = model.apply(wm_params, feats[1:], method=WorldModel.reward_head)
            values = critic.apply(state["critic_target"], feats[1:]).squeeze(-1)
            discounts = jnp.full_like(rewards, args.gamma)  # NEVER_TERMINATES: no continuation head
            returns = lambda_returns(rewards, values, discounts, values[-1], args.return_lambda)
            weights = jax.lax.stop_gradient(discount_weights(discounts))
            return actor_loss_fn(returns, log_probs, weights, args.entropy_coef), (
                feats,
                log_probs,
                returns,
                weights,
            )

        (actor_loss, (feats, log_probs, returns, weights)), actor_grads = jax.value_and_grad(
            actor_loss_of, has_aux=True
        )(params["actor"])  # the world model is not changed by the actor
        updates, actor_opt = actor_optimizer.update(actor_grads, state["actor_opt"])
        actor_params = optax.apply_updates(params["actor"], updates)

        # the critic: regress the lambda-returns on the imagined states s_0..s_{H-1}
        def critic_loss_of(critic_params):
            return critic_loss_fn(
                critic.apply(critic_params, jax.lax.stop_gradient(feats[:-1])).squeeze(-1), returns, weights
            )

        critic_loss, critic_grads = jax.value_and_grad(critic_loss_of)(params["critic"])
        updates, critic_opt = critic_optimizer.update(critic_grads, state["critic_opt"])
        critic_params = optax.apply_updates(params["critic"], updates)
        # the slow critic: slow += tau * (online - slow)
        critic_target = optax.incremental_update(critic_params, state["critic_target"], args.critic_tau)
        state = {
            "params": {"world_model": wm_params, "actor": actor_params, "critic": critic_params},
            "critic_target": critic_target,
            "model_opt": model_opt,
            "actor_opt": actor_opt,
            "critic_opt": critic_opt,
        }
        return state, {
            "model_loss": model_loss,
            "recon_loss": recon_loss,
            "reward_loss": reward_loss,
            "kl": kl,
            "actor_loss": actor_loss,
            "critic_loss": critic_loss,
            "imagined_return": returns[0].mean(),
            "entropy": -log_probs.mean(),
        }

    # acting: one jitted call per environment step, a filter step and a sample of the policy
    @jax.jit
    def filter_and_act(params, h, z, action, obs, key):
        """One filter step on the new observation (a posterior sample) and a sample of the policy; the
        key is split inside the jitted call."""
        key, post_key, act_key = jax.random.split(key, 3)
        embed = model.apply(params["world_model"], obs[None], method=WorldModel.encode)
        h, _, _, post_mean, post_std = model.apply(
            params["world_model"], h, z, action, embed, method=WorldModel.obs_step
        )
        z = post_mean + post_std * jax.random.normal(post_key, post_std.shape)
        policy_action = policy_sample(
            params["actor"], jnp.concatenate([h, z], -1), jax.random.normal(act_key, (1, action_dim))
        )[0]
        return h, z, policy_action, key

    # the first episode: its first observation, and the filter's zero state
    learning_starts = args.seed_episodes * env.spec.max_episode_steps
    episode_returns, recent, losses, last_print = [], [], {}, 0.0
    start_time = time.time()
    obs, _ = env.reset(seed=args.seed)
    ep = {"obs": [obs], "prev_actions": [np.zeros(action_dim)], "rewards": [0.0], "reward_mask": [0.0]}
    h, z, action = (
        jnp.zeros((1, args.deter_size)),
        jnp.zeros((1, args.stoch_size)),
        jnp.zeros((1, action_dim)),
    )

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 4. Act: random for the seed episodes, then a sample of the policy on the filtered state
        h, z, policy_action, key = filter_and_act(
            state["params"], h, z, action, jnp.asarray(obs, dtype=jnp.float32), key
        )
        if global_step <= learning_starts:
            action = jnp.asarray(space.sample(), dtype=jnp.float32)[None]
        else:
            action = policy_action
        obs, reward, terminated, truncated, _ = env.step(np.asarray(action[0]))
        for k, v in zip(ep, (obs, np.asarray(action[0]), reward, 1.0)):
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
                jnp.zeros((1, args.deter_size)),
                jnp.zeros((1, args.stoch_size)),
                jnp.zeros((1, action_dim)),
            )

        # ---- 6. Train: train_steps updates every train_every steps after the seed episodes
        if global_step > learning_starts and global_step % args.train_every == 0:
            for _ in range(args.train_steps):
                key, update_key = jax.random.split(key)
                state, losses = update(state, sample_batch(), update_key)
            losses = {k: float(v) for k, v in losses.items()}

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
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(state["params"]))
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
