"""PPO with Random Network Distillation (RND), discrete actions -- the JAX twin.
Novelty is a predictor's error at matching a fixed random network on s', learned by a second value head.

Papers: Burda, Edwards, Storkey & Klimov 2018, "Exploration by Random Network Distillation",
        arXiv:1810.12894; on top of Schulman et al. 2017, "Proximal Policy Optimization
        Algorithms", arXiv:1707.06347 (the PPO base is algos/ppo_jax.py, visible below).
Twin:   algos/rnd_torch.py (`diff` the two files: only the framework differs)
Docs:   docs/algorithms/rnd.md
Run:    python algos/rnd_jax.py --seed 1
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

import explore_envs  # registers DeepSea{N}-v0, DeepSeaStochastic{N}-v0 and the NoisyTV*DeepSea{N}-v0 variants


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "DeepSea12-v0"
    """gymnasium id, discrete actions: DeepSea{N}-v0, NoisyTV*DeepSea{N}-v0, MountainCar-v0, ..."""
    total_timesteps: int = 81_920
    """total environment steps, summed over the vector envs (the normaliser's warm-up steps not counted)"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the agent and of the RND predictor"""
    anneal_lr: bool = True
    """anneal the learning rates linearly to 0 over the run"""
    gamma: float = 0.999
    """discount of the extrinsic return (episodic)"""
    gamma_int: float = 0.99
    """discount of the intrinsic return (non-episodic)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation (both heads)"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise the combined advantages per minibatch"""
    norm_adv_per_head: bool = False
    """standardise each head's advantages over the batch before weighting them (off: the paper's sum)"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient (the sum of the two heads' losses)"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, applied to the actor and to the critic separately"""
    bonus_scale: float = 1.0
    """int_coef (beta): weight of the intrinsic advantage; 0 = entropy-only PPO with the same networks"""
    ext_coef: float = 2.0
    """weight of the extrinsic advantage (the paper's 2, with int_coef 1)"""
    update_proportion: float = 0.25
    """fraction of each minibatch the predictor trains on (the paper's 0.25)"""
    rnd_output_dim: int = 64
    """width of the target's (and predictor's) output embedding"""
    obs_norm_steps: int = 64
    """random-policy steps per environment that initialise the observation normaliser"""
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
    env_id="DeepSea5-v0",
    total_timesteps=1024,
    num_envs=4,
    num_steps=64,
    obs_norm_steps=8,
    save_model=True,
    eval_episodes=2,
)

MOUNTAIN_CAR_SOLVED = -150.0  # episodes_to_solve on MountainCar-v0: the goal within 150 steps on average


# ----------------------------------------------------------------------------- pure math
def update_running_moments(mean, var, count, batch):
    """Merge a batch (rows = samples) into running (mean, var, count): the parallel-variance update
    of Chan, Golub & LeVeque. With delta = batch_mean - mean and n = count + batch_count:
        mean' = mean + delta * batch_count / n
        M2'   = var * count + batch_var * batch_count + delta^2 * count * batch_count / n
        var'  = M2' / n                     (population variance, as np.var)
    Exact for any split of the stream into batches. Returns (mean', var', n)."""
    batch_mean = batch.mean(0)
    batch_var = batch.var(0)
    batch_count = batch.shape[0]
    delta = batch_mean - mean
    total = count + batch_count
    new_mean = mean + delta * batch_count / total
    m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / total
    return new_mean, m2 / total, total


def normalize_obs(obs, mean, var):
    """RND's input: (obs - mean) / std, clipped to [-5, 5] (a never-seen feature cannot explode)."""
    return jnp.clip((obs - mean) / jnp.sqrt(var + 1e-8), -5.0, 5.0)


@jax.jit
def discounted_reward_stream(running, rewards, gamma):
    """The non-episodic discounted sum of intrinsic rewards, step by step, carried across rollouts
    and episode ends: running_t = gamma * running_{t-1} + r_t. Its running variance scales the
    intrinsic reward. rewards (T, N), running (N,). Returns (stream (T, N), last running)."""

    def step(running, reward):
        running = gamma * running + reward
        return running, running

    running, stream = jax.lax.scan(step, running, rewards)
    return stream, running


def rnd_intrinsic_reward(predicted, target):
    """The novelty of s': ||f_hat(s') - f(s')||^2 over the embedding (last) axis. Small where the
    predictor has been trained (visited states), large elsewhere."""
    return ((predicted - target) ** 2).sum(-1)


def rnd_predictor_loss(predicted, target, mask):
    """Mean squared distillation error over the samples kept by mask (1 = train on it). The mask keeps
    a random update_proportion of each minibatch, so the predictor does not outpace the target's
    novelty signal when many environments feed it. Only the predictor gets a gradient."""
    errors = rnd_intrinsic_reward(predicted, jax.lax.stop_gradient(target))
    return (errors * mask).sum() / jnp.maximum(mask.sum(), 1.0)


@partial(jax.jit, static_argnames="episodic")
def compute_gae(rewards, values, dones, last_value, gamma, lam, episodic=True):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    With episodic=False the episode ends are ignored (done_t = 0 throughout): the return flows on
    into the next episode's first states, as RND's intrinsic return does. Returns (advantages,
    returns = A + V).
    """
    if not episodic:
        dones = jnp.zeros_like(dones)
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


def standardize(x):
    """(x - mean) / (unbiased std + 1e-8): PPO's advantage normalisation."""
    return (x - x.mean()) / (x.std(ddof=1) + 1e-8)


def combine_advantages(ext_advantages, int_advantages, ext_coef, int_coef, per_head=False):
    """The advantage the policy follows: ext_coef * A_ext + int_coef * A_int (the paper's weighted sum;
    PPO then standardises it per minibatch). per_head: standardise each head over the batch first
    (`standardize`), so that the coefficients, not the two reward scales, set the balance.
    The paper's games pay a sparse extrinsic reward and the plain sum works; MountainCar pays -1 every
    step, its extrinsic advantages carry value-fit noise of order 1 while the normalised novelty's are
    of order 1e-4, and the plain sum is all noise (docs/algorithms/rnd.md)."""
    if per_head:
        ext_advantages, int_advantages = standardize(ext_advantages), standardize(int_advantages)
    return ext_coef * ext_advantages + int_coef * int_advantages


def ppo_policy_loss(logp, logp_old, advantages, clip_coef):
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old."""
    ratio = jnp.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -jnp.minimum(unclipped, clipped).mean()


def ppo_value_loss(values, returns):
    """0.5 * mean squared error, unclipped (as in the RND paper's PPO: with gamma 0.999 the
    extrinsic returns reach hundreds on MountainCar, and a 0.2 value clip would hold the head back)."""
    return 0.5 * ((values - returns) ** 2).mean()


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(layer_init(64)(x))
        x = nn.tanh(layer_init(64)(x))
        return layer_init(self.out_dim, std=self.head_std)(x)


class Agent:
    """A 64-64 tanh actor and a 64-64 tanh critic with two value heads (column 0: extrinsic,
    column 1: intrinsic) on one trunk; params = {"actor": ..., "critic": ...}."""

    def __init__(self, obs_dim, num_actions):
        self.obs_dim = obs_dim
        self.critic = MLP(out_dim=2, head_std=1.0)
        self.actor = MLP(out_dim=num_actions, head_std=0.01)

    def init(self, key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.obs_dim))
        return {"actor": self.actor.init(actor_key, dummy), "critic": self.critic.init(critic_key, dummy)}

    def get_value(self, params, obs):
        return self.critic.apply(params["critic"], obs)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions; return (action, log-prob, values (.., 2), key)."""
        key, sample_key = jax.random.split(key)
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        action = jax.random.categorical(sample_key, logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1).squeeze(-1)
        return action, logp, self.get_value(params, obs), key

    def evaluate_actions(self, params, obs, actions):
        """Log-prob of given actions, entropy and values, with gradients, for the update."""
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=-1).squeeze(-1)
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
        return logp, entropy, self.get_value(params, obs)


class RNDNet(nn.Module):
    """Leaky-ReLU MLP from the normalised observation to an embedding. The target is 64-64 and
    never trained; the predictor is one hidden layer deeper (64-64-64), as the paper's predictor
    is larger than its target."""

    out_dim: int
    depth: int

    @nn.compact
    def __call__(self, x):
        for _ in range(self.depth):
            x = nn.leaky_relu(layer_init(64)(x))
        return layer_init(self.out_dim)(x)


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
        ("gamma_int", 0 <= args.gamma_int <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("bonus_scale", args.bonus_scale >= 0, ">= 0 (0 turns the bonus off)"),
        ("ext_coef", args.ext_coef >= 0, ">= 0"),
        ("update_proportion", 0 < args.update_proportion <= 1, "in (0, 1]"),
        ("rnd_output_dim", args.rnd_output_dim >= 1, ">= 1"),
        ("obs_norm_steps", args.obs_norm_steps >= 1, ">= 1"),
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
    if args.norm_adv_per_head and not args.norm_adv:
        raise ValueError(
            "--norm-adv-per-head standardises the heads and then the sum per minibatch; "
            "it cannot be combined with --no-norm-adv"
        )
    match = explore_envs.ID_PATTERN.match(args.env_id)
    if args.env_id.startswith(("DeepSea", "NoisyTV")) and (
        match is None or not 1 <= int(match.group(2)) <= explore_envs.MAX_SIZE
    ):
        raise ValueError(
            f"--env-id {args.env_id}: DeepSea ids are DeepSea{{N}}-v0, DeepSeaStochastic{{N}}-v0 "
            f"or NoisyTV*DeepSea{{N}}-v0 (algos/explore_envs.py) with 1 <= N <= {explore_envs.MAX_SIZE}"
        )
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_jax.py"
        )


def solve_threshold(env_id):
    """The return whose 20-episode mean counts as solved: 0.9 of DeepSea's optimum, -150 on
    MountainCar-v0; None elsewhere."""
    if explore_envs.is_deep_sea(env_id):
        return 0.9 * explore_envs.deep_sea_optimal_return(env_id)
    return MOUNTAIN_CAR_SOLVED if env_id == "MountainCar-v0" else None


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters and observation statistics into a fresh network; run the greedy
    (argmax) policy on the normalised observation."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    with open(model_path, "rb") as f:
        saved = flax.serialization.msgpack_restore(f.read())
    params = saved["agent"]
    greedy = jax.jit(lambda params, obs: agent.actor.apply(params["actor"], obs).argmax(-1))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            x = normalize_obs(jnp.asarray(obs, dtype=jnp.float32), saved["obs_mean"], saved["obs_var"])
            action = int(greedy(params, x))
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

    # ---- 1. Setup: seeding, environments, networks, optimisers, normalisers
    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    envs.action_space.seed(args.seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions)
    target = RNDNet(out_dim=args.rnd_output_dim, depth=2)  # fixed, random: its params are never updated
    predictor = RNDNet(out_dim=args.rnd_output_dim, depth=3)
    key, init_key, target_key, predictor_key = jax.random.split(key, 4)
    params = agent.init(init_key)
    target_params = target.init(target_key, jnp.zeros((1, obs_dim)))
    predictor_params = predictor.init(predictor_key, jnp.zeros((1, obs_dim)))
    updates_per_iteration = args.update_epochs * args.num_minibatches
    if args.anneal_lr:
        # The same per-iteration staircase as the torch twin: lr * (1 - (iteration - 1) / iterations).
        schedule = lambda count: (
            args.learning_rate * (1.0 - (count // updates_per_iteration) / num_iterations)
        )
    else:
        schedule = args.learning_rate
    # Clip the actor's and the critic's gradients separately: with gamma 0.999 and -1 per
    # step (MountainCar) the value loss is in the hundreds, and one global clip would
    # scale the policy's gradient down with the critic's.
    clip = optax.clip_by_global_norm(args.max_grad_norm)
    optimizer = optax.inject_hyperparams(optax.adam)(learning_rate=schedule, eps=1e-5)
    rnd_optimizer = optax.adam(learning_rate=schedule, eps=1e-5)
    opt_state = optimizer.init(params)
    rnd_opt_state = rnd_optimizer.init(predictor_params)

    def loss_fn(params, mb):
        logp, entropy, value = agent.evaluate_actions(params, mb["obs"], mb["actions"])
        mb_adv = mb["advantages"]
        if args.norm_adv:
            mb_adv = standardize(mb_adv)
        pg_loss = ppo_policy_loss(logp, mb["logps"], mb_adv, args.clip_coef)
        v_loss = ppo_value_loss(value[:, 0], mb["ext_returns"]) + ppo_value_loss(
            value[:, 1], mb["int_returns"]
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

    def rnd_loss_fn(predictor_params, mb, mask):
        return rnd_predictor_loss(predictor.apply(predictor_params, mb["rnd_in"]), mb["targets"], mask)

    @jax.jit
    def update(params, opt_state, predictor_params, rnd_opt_state, batch, key):
        """The whole update, epochs x minibatches, as one jitted call (two nested lax.scans): a PPO
        step on the agent, then a distillation step on the predictor, per minibatch."""

        def minibatch_step(carry, mb):
            params, opt_state, predictor_params, rnd_opt_state, key = carry
            grads, stats = jax.grad(loss_fn, has_aux=True)(params, mb)
            grads = {name: clip.update(g, clip.init(g))[0] for name, g in grads.items()}
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            # The predictor distils the fixed target on a random update_proportion of the minibatch.
            key, mask_key = jax.random.split(key)
            mask = (jax.random.uniform(mask_key, (minibatch_size,)) < args.update_proportion).astype(
                jnp.float32
            )
            rnd_loss, rnd_grads = jax.value_and_grad(rnd_loss_fn)(predictor_params, mb, mask)
            rnd_updates, rnd_opt_state = rnd_optimizer.update(rnd_grads, rnd_opt_state, predictor_params)
            predictor_params = optax.apply_updates(predictor_params, rnd_updates)
            return (params, opt_state, predictor_params, rnd_opt_state, key), {**stats, "rnd_loss": rnd_loss}

        def epoch_step(carry, epoch_key):
            perm = jax.random.permutation(epoch_key, batch_size)
            shuffled = jax.tree.map(
                lambda x: x[perm].reshape((args.num_minibatches, minibatch_size) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, shuffled)

        key, mask_key, *epoch_keys = jax.random.split(key, args.update_epochs + 2)
        carry = (params, opt_state, predictor_params, rnd_opt_state, mask_key)
        (params, opt_state, predictor_params, rnd_opt_state, _), stats = jax.lax.scan(
            epoch_step, carry, jnp.stack(epoch_keys)
        )
        return params, opt_state, predictor_params, rnd_opt_state, jax.tree.map(jnp.mean, stats), key

    @jax.jit
    def novelty(predictor_params, target_params, next_obs, obs_mean, obs_var):
        """Normalised RND input, raw intrinsic reward and target embedding of a batch of s'."""
        rnd_in = normalize_obs(next_obs, obs_mean, obs_var)
        targets = target.apply(target_params, rnd_in)
        return rnd_in, rnd_intrinsic_reward(predictor.apply(predictor_params, rnd_in), targets), targets

    get_value = jax.jit(agent.get_value)
    normalize = jax.jit(normalize_obs)

    # Rollout storage, (T, N, ...), on the host. next_obs_buf holds the true s' of each step
    # (final_obs at an episode end).
    obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    next_obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.int32)
    logps_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    rewards_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs, 2), dtype=np.float32)

    # Observation normaliser, initialised from uniformly random actions, as the paper does before
    # training starts (these steps are not counted in global_step; no episode of theirs enters the
    # curve). RND's input is the normalised s'; the policy and critic see the normalised s too (the
    # paper's policy sees pixels / 255; on MountainCar the raw velocity, |v| < 0.07, is too small
    # a signal for the policy to act on: docs/algorithms/rnd.md).
    obs_mean, obs_var, obs_count = jnp.zeros(obs_dim), jnp.ones(obs_dim), 1e-4
    next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)
    warmup = []
    for _ in range(args.obs_norm_steps):
        obs, *_ = envs.step(envs.action_space.sample())
        warmup.append(np.asarray(obs, dtype=np.float32))
    obs_mean, obs_var, obs_count = update_running_moments(
        obs_mean, obs_var, obs_count, jnp.concatenate(warmup)
    )
    # Intrinsic-reward normaliser: running variance of the non-episodic discounted intrinsic return.
    int_mean, int_var, int_count = jnp.zeros(()), jnp.ones(()), 1e-4
    int_running = jnp.zeros(args.num_envs)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    tv_actions, late_actions = 0, 0  # noisy-TV action counts over the last 25% of the steps
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)
    next_obs = np.asarray(normalize(next_obs, obs_mean, obs_var))

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            action, logp, value, key = agent.act(params, next_obs, key)
            action, logp, value = jax.device_get((action, logp, value))  # one host transfer, not three
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action)
            if global_step > 0.75 * args.total_timesteps:
                tv_actions += int((action == 2).sum())
                late_actions += args.num_envs
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            real_next_obs = np.array(obs, dtype=np.float32)
            if done.any():
                real_next_obs[done] = np.stack(infos["final_obs"][done])
            # Time-limit truncation is not a real end: the extrinsic return goes on from the true
            # final observation. Fold gamma * V_ext(final_obs) into this step's reward; the done
            # flag then cuts the extrinsic recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = normalize(real_next_obs[only_truncated], obs_mean, obs_var)
                reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))[:, 0]
            rewards_buf[step] = reward
            dones_buf[step] = done
            next_obs_buf[step] = real_next_obs
            next_obs = np.asarray(normalize(np.asarray(obs, dtype=np.float32), obs_mean, obs_var))
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Intrinsic rewards: the novelty of every s' of the rollout
        # Computed after the observation normaliser has seen them, then divided by the running std
        # of the discounted intrinsic return.
        b_next_obs = next_obs_buf.reshape(batch_size, obs_dim)
        obs_mean, obs_var, obs_count = update_running_moments(
            obs_mean, obs_var, obs_count, jnp.asarray(b_next_obs)
        )
        rnd_in, int_rewards, b_targets = novelty(
            predictor_params, target_params, b_next_obs, obs_mean, obs_var
        )
        int_rewards = int_rewards.reshape(args.num_steps, args.num_envs)
        stream, int_running = discounted_reward_stream(int_running, int_rewards, args.gamma_int)
        int_mean, int_var, int_count = update_running_moments(
            int_mean, int_var, int_count, stream.reshape(-1)
        )
        int_rewards = int_rewards / jnp.sqrt(int_var)

        # ---- 4. Advantages: two heads, bootstrapped from the observation after the rollout
        # The extrinsic return is episodic (cut at every episode end). The intrinsic one is NOT:
        # novelty found in the next episode is still the agent's to find, so an episode end must not
        # zero its value (else the agent would learn that ending an episode, or avoiding the start,
        # is free of exploration cost); the recursion flows from an episode's last step into the
        # next one's first state.
        last_value = get_value(params, next_obs)
        ext_advantages, ext_returns = compute_gae(
            rewards_buf, values_buf[..., 0], dones_buf, last_value[:, 0], args.gamma, args.gae_lambda
        )
        int_advantages, int_returns = compute_gae(
            int_rewards,
            values_buf[..., 1],
            dones_buf,
            last_value[:, 1],
            args.gamma_int,
            args.gae_lambda,
            episodic=False,
        )
        advantages = combine_advantages(
            ext_advantages, int_advantages, args.ext_coef, args.bonus_scale, args.norm_adv_per_head
        )

        # ---- 5. Update: epochs x minibatches, PPO then the predictor on each minibatch
        batch = {
            "obs": obs_buf.reshape(batch_size, obs_dim),
            "actions": actions_buf.reshape(-1),
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "ext_returns": ext_returns.reshape(-1),
            "int_returns": int_returns.reshape(-1),
            "rnd_in": rnd_in,
            "targets": b_targets,
        }
        params, opt_state, predictor_params, rnd_opt_state, stats, key = update(
            params, opt_state, predictor_params, rnd_opt_state, batch, key
        )
        learning_rate = opt_state.hyperparams["learning_rate"]  # the rate this update used

        # ---- 6. Logging
        b_ext_returns, b_values = np.asarray(batch["ext_returns"]), values_buf.reshape(batch_size, 2)
        var_returns = b_ext_returns.var(ddof=1)
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_ext_returns - b_values[:, 0]).var(ddof=1) / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", float(learning_rate), global_step)
        writer.add_scalar("charts/intrinsic_reward", float(int_rewards.mean()), global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", float(value), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.2f}  "
                f"SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "num_episodes": len(episode_returns),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: float(value) for name, value in stats.items()},
    }
    threshold = solve_threshold(args.env_id)
    if threshold is not None:
        # Never solved: the number of finished episodes + 1, so the figure is always finite.
        solved = explore_envs.episodes_to_solve([r for _, r in episode_returns], threshold, 20)
        summary["episodes_to_solve"] = float(len(episode_returns) + 1 if solved is None else solved)
    if args.env_id.startswith("NoisyTV"):
        summary["tv_fraction"] = tv_actions / max(late_actions, 1)
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(
                flax.serialization.to_bytes(
                    {
                        "agent": params,
                        "predictor": predictor_params,
                        "target": target_params,
                        "obs_mean": np.asarray(obs_mean),
                        "obs_var": np.asarray(obs_var),
                    }
                )
            )
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
