"""PPO with an Intrinsic Curiosity Module (ICM), discrete actions -- the JAX twin.
Curiosity is a forward model's error in the features of an encoder that an inverse model trains.

Papers: Pathak, Agrawal, Efros & Darrell 2017, "Curiosity-driven Exploration by Self-supervised
        Prediction", arXiv:1705.05363 (ICM; the paper trains it beside A3C, here beside PPO);
        Burda, Edwards, Pathak, Storkey, Darrell & Efros 2018, "Large-Scale Study of
        Curiosity-Driven Learning", arXiv:1808.04355 (which features to predict in);
        Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Twin:   algos/icm_torch.py (`diff` the two files: only the framework differs)
Docs:   docs/algorithms/icm.md
Run:    python algos/icm_jax.py --seed 1
"""

import os
import random
import re
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

import explore_envs  # registers DeepSea{N}-v0, DeepSeaStochastic{N}-v0 and the NoisyTV*DeepSea{N}-v0 variants


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "DeepSea12-v0"
    """gymnasium id, discrete actions: DeepSea{N}-v0, DeepSeaStochastic{N}-v0, NoisyTV*DeepSea{N}-v0, ..."""
    total_timesteps: int = 200_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the actor and the critic"""
    anneal_lr: bool = True
    """anneal the actor-critic learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """clip the value loss around the rollout's value estimates"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (the actor-critic and the curiosity module each)"""
    bonus_scale: float = 1.0
    """eta of the curiosity eta / 2 * ||phi_hat(s') - phi(s')||^2 (authors' code: 0.01); 0 turns it off"""
    icm_beta: float = 0.2
    """beta: the module minimises (1 - beta) * inverse loss + beta * forward loss (the paper's 0.2)"""
    icm_learning_rate: float = 1e-3
    """Adam learning rate of the curiosity module (constant)"""
    feature_dim: int = 32
    """size of the feature vector phi(s) (ignored with --features identity)"""
    features: str = "inverse"
    """space of the forward model: inverse (ICM's phi), random (phi frozen at init), identity (phi(s) = s)"""
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
    env_id="NoisyTVDeepSea5-v0",
    total_timesteps=2048,
    num_envs=4,
    num_steps=128,
    save_model=True,
    eval_episodes=2,
)

FEATURES = ("inverse", "random", "identity")
DEEP_SEA_ID = re.compile(r"^(" + "|".join(explore_envs.VARIANTS) + r")(-?\d+)-v0$")


# ----------------------------------------------------------------------------- pure math
@jax.jit
def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    so nothing flows across an episode boundary. Returns (advantages, returns = A + V).
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)

    def step(next_advantage, xs):
        reward, value, next_value, done = xs
        not_done = 1.0 - done
        delta = reward + gamma * not_done * next_value - value
        advantage = delta + gamma * lam * not_done * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(last_value), (rewards, values, next_values, dones), reverse=True
    )
    return advantages, advantages + values


def ppo_policy_loss(logp, logp_old, advantages, clip_coef):
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old.

    The min makes the objective pessimistic: once the ratio has moved past the clip in the
    direction the advantage favours, the gradient is zero; a move in the wrong direction is never
    clipped away.
    """
    ratio = jnp.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -jnp.minimum(unclipped, clipped).mean()


def ppo_value_loss(values, values_old, returns, clip_coef):
    """0.5 * mean of the squared error; with clip_coef, the pessimistic max of the plain error and
    the error of a prediction kept within clip_coef of the rollout's estimate (clip_coef=None: plain)."""
    unclipped = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    values_clipped = values_old + jnp.clip(values - values_old, -clip_coef, clip_coef)
    clipped = (values_clipped - returns) ** 2
    return 0.5 * jnp.maximum(unclipped, clipped).mean()


def icm_losses(action_logits, actions, phi_next_pred, phi_next, beta):
    """The curiosity module's losses on a batch; returns (loss, inverse_loss, forward_loss).

    inverse_loss = mean cross-entropy of the inverse model's logits for a_t given (phi(s), phi(s'));
    forward_loss = mean over the batch of 1/2 ||phi_hat(s') - sg(phi(s'))||^2 (sg: stop-gradient);
    loss = (1 - beta) * inverse_loss + beta * forward_loss.
    The target phi(s') is detached: the forward loss trains the forward model (and the phi(s) it
    reads) but never moves the target. Without it, the cheapest way to predict phi(s') would be to
    make phi constant, and the curiosity reward would collapse to zero everywhere.
    """
    logp_all = jax.nn.log_softmax(action_logits, axis=-1)
    inverse_loss = -jnp.take_along_axis(logp_all, actions[:, None], axis=-1).squeeze(-1).mean()
    forward_loss = 0.5 * ((phi_next_pred - jax.lax.stop_gradient(phi_next)) ** 2).sum(-1).mean()
    return (1.0 - beta) * inverse_loss + beta * forward_loss, inverse_loss, forward_loss


def curiosity_reward(phi_next_pred, phi_next, eta):
    """Per-transition curiosity: eta / 2 * ||phi_hat(s') - phi(s')||^2 (the forward model's error)."""
    return eta * 0.5 * ((phi_next_pred - phi_next) ** 2).sum(-1)


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head; the actor and the critic are two separate MLPs."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(layer_init(64)(x))
        x = nn.tanh(layer_init(64)(x))
        return layer_init(self.out_dim, std=self.head_std)(x)


class Agent:
    """Separate 64-64 tanh actor and critic (no shared trunk); params = {"actor": ..., "critic": ...}."""

    def __init__(self, obs_dim, num_actions):
        self.obs_dim = obs_dim
        self.critic = MLP(out_dim=1, head_std=1.0)
        self.actor = MLP(out_dim=num_actions, head_std=0.01)

    def init(self, key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.obs_dim))
        return {"actor": self.actor.init(actor_key, dummy), "critic": self.critic.init(critic_key, dummy)}

    def get_value(self, params, obs):
        return self.critic.apply(params["critic"], obs).squeeze(-1)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions; return (action, log-prob, value, key). The key is split inside the
        jitted call: splitting outside would cost a second dispatch per step."""
        key, sample_key = jax.random.split(key)
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        action = jax.random.categorical(sample_key, logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1).squeeze(-1)
        return action, logp, self.get_value(params, obs), key

    def evaluate_actions(self, params, obs, actions):
        """Log-prob of given actions, entropy and value, with gradients, for the update."""
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=-1).squeeze(-1)
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
        return logp, entropy, self.get_value(params, obs)


class ELUNet(nn.Module):
    """One 64-unit ELU layer and a linear head: the encoder, the inverse and the forward model."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x):
        x = nn.elu(layer_init(64)(x))
        return layer_init(self.out_dim, std=self.head_std)(x)


class ICM:
    """Encoder phi, inverse model and forward model. features: "inverse" trains phi through the
    inverse model (the paper), "random" freezes phi at its initialisation, "identity" uses the
    observation itself (phi(s) = s). params = {"encoder": ..., "inverse_model": ..., "forward_model": ...}."""

    def __init__(self, obs_dim, num_actions, feature_dim, features):
        self.obs_dim, self.num_actions, self.features = obs_dim, num_actions, features
        if features == "identity":
            self.encoder, feature_dim = None, obs_dim
        else:
            self.encoder = ELUNet(out_dim=feature_dim, head_std=1.0)
        self.feature_dim = feature_dim
        self.inverse_model = ELUNet(out_dim=num_actions, head_std=0.01)
        self.forward_model = ELUNet(out_dim=feature_dim, head_std=1.0)

    def init(self, key):
        encoder_key, inverse_key, forward_key = jax.random.split(key, 3)
        params = {
            "inverse_model": self.inverse_model.init(inverse_key, jnp.zeros((1, 2 * self.feature_dim))),
            "forward_model": self.forward_model.init(
                forward_key, jnp.zeros((1, self.feature_dim + self.num_actions))
            ),
        }
        if self.encoder is not None:
            params["encoder"] = self.encoder.init(encoder_key, jnp.zeros((1, self.obs_dim)))
        return params

    def encode(self, params, obs):
        if self.encoder is None:
            return obs
        phi = self.encoder.apply(params["encoder"], obs)
        return (
            phi if self.features == "inverse" else jax.lax.stop_gradient(phi)
        )  # random: phi stays as initialised

    def __call__(self, params, obs, next_obs, actions):
        """Return (inverse-model logits, phi_hat(s'), phi(s')) for a batch of transitions."""
        phi, phi_next = self.encode(params, obs), self.encode(params, next_obs)
        action_logits = self.inverse_model.apply(
            params["inverse_model"], jnp.concatenate([phi, phi_next], axis=-1)
        )
        one_hot = jax.nn.one_hot(actions, self.num_actions)
        phi_next_pred = self.forward_model.apply(
            params["forward_model"], jnp.concatenate([phi, one_hot], axis=-1)
        )
        return action_logits, phi_next_pred, phi_next


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


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    batch_size = args.num_envs * args.num_steps
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("num_steps", args.num_steps >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("bonus_scale", args.bonus_scale >= 0, ">= 0 (0 = the entropy-only PPO baseline)"),
        ("icm_beta", 0 <= args.icm_beta <= 1, "in [0, 1]"),
        ("icm_learning_rate", args.icm_learning_rate > 0, "> 0"),
        ("feature_dim", args.feature_dim >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size}",
        ),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size,
            f">= one rollout, --num-envs * --num-steps = {batch_size}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.features not in FEATURES:
        raise ValueError(f"--features {args.features!r} is unknown: choose one of {', '.join(FEATURES)}")
    match = DEEP_SEA_ID.match(args.env_id)
    if match and not 1 <= int(match.group(2)) <= explore_envs.MAX_SIZE:
        raise ValueError(
            f"--env-id {args.env_id}: the DeepSea size N = {match.group(2)} must be in "
            f"1..{explore_envs.MAX_SIZE}"
        )
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_jax.py"
        )


def solve_threshold(env_id):
    """The 20-episode mean return that counts as solved: 0.9 of DeepSea's optimum; MountainCar's
    flag within 150 steps on average (-150); None elsewhere."""
    if explore_envs.is_deep_sea(env_id):
        return 0.9 * explore_envs.deep_sea_optimal_return(env_id)
    return -150.0 if env_id.startswith("MountainCar") else None


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(agent.init(jax.random.PRNGKey(0)), f.read())
    greedy = jax.jit(lambda params, obs: agent.actor.apply(params["actor"], obs).argmax(-1))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            action = int(greedy(params, obs))
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # ---- 1. Setup: seeding, environments, networks, optimisers
    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions)
    icm = ICM(obs_dim, num_actions, args.feature_dim, args.features)
    key, init_key, icm_key = jax.random.split(key, 3)
    params = agent.init(init_key)
    icm_params = icm.init(icm_key)  # a frozen (random) phi gets zero gradients: stop_gradient in encode
    updates_per_iteration = args.update_epochs * args.num_minibatches
    if args.anneal_lr:
        # The same per-iteration staircase as the torch twin: lr * (1 - (iteration - 1) / iterations).
        schedule = lambda count: (
            args.learning_rate * (1.0 - (count // updates_per_iteration) / num_iterations)
        )
    else:
        schedule = args.learning_rate
    optimizer = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=schedule, eps=1e-5),
    )
    opt_state = optimizer.init(params)
    icm_optimizer = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm), optax.adam(args.icm_learning_rate, eps=1e-5)
    )
    icm_opt_state = icm_optimizer.init(icm_params)

    def loss_fn(params, icm_params, mb):
        logp, entropy, value = agent.evaluate_actions(params, mb["obs"], mb["actions"])
        mb_adv = mb["advantages"]
        if args.norm_adv:
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std(ddof=1) + 1e-8)
        pg_loss = ppo_policy_loss(logp, mb["logps"], mb_adv, args.clip_coef)
        v_loss = ppo_value_loss(
            value, mb["values"], mb["returns"], args.clip_coef if args.clip_vloss else None
        )
        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
        action_logits, phi_next_pred, phi_next = icm(icm_params, mb["obs"], mb["next_obs"], mb["actions"])
        icm_loss, inverse_loss, forward_loss = icm_losses(
            action_logits, mb["actions"], phi_next_pred, phi_next, args.icm_beta
        )
        logratio = logp - mb["logps"]
        stats = {
            "policy_loss": pg_loss,
            "value_loss": v_loss,
            "entropy": entropy_loss,
            # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
            "approx_kl": ((jnp.exp(logratio) - 1) - logratio).mean(),
            "clipfrac": (jnp.abs(jnp.exp(logratio) - 1.0) > args.clip_coef).mean(),
            "icm_loss": icm_loss,
            "inverse_loss": inverse_loss,
            "forward_loss": forward_loss,
        }
        return loss + icm_loss, stats  # disjoint parameters: each optimiser sees its own loss

    @jax.jit
    def update(params, icm_params, opt_state, icm_opt_state, batch, key):
        """The whole update, epochs x minibatches, as one jitted call (two nested lax.scans); the
        curiosity module trains on the same minibatches with its own optimiser."""

        def minibatch_step(carry, mb):
            params, icm_params, opt_state, icm_opt_state = carry
            (grads, icm_grads), stats = jax.grad(loss_fn, argnums=(0, 1), has_aux=True)(
                params, icm_params, mb
            )
            updates, opt_state = optimizer.update(grads, opt_state, params)
            icm_updates, icm_opt_state = icm_optimizer.update(icm_grads, icm_opt_state, icm_params)
            return (
                optax.apply_updates(params, updates),
                optax.apply_updates(icm_params, icm_updates),
                opt_state,
                icm_opt_state,
            ), stats

        def epoch_step(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape((args.num_minibatches, minibatch_size) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, shuffled)

        key, *epoch_keys = jax.random.split(key, args.update_epochs + 1)
        (params, icm_params, opt_state, icm_opt_state), stats = jax.lax.scan(
            epoch_step, (params, icm_params, opt_state, icm_opt_state), jnp.stack(epoch_keys)
        )
        return params, icm_params, opt_state, icm_opt_state, jax.tree.map(jnp.mean, stats), key

    get_value = jax.jit(agent.get_value)

    @jax.jit
    def intrinsic_reward(icm_params, obs, next_obs, actions):
        _, phi_next_pred, phi_next = icm(icm_params, obs, next_obs, actions)
        return curiosity_reward(phi_next_pred, phi_next, args.bonus_scale)

    # Rollout storage, (T, N, ...), on the host: the envs step on numpy anyway. next_obs_buf holds
    # the true s' of each step (final_obs at an end).
    obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    next_obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.int32)
    logps_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    rewards_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    # The noisy TV: how often the policy watches (action 2) over the last quarter of the env steps.
    noisy_tv = args.env_id.startswith("NoisyTV")
    tv_from_step, tv_actions, tv_steps = 0.75 * num_iterations * batch_size, 0, 0
    start_time = time.time()
    next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            action, logp, value, key = agent.act(params, next_obs, key)
            action, logp, value = jax.device_get((action, logp, value))  # one host transfer, not three
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action)
            if noisy_tv and global_step > tv_from_step:
                tv_actions += int((action == 2).sum())
                tv_steps += args.num_envs
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # The transition's true s': with same-step autoreset, an ended episode's last
            # observation is infos["final_obs"]; obs already holds the next episode's first one.
            real_next = np.array(obs, dtype=np.float32)
            if done.any():
                real_next[done] = np.stack(infos["final_obs"][done])
            next_obs_buf[step] = real_next
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
            # cuts the recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = real_next[only_truncated]
                reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))
            rewards_buf[step] = reward
            dones_buf[step] = done
            next_obs = np.asarray(obs, dtype=np.float32)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Curiosity: the forward model's error, added to the reward
        # One number per transition, from the module as it was during the rollout, added to the
        # extrinsic reward of the same step (episodic: the GAE recursion stops at episode ends for
        # both, as in the paper's A3C).
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_next_obs = next_obs_buf.reshape(batch_size, obs_dim)
        b_actions = actions_buf.reshape(-1)
        intrinsic = np.asarray(intrinsic_reward(icm_params, b_obs, b_next_obs, b_actions)).reshape(
            args.num_steps, args.num_envs
        )
        rewards_buf += intrinsic

        # ---- 4. Advantages: GAE, bootstrapped from the observation after the rollout
        last_value = get_value(params, next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 5. Update: epochs x minibatches; the curiosity module trains on the same minibatches
        # with its own optimiser
        batch = {
            "obs": b_obs,
            "next_obs": b_next_obs,
            "actions": b_actions,
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values_buf.reshape(-1),
        }
        params, icm_params, opt_state, icm_opt_state, stats, key = update(
            params, icm_params, opt_state, icm_opt_state, batch, key
        )
        learning_rate = opt_state[1].hyperparams["learning_rate"]  # the rate this update used

        # ---- 6. Logging
        b_returns, b_values = np.asarray(batch["returns"]), batch["values"]
        var_returns = b_returns.var(ddof=1)
        explained_var = np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", float(learning_rate), global_step)
        writer.add_scalar("charts/intrinsic_reward", float(intrinsic.mean()), global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", float(value), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.3f}  "
                f"curiosity {float(intrinsic.mean()):.4f}  SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    returns_only = [r for _, r in episode_returns]
    threshold = solve_threshold(args.env_id)
    solved_at = None if threshold is None else explore_envs.episodes_to_solve(returns_only, threshold, 20)
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        # never solved: the number of finished episodes + 1, so the figure is always finite
        "episodes_to_solve": float(len(returns_only) + 1 if solved_at is None else solved_at),
        "num_episodes": len(returns_only),
        "intrinsic_reward": float(intrinsic.mean()),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: float(value) for name, value in stats.items()},
    }
    if noisy_tv:
        summary["tv_fraction"] = tv_actions / max(tv_steps, 1)
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(params))
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, seed=args.seed + 10_000)
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
