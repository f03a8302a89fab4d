"""PPO plus a count-based exploration bonus beta / sqrt(N(phi(s'))) on the reward -- the JAX twin.
phi(s') is the exact observation on DeepSea and a k-bit SimHash code elsewhere (MountainCar-v0).

Papers: Strehl & Littman 2008, "An analysis of model-based Interval Estimation for Markov Decision
        Processes", JCSS 74(8) (MBIE-EB); Tang et al. 2017, "#Exploration: A Study of Count-Based
        Exploration for Deep Reinforcement Learning", arXiv:1611.04717 (SimHash counts);
        Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347 (the base).
Twin:   algos/count_bonus_torch.py (`diff` the two files: only the framework differs)
Docs:   docs/algorithms/count_bonus.md
Run:    python algos/count_bonus_jax.py --seed 1
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
    env_id: str = "DeepSea14-v0"
    """gymnasium environment id (discrete actions): DeepSea{N}-v0 and its variants, MountainCar-v0"""
    total_timesteps: int = 28_160
    """total environment steps, summed over the vector envs (DeepSea14: 2,011 episodes of 14 steps)"""
    num_envs: int = 16
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 32
    """steps per environment per rollout"""
    bonus_scale: float = 0.1
    """beta of the intrinsic reward beta / sqrt(N(phi(s'))); 0 turns the bonus off (entropy-only PPO)"""
    simhash_bits: int = 32
    """k, the bits of the SimHash code sign(A g(s)) for continuous observations (DeepSea counts exactly)"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
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
    """global gradient-norm clip"""
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
    env_id="DeepSea5-v0", total_timesteps=1024, num_envs=4, num_steps=64, save_model=True, eval_episodes=2
)

# A DeepSea id with any integer size, so that N < 1 is named as such (explore_envs registers 1..64).
DEEP_SEA_ANY_SIZE = re.compile(r"^(" + "|".join(explore_envs.VARIANTS) + r")(-?\d+)-v0$")
MOUNTAIN_CAR_SOLVED = -150.0  # MountainCar-v0 "solved": the flag within 150 steps, 20-episode mean


# ----------------------------------------------------------------------------- pure math
def count_bonus(counts, beta):
    """The MBIE-EB / #Exploration bonus beta / sqrt(N) for counts N >= 1 (taken after the increment,
    so a first visit earns the full beta and the bonus never divides by zero)."""
    return beta / jnp.sqrt(counts)


def simhash(features, A):
    """SimHash bits of a batch: 1 where (A g)_j > 0, else 0, for features g of shape (B, d) and a
    fixed Gaussian projection A of shape (k, d); returns (B, k) in {0, 1}. Points on the same side of
    all k random hyperplanes share a code, so nearby points usually collide."""
    return (features @ A.T > 0).astype(jnp.uint8)


def simhash_features(obs, low, high):
    """g(s) for SimHash: each coordinate scaled from the observation space's [low, high] to [-1, 1],
    then a constant 1 appended, so that the hyperplanes A g = 0 need not pass through the origin
    (in 2-D, hyperplanes through the origin would only cut the plane into angular sectors)."""
    scaled = 2.0 * (obs - low) / (high - low) - 1.0
    return jnp.concatenate([scaled, jnp.ones_like(scaled[:, :1])], axis=1)


def observation_keys(obs, bits=None):
    """phi(s) as hashable keys, one per row: the raw bytes of each observation (exact counting, for
    DeepSea's one-hot observations) or, given SimHash bits, the bytes of each packed code."""
    rows = np.asarray(obs if bits is None else np.packbits(np.asarray(bits), axis=1))
    return [row.tobytes() for row in rows]


def update_counts(counts, keys):
    """Increment counts[key] (a dict, bookkeeping in plain python) for each key in turn and return
    the counts after each increment, as float32: two envs that reach the same state in one step
    see 1 and 2, as if their steps had come one after the other."""
    out = np.empty(len(keys), dtype=np.float32)
    for i, key in enumerate(keys):
        counts[key] = counts.get(key, 0) + 1
        out[i] = counts[key]
    return out


@jax.jit
def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    so nothing flows across an episode boundary (the bonus included: it is episodic here).
    Returns (advantages, returns = A + V).
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
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old."""
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


def solve_threshold(env_id):
    """The 20-episode mean return that counts as solved: 0.9 of DeepSea's optimum (0.891 on the
    deterministic variants, 0.340 on DeepSeaStochastic12), -150 on MountainCar-v0; None elsewhere."""
    if explore_envs.is_deep_sea(env_id):
        return 0.9 * explore_envs.deep_sea_optimal_return(env_id)
    return MOUNTAIN_CAR_SOLVED if env_id.startswith("MountainCar") else None


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
        """Sample actions; return (action, log-prob, value, key), the key split inside the jitted call."""
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
    """The s' each env's step led to: with SAME_STEP autoreset an env whose episode ended returned
    the next episode's first observation; its true last observation is infos["final_obs"][i]. The
    bonus is counted on this s', never on the reset observation."""
    real_next_obs = next_obs.copy()
    if "_final_obs" in infos:
        for i in np.flatnonzero(infos["_final_obs"]):
            real_next_obs[i] = infos["final_obs"][i]
    return real_next_obs


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    batch_size = args.num_envs * args.num_steps
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("num_steps", args.num_steps >= 1, ">= 1"),
        ("bonus_scale", args.bonus_scale >= 0, ">= 0 (0 turns the bonus off)"),
        ("simhash_bits", args.simhash_bits >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
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
    size = DEEP_SEA_ANY_SIZE.match(args.env_id)
    if size and not 1 <= int(size.group(2)) <= explore_envs.MAX_SIZE:
        raise ValueError(
            f"--env-id {args.env_id}: the DeepSea size N = {size.group(2)} must be in "
            f"1..{explore_envs.MAX_SIZE} (N < 1 has no grid)"
        )
    if args.env_id not in gym.registry:
        raise ValueError(f"--env-id {args.env_id} is not a registered environment id")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_jax.py"
        )


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

    # ---- 1. Setup: seeding, environments, networks, optimiser
    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
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

    # The counted key phi(s'): exact bytes on DeepSea (one-hot: a tabular count), SimHash elsewhere,
    # with A drawn once from numpy (the same matrix in both twins) over the scaled observation + 1.
    exact = explore_envs.is_deep_sea(args.env_id)
    space = envs.single_observation_space
    low, high = jnp.asarray(space.low, dtype=jnp.float32), jnp.asarray(space.high, dtype=jnp.float32)
    A = jnp.asarray(
        np.random.default_rng(args.seed).standard_normal((args.simhash_bits, obs_dim + 1)), dtype=jnp.float32
    )
    hash_bits = jax.jit(lambda obs: simhash(simhash_features(obs, low, high), A))
    counts = {}

    def loss_fn(params, mb):
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
        logratio = logp - mb["logps"]
        stats = {
            "policy_loss": pg_loss,
            "value_loss": v_loss,
            "entropy": entropy_loss,
            # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
            "approx_kl": ((jnp.exp(logratio) - 1) - logratio).mean(),
            "clipfrac": (jnp.abs(jnp.exp(logratio) - 1.0) > args.clip_coef).mean(),
        }
        return loss, stats

    @jax.jit
    def update(params, opt_state, batch, key):
        """The whole update, epochs x minibatches, as one jitted call (two nested lax.scans)."""

        def minibatch_step(carry, mb):
            params, opt_state = carry
            grads, stats = jax.grad(loss_fn, has_aux=True)(params, mb)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), stats

        def epoch_step(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape((args.num_minibatches, minibatch_size) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, shuffled)

        key, *epoch_keys = jax.random.split(key, args.update_epochs + 1)
        (params, opt_state), stats = jax.lax.scan(epoch_step, (params, opt_state), jnp.stack(epoch_keys))
        return params, opt_state, jax.tree.map(jnp.mean, stats), key

    get_value = jax.jit(agent.get_value)

    # Rollout storage, (T, N, ...), on the host: the envs step on numpy anyway.
    obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.int32)
    logps_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    rewards_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    intrinsic_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    # Noisy TV: the share of TV actions (action 2) in the last 25% of the environment steps.
    tv_from_step = int(0.75 * num_iterations * batch_size)
    tv_actions, late_actions = 0, 0
    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
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
            if global_step > tv_from_step:
                tv_actions += int((action == 2).sum())
                late_actions += args.num_envs
            ep_return += reward
            ep_length += 1
            done = terminated | truncated

            # The count bonus on the true s' (final_obs at an episode end): increment, then
            # beta / sqrt(N). It is added to the extrinsic reward and is episodic like it (below).
            real_next_obs = np.asarray(transition_next_obs(obs, infos), dtype=np.float32)
            if exact:
                keys = observation_keys(real_next_obs)
            else:
                keys = observation_keys(None, np.asarray(hash_bits(real_next_obs)))
            bonus = np.asarray(count_bonus(jnp.asarray(update_counts(counts, keys)), args.bonus_scale))
            intrinsic_buf[step] = bonus

            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
            # cuts the recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                reward[only_truncated] += args.gamma * np.asarray(
                    get_value(params, real_next_obs[only_truncated])
                )
            rewards_buf[step] = reward + bonus
            dones_buf[step] = done
            next_obs = np.asarray(obs, dtype=np.float32)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Advantages: GAE, bootstrapped from the observation after the rollout
        last_value = get_value(params, next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Update: epochs x minibatches over the flattened batch
        batch = {
            "obs": obs_buf.reshape(batch_size, obs_dim),
            "actions": actions_buf.reshape(-1),
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values_buf.reshape(-1),
        }
        params, opt_state, stats, key = update(params, opt_state, batch, key)
        learning_rate = opt_state[1].hyperparams["learning_rate"]  # the rate this update used

        # ---- 5. Logging
        b_returns, b_values = np.asarray(batch["returns"]), batch["values"]
        var_returns = b_returns.var(ddof=1)
        explained_var = np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", float(learning_rate), global_step)
        writer.add_scalar("charts/intrinsic_reward", float(intrinsic_buf.mean()), global_step)
        writer.add_scalar("charts/distinct_states", len(counts), global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", float(value), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.2f}  "
                f"keys {len(counts):6,d}  SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 6. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    returns_only = [r for _, r in episode_returns]
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "num_episodes": len(episode_returns),
        "distinct_states": len(counts),
        "intrinsic_reward": float(intrinsic_buf.mean()),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: float(value) for name, value in stats.items()},
    }
    threshold = solve_threshold(args.env_id)
    if threshold is not None:  # never solved: the episodes run + 1, so the figure stays finite
        solved_at = explore_envs.episodes_to_solve(returns_only, threshold, 20)
        summary["episodes_to_solve"] = float(len(returns_only) + 1 if solved_at is None else solved_at)
    if args.env_id.startswith("NoisyTV"):
        summary["tv_fraction"] = tv_actions / max(late_actions, 1)
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
