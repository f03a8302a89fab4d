"""GAIL: generative adversarial imitation learning, PPO on a learned reward -- the JAX twin.

A discriminator D(s, a) tells the learner's pairs (label 1) from the expert's (label 0); PPO trains the
policy on the reward -log D(s, a). The environment's reward is only logged, as the true return.
Papers: Ho & Ermon 2016, "Generative Adversarial Imitation Learning", arXiv:1606.03476; Kostrikov
        et al. 2018, "Discriminator-Actor-Critic: Addressing Sample Inefficiency and Reward Bias in
        Adversarial Imitation Learning", arXiv:1809.02925 (the survival bias); Schulman et al. 2017,
        "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Twin:   algos/gail_torch.py (`diff algos/gail_torch.py algos/gail_jax.py` shows only the framework).
Docs:   docs/algorithms/gail.md
Run:    python algos/gail_jax.py --seed 1
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

import offline_data


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    dataset: str = "cartpole-expert"
    """offline_data dataset whose (observation, action) pairs are the expert's demonstrations"""
    expert_episodes: int = 0
    """use only the first k expert trajectories (0: all of them)"""
    total_timesteps: int = 250_000
    """total environment steps, summed over the vector envs (CleanRL's ppo.py: 500k)"""
    num_envs: int = 8
    """parallel environments, gymnasium SyncVectorEnv with same-step autoreset (CleanRL: 4)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the policy and value networks (CleanRL's ppo.py: 2.5e-4)"""
    anneal_lr: bool = True
    """anneal the policy's learning rate linearly to 0 over the run"""
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
    disc_learning_rate: float = 3e-4
    """Adam learning rate of the discriminator"""
    disc_steps: int = 4
    """discriminator gradient steps per PPO iteration (each on a fresh learner and expert minibatch)"""
    disc_batch_size: int = 256
    """learner pairs and expert pairs (as many of each) per discriminator step"""
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
    total_timesteps=2048,
    num_envs=4,
    num_steps=128,
    expert_episodes=2,
    disc_steps=2,
    disc_batch_size=64,
    save_model=True,
    eval_episodes=2,
)


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


def discriminator_inputs(obs, actions, num_actions):
    """The discriminator's input: the observation with the one-hot action appended, (B, obs + A)."""
    one_hot = jax.nn.one_hot(actions, num_actions, dtype=obs.dtype)
    return jnp.concatenate([obs, one_hot], axis=-1)


def discriminator_loss(learner_logits, expert_logits):
    """Binary cross-entropy with the convention of Ho & Ermon: LEARNER pairs are label 1, EXPERT
    pairs label 0, and D = sigmoid(logit) is the probability that a pair is the learner's:
        loss = mean over learner of -log D  +  mean over expert of -log(1 - D)
             = mean softplus(-logit_learner) + mean softplus(logit_expert)
    (softplus form: exact and finite for any logit). Each half is a mean, so the two sets weigh the
    same whatever their sizes. At the optimum D*(s, a) = rho_learner / (rho_learner + rho_expert)."""
    return jax.nn.softplus(-learner_logits).mean() + jax.nn.softplus(expert_logits).mean()


def gail_reward(logits):
    """The learner's reward -log D(s, a) = softplus(-logit): near 0 where the discriminator is sure
    the pair is the learner's (D -> 1), large where it takes it for the expert's (D -> 0).
    Always positive, so every step alive earns something: the survival bias (docs/algorithms/gail.md)."""
    return jax.nn.softplus(-logits)


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head; the actor, the critic and the discriminator are three MLPs."""

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
        jitted call: splitting it outside would cost a second dispatch per step."""
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


class Discriminator(nn.Module):
    """64-64 tanh MLP on (observation, one-hot action) -> one logit; D = sigmoid(logit) is the
    probability that the pair is the learner's (label 1), not the expert's (label 0)."""

    num_actions: int

    @nn.compact
    def __call__(self, obs, actions):
        return MLP(out_dim=1, head_std=1.0)(discriminator_inputs(obs, actions, self.num_actions)).squeeze(-1)


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
        ("expert_episodes", args.expert_episodes >= 0, ">= 0 (0 = all)"),
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
        ("disc_learning_rate", args.disc_learning_rate >= 0, ">= 0 (0 freezes the discriminator)"),
        ("disc_steps", args.disc_steps >= 1, ">= 1"),
        ("disc_batch_size", args.disc_batch_size >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size}",
        ),
        ("total_timesteps", args.total_timesteps >= batch_size, f">= one rollout of {batch_size} steps"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(space).__name__} action space; this script is "
            f"for Discrete actions and there is no continuous-action GAIL script here "
            f"(algos/ppo_continuous_jax.py is the PPO one would build it on)"
        )
    data_env = offline_data.dataset_info(args.dataset)["env_id"]
    if data_env != args.env_id:
        raise ValueError(f"--dataset {args.dataset!r} was collected on {data_env}, not {args.env_id}")


def load_expert_pairs(dataset, expert_episodes):
    """The expert's (observation, action) pairs, from the first expert_episodes trajectories (0: all)."""
    data = offline_data.load_dataset(dataset)
    bounds = offline_data.episode_bounds(data)
    if expert_episodes > len(bounds):
        raise ValueError(
            f"--expert-episodes must be <= {len(bounds)}: {dataset} holds {len(bounds)} trajectories "
            f"(got {expert_episodes})"
        )
    end = bounds[expert_episodes - 1][1] if expert_episodes else len(data["actions"])
    return data["observations"][:end].astype(np.float32), data["actions"][:end].astype(np.int64)


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
    # ---- 1. Setup: expert pairs, run directory, seeding, environments, networks, storage
    check_args(args)
    expert_obs_np, expert_actions_np = load_expert_pairs(args.dataset, args.expert_episodes)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
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

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions)
    key, init_key, disc_key = jax.random.split(key, 3)
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
    disc = Discriminator(num_actions)
    disc_params = disc.init(disc_key, jnp.zeros((1, obs_dim)), jnp.zeros((1,), dtype=jnp.int32))
    disc_optimizer = optax.adam(args.disc_learning_rate, eps=1e-5)
    disc_opt_state = disc_optimizer.init(disc_params)
    expert_obs = jnp.asarray(expert_obs_np)
    expert_actions = jnp.asarray(expert_actions_np, dtype=jnp.int32)
    num_expert = len(expert_actions_np)
    expert = offline_data.expert_policy(args.env_id)  # the scripted expert: only for the agreement log

    def disc_loss_fn(disc_params, learner_obs, learner_actions, expert_obs, expert_actions):
        learner_logits = disc.apply(disc_params, learner_obs, learner_actions)
        expert_logits = disc.apply(disc_params, expert_obs, expert_actions)
        d_loss = discriminator_loss(learner_logits, expert_logits)
        # accuracy on each set: learner pairs called learner (D > 0.5), expert pairs called expert
        stats = {
            "disc_loss": d_loss,
            "disc_learner_acc": (learner_logits > 0).mean(),
            "disc_expert_acc": (expert_logits < 0).mean(),
        }
        return d_loss, stats

    @jax.jit
    def disc_update(disc_params, disc_opt_state, b_obs, b_actions, key):
        """disc_steps discriminator steps (one lax.scan), then the learned reward -log D of every
        pair of the rollout with the updated discriminator, as one jitted call."""

        def disc_step(carry, step_key):
            disc_params, disc_opt_state = carry
            learner_key, expert_key = jax.random.split(step_key)
            learner_idx = jax.random.randint(learner_key, (args.disc_batch_size,), 0, batch_size)
            expert_idx = jax.random.randint(expert_key, (args.disc_batch_size,), 0, num_expert)
            grads, stats = jax.grad(disc_loss_fn, has_aux=True)(
                disc_params,
                b_obs[learner_idx],
                b_actions[learner_idx],
                expert_obs[expert_idx],
                expert_actions[expert_idx],
            )
            updates, disc_opt_state = disc_optimizer.update(grads, disc_opt_state, disc_params)
            return (optax.apply_updates(disc_params, updates), disc_opt_state), stats

        key, *step_keys = jax.random.split(key, args.disc_steps + 1)
        (disc_params, disc_opt_state), stats = jax.lax.scan(
            disc_step, (disc_params, disc_opt_state), jnp.stack(step_keys)
        )
        disc_rewards = gail_reward(disc.apply(disc_params, b_obs, b_actions))
        return disc_params, disc_opt_state, disc_rewards, jax.tree.map(jnp.mean, stats), key

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
        """The whole PPO update, epochs x minibatches, as one jitted call (two nested lax.scans)."""

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
    bootstrap_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout (the environment reward is only counted for the log: the TRUE return)
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            action, logp, value, key = agent.act(params, next_obs, key)
            action, logp, value = jax.device_get((action, logp, value))  # one host transfer, not three
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action)
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. The learned reward of this step is only known after the discriminator's
            # update, so gamma * V(final_obs) is kept apart here and added to it below; the done
            # flag then cuts the recursion as for a termination (whose bootstrap is 0).
            bootstrap = np.zeros(args.num_envs, dtype=np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = np.stack(infos["final_obs"][only_truncated]).astype(np.float32)
                bootstrap[only_truncated] = args.gamma * np.asarray(get_value(params, final_obs))
            bootstrap_buf[step] = bootstrap
            dones_buf[step] = done
            next_obs = np.asarray(obs, dtype=np.float32)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Discriminator: disc_steps gradient steps, each on disc_batch_size learner pairs from
        # this rollout (label 1) and as many expert pairs (label 0), drawn with replacement
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_actions = actions_buf.reshape(-1)
        # imitation check (logged, never learned from): the fraction of the learner's sampled
        # actions that the scripted expert would also take in the same states
        expert_agreement = float(np.mean(expert(b_obs) == b_actions))
        # ---- 4. Reward: -log D(s, a) with the discriminator AFTER this iteration's update (Ho &
        # Ermon's Algorithm 1 order). No normalisation and no clipping: softplus(-logit) is finite
        # and >= 0, and its scale (about log 2 = 0.69 when D is unsure) suits the value clip.
        disc_params, disc_opt_state, disc_rewards, disc_stats, key = disc_update(
            disc_params, disc_opt_state, b_obs, b_actions, key
        )
        disc_rewards = disc_rewards.reshape(args.num_steps, args.num_envs)
        last_value = get_value(params, next_obs)
        rewards_buf = disc_rewards + bootstrap_buf
        # ---- 5. Advantages (bootstrap from the observation after the rollout)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 6. Update: PPO, epochs x minibatches over the flattened batch
        batch = {
            "obs": b_obs,
            "actions": b_actions,
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values_buf.reshape(-1),
        }
        params, opt_state, stats, key = update(params, opt_state, batch, key)
        learning_rate = opt_state[1].hyperparams["learning_rate"]  # the rate this update used

        stats = {name: float(value) for name, value in stats.items()}
        stats.update(
            {name: float(value) for name, value in disc_stats.items()}, disc_reward=float(disc_rewards.mean())
        )
        b_returns, b_values = np.asarray(batch["returns"]), batch["values"]
        var_returns = b_returns.var(ddof=1)
        explained_var = np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", float(learning_rate), global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/expert_agreement", expert_agreement, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  true return(20) {mean_recent:7.1f}  "
                f"D acc {stats['disc_learner_acc']:.2f}/{stats['disc_expert_acc']:.2f}  SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary
    envs.close()
    wall_time = time.time() - start_time
    final_mean_return = float(np.mean(recent)) if recent else float("nan")
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": final_mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, final_mean_return)),
        "expert_agreement": expert_agreement,
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": stats,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(params))
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, seed=args.seed + 10_000)
        for i, r in enumerate(eval_returns):
            writer.add_scalar("eval/episodic_return", r, i)
        writer.add_scalar(
            "eval/normalized_score",
            float(offline_data.normalized_score(args.dataset, np.mean(eval_returns))),
            0,
        )
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
