"""Conservative Q-learning (CQL(H)), offline, continuous or discrete actions -- the JAX twin.

Each critic minimises its Bellman error plus cql_alpha (log sum_a exp Q(s, a) - Q(s, a_data)): SAC's actor
and an importance-sampled log-sum-exp for Box actions; with --discrete the exact one and a DQN target.
The Box-action target r + gamma (1 - terminal) min(Q1', Q2')(s', a') has no entropy term; a timeout
bootstraps, only a termination cuts. --cql-lagrange tunes cql_alpha by dual gradient ascent.
Paper:  Kumar, Zhou, Tucker & Levine 2020, "Conservative Q-Learning for Offline Reinforcement
        Learning", arXiv:2006.04779; the actor is SAC's (Haarnoja et al. 2018, arXiv:1801.01290).
Twin:   algos/cql_torch.py (`diff algos/cql_torch.py algos/cql_jax.py` shows only the framework).
Docs:   docs/algorithms/cql.md
Run:    python algos/cql_jax.py --seed 1
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
    dataset: str = "pendulum-replay"
    """offline dataset (algos/offline_data.py): pendulum-*, pointmaze-stitch; cartpole-* with --discrete"""
    discrete: bool = False
    """discrete actions (CartPole datasets): a Q network over the actions, exact log-sum-exp, DQN target"""
    total_steps: int = 6_000
    """gradient steps"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the dataset"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    q_lr: float = 1e-3
    """Adam learning rate of the critics (CORL: 3e-4)"""
    policy_lr: float = 3e-4
    """Adam learning rate of the actor, continuous only (CORL: 3e-5)"""
    alpha_lr: float = 3e-4
    """Adam learning rate of log alpha (automatic temperature, continuous only)"""
    alpha: float = 0.2
    """entropy temperature: the fixed value, or the initial value with --autotune (CORL: 1)"""
    autotune: bool = True
    """tune alpha so that the policy's entropy tracks the target -dim(A)"""
    cql_alpha: float = 5.0
    """weight of the conservative penalty, or its initial value with --cql-lagrange (CORL: 10)"""
    cql_lagrange: bool = False
    """tune the penalty weight by dual gradient ascent so that the penalty settles at the threshold"""
    lagrange_threshold: float = 10.0
    """the penalty level tau the tuned weight aims for (--cql-lagrange only); its step size is q_lr"""
    num_sampled_actions: int = 5
    """actions per state from each proposal (uniform, pi(s), pi(s')) in the log-sum-exp (CORL: 10)"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of each critic (CORL: three of 256)"""
    eval_every: int = 1_000
    """gradient steps between evaluations"""
    eval_episodes: int = 10
    """episodes per evaluation (deterministic policy), and for the saved-model evaluation"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_steps=40,
    batch_size=32,
    hidden_size=32,
    num_sampled_actions=2,
    eval_every=20,
    eval_episodes=1,
    save_model=True,
)

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
LOG_EVERY = 100  # gradient steps between logged losses


# ----------------------------------------------------------------------------- pure math
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


def cql_penalty(q_data, q_sampled, log_density):
    """The conservative penalty of CQL(H), mean over the batch of

        log( (1/K) sum_k exp(Q(s, a_k) - log mu_k(a_k)) ) - Q(s, a_data),

    q_data (B,) the critic on the dataset's actions, q_sampled (B, K) on K sampled actions a_k,
    log_density (B, K) the log-density of the proposal mu_k that drew a_k. The first term is an
    importance-sampling estimate of log integral_a exp Q(s, a) da (log sum_a for discrete actions:
    all A actions with log_density = -log A makes it exact). If every a_k is the dataset action and
    log_density = 0 (a point mass on it), it is log(K e^Q / K) = Q and the penalty is 0."""
    k = q_sampled.shape[-1]
    return (jax.nn.logsumexp(q_sampled - log_density, axis=-1) - np.log(k)).mean() - q_data.mean()


def conservative_target(rewards, terminals, next_q1, next_q2, gamma):
    """r + gamma * (1 - terminal) * min(Q1', Q2')(s', a'), a' ~ pi(s'), with no entropy term.

    Only a termination cuts the bootstrap: a timeout is where the collector stopped, and s' is a
    real state to bootstrap from."""
    return rewards + gamma * (1.0 - terminals) * jnp.minimum(next_q1, next_q2)


def max_q_target(next_q_target, rewards, terminals, gamma):
    """The discrete variant's DQN target: r + gamma * (1 - terminal) * max_a' Q_target(s', a')."""
    return rewards + gamma * (1.0 - terminals) * next_q_target.max(-1)


def cql_critic_loss(q, target, q_sampled, log_density, cql_alpha):
    """(Bellman error, penalty) of one critic: mean (Q(s, a) - target)^2 and cql_penalty; the critic
    minimises Bellman error + cql_alpha * penalty. Returns (total, bellman, penalty)."""
    bellman = ((q - target) ** 2).mean()
    penalty = cql_penalty(q, q_sampled, log_density)
    return bellman + cql_alpha * penalty, bellman, penalty


def lagrange_loss(log_cql_alpha, penalty, threshold):
    """The dual loss of the penalty weight, the paper's Lagrange variant with tau = threshold:

        -cql_alpha * (penalty - threshold),  cql_alpha = exp(log_cql_alpha), the penalty held fixed.

    The critic minimises Bellman error + cql_alpha * (penalty - threshold) over Q, and cql_alpha >= 0
    maximises it: gradient descent on this loss raises cql_alpha while the penalty (how far the
    log-sum-exp over sampled actions sits above Q on the data's actions) exceeds the threshold and
    lowers it while the penalty is below. The constant -cql_alpha * threshold does not move Q."""
    return -(jnp.exp(log_cql_alpha) * jax.lax.stop_gradient(penalty - threshold))


def sac_actor_loss(q1, q2, log_prob, alpha):
    """mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a)), a the reparameterised sample."""
    return (alpha * log_prob - jnp.minimum(q1, q2)).mean()


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-alpha * mean(log pi + target_entropy), alpha = exp(log_alpha), log pi held fixed: alpha grows
    while the entropy is below the target and shrinks while it is above."""
    return -(jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy)).mean()


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


class DiscreteQNetwork(nn.Module):
    """Q(s, .): the observation through a hidden-hidden ReLU MLP, one output per action (--discrete)."""

    num_actions: int
    hidden_size: int

    @nn.compact
    def __call__(self, obs):
        x = nn.relu(layer_init(self.hidden_size)(obs))
        x = nn.relu(layer_init(self.hidden_size)(x))
        return layer_init(self.num_actions)(x)


class Actor(nn.Module):
    """Squashed Gaussian policy: a ReLU trunk, then the mean and log std of u, a = scale tanh(u) + bias.
    log std is squashed into [LOG_STD_MIN, LOG_STD_MAX] by a tanh, so it cannot run away."""

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
    """The networks of either variant. Continuous: params = {"actor": ..., "qf": ...}, "qf" holding
    both critics' parameters stacked on a leading axis of 2, applied with one vmap. Discrete:
    params = {"qf": ...}, the one Q network over the actions."""

    def __init__(self, obs_dim, space, hidden_size, discrete):
        self.obs_dim, self.discrete = obs_dim, discrete
        if discrete:
            self.qf = DiscreteQNetwork(int(space.n), hidden_size)
        else:
            self.action_dim = int(np.prod(space.shape))
            self.actor = Actor(self.action_dim, hidden_size)
            self.qf = QNetwork(hidden_size)
            self.action_scale = jnp.asarray((space.high - space.low) / 2.0, dtype=jnp.float32)
            self.action_bias = jnp.asarray((space.high + space.low) / 2.0, dtype=jnp.float32)

    def init(self, key):
        actor_key, qf_key = jax.random.split(key)
        obs = jnp.zeros((1, self.obs_dim))
        if self.discrete:
            return {"qf": self.qf.init(qf_key, obs)}
        actions = jnp.zeros((1, self.action_dim))
        qf_params = jax.vmap(self.qf.init, in_axes=(0, None, None))(jax.random.split(qf_key, 2), obs, actions)
        return {"actor": self.actor.init(actor_key, obs), "qf": qf_params}

    def q_values(self, qf_params, obs, actions):
        """Both critics at once: (2, batch)."""
        return jax.vmap(self.qf.apply, in_axes=(0, None, None))(qf_params, obs, actions)

    def sample(self, actor_params, obs, key):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self.actor.apply(actor_params, obs)
        noise = jax.random.normal(key, mean.shape)
        return sample_squashed(mean, log_std, noise, self.action_scale, self.action_bias)

    def deterministic(self, params, obs):
        """The evaluation action: argmax Q (discrete), or tanh of the actor's mean scaled into the bounds."""
        if self.discrete:
            return self.qf.apply(params["qf"], obs).argmax(-1)
        return jnp.tanh(self.actor.apply(params["actor"], obs)[0]) * self.action_scale + self.action_bias


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError). Returns the
    dataset's info."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("q_lr", args.q_lr > 0, "> 0"),
        ("policy_lr", args.policy_lr > 0, "> 0"),
        ("alpha_lr", args.alpha_lr > 0, "> 0"),
        ("alpha", args.alpha > 0 if args.autotune else args.alpha >= 0, "> 0 (>= 0 with --no-autotune)"),
        ("cql_alpha", args.cql_alpha >= 0, ">= 0 (0: no penalty)"),
        ("lagrange_threshold", abs(args.lagrange_threshold) < float("inf"), "a finite number"),
        ("num_sampled_actions", args.num_sampled_actions >= 1, ">= 1"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "cql_alpha",
            args.cql_alpha > 0 or not args.cql_lagrange,
            "> 0 with --cql-lagrange (it tunes the log)",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    info = offline_data.dataset_info(args.dataset)
    if info["discrete"] and not args.discrete:
        raise ValueError(
            f"--dataset {args.dataset} has discrete actions: pass --discrete (a Q network over actions)"
        )
    if args.discrete and not info["discrete"]:
        raise ValueError(
            f"--discrete was given but {args.dataset} has continuous (Box) actions: drop --discrete"
        )
    return info


def run_episodes(policy, env_id, episodes, seed):
    """`episodes` episodes of a deterministic policy (a function from a batch of observations to a
    batch of actions), one environment each, stepped in lockstep so each step is ONE batched forward
    pass. Episode i is seeded seed + i. Returns the undiscounted returns, shape (episodes,)."""
    envs = [offline_data.make_env(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
    totals, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        actions = policy(obs)
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return totals


def make_networks(obs_dim, space, hidden_size, discrete):
    """The discrete variant's Q network, or the actor and the two critics of the continuous one."""
    return Agent(obs_dim, space, hidden_size, discrete)


def greedy_policy(agent, get_params):
    """Batch of observations -> batch of deterministic actions (argmax Q, or tanh of the actor's mean)."""
    deterministic = jax.jit(agent.deterministic)

    def policy(obs):
        return np.asarray(deterministic(get_params(), obs))

    return policy


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size, discrete):
    """Load the saved parameters into fresh networks; run the deterministic policy."""
    env = offline_data.make_env(env_id)
    agent = make_networks(int(np.prod(env.observation_space.shape)), env.action_space, hidden_size, discrete)
    env.close()
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(agent.init(jax.random.PRNGKey(0)), f.read())
    return run_episodes(greedy_policy(agent, lambda: params), env_id, eval_episodes, seed)


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, data, networks, optimisers
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
    # per-step calls (the evaluation's forward passes) run on the calling thread: speed only
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    # The data: small enough to live on the device whole; each batch is indexed there
    data = offline_data.load_dataset(args.dataset)
    size = len(data["rewards"])
    D = {name: jnp.asarray(data[name]) for name in offline_data.ARRAY_KEYS}
    env = offline_data.make_env(env_id)
    space = env.action_space
    obs_dim = int(np.prod(env.observation_space.shape))
    env.close()

    agent = make_networks(obs_dim, space, args.hidden_size, args.discrete)
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    q_optimizer = optax.adam(args.q_lr)
    state = {"params": params, "qf_target": params["qf"], "q_opt": q_optimizer.init(params["qf"])}
    # the penalty weight: args.cql_alpha, or with --cql-lagrange exp(log_cql_alpha), tuned by dual ascent
    cql_alpha_optimizer = optax.adam(args.q_lr)
    state["log_cql_alpha"] = jnp.asarray(
        np.log(args.cql_alpha) if args.cql_lagrange else 0.0, dtype=jnp.float32
    )
    state["cql_alpha_opt"] = cql_alpha_optimizer.init(state["log_cql_alpha"])

    def penalty_weight(state):
        """The penalty weight of this step's critic loss; the tuned one capped at 1e6 as in CQL's code."""
        return jnp.minimum(jnp.exp(state["log_cql_alpha"]), 1e6) if args.cql_lagrange else args.cql_alpha

    def tune_penalty_weight(state, step_losses):
        """--cql-lagrange: one Adam step of log cql_alpha on lagrange_loss, this step's penalty
        (step_losses["cql_penalty"]; with two critics their mean) held fixed."""
        log_cql_alpha = state["log_cql_alpha"]
        if not args.cql_lagrange:
            return log_cql_alpha, state["cql_alpha_opt"]
        cql_alpha_loss, grad = jax.value_and_grad(lagrange_loss)(
            log_cql_alpha, step_losses["cql_penalty"], args.lagrange_threshold
        )
        updates, cql_alpha_opt = cql_alpha_optimizer.update(grad, state["cql_alpha_opt"])
        log_cql_alpha = optax.apply_updates(log_cql_alpha, updates)
        step_losses.update(cql_alpha=jnp.exp(log_cql_alpha), cql_alpha_loss=cql_alpha_loss)
        return log_cql_alpha, cql_alpha_opt

    if args.discrete:
        # the exact log-sum-exp: every action once, each with the uniform density 1/A
        log_uniform = -float(np.log(space.n))
    else:
        actor_optimizer = optax.adam(args.policy_lr)
        alpha_optimizer = optax.adam(args.alpha_lr)
        action_dim = int(np.prod(space.shape))
        target_entropy = -float(action_dim)
        state["log_alpha"] = jnp.asarray(np.log(args.alpha), dtype=jnp.float32)
        state["actor_opt"] = actor_optimizer.init(params["actor"])
        state["alpha_opt"] = alpha_optimizer.init(state["log_alpha"])
        low, high = jnp.asarray(space.low, dtype=jnp.float32), jnp.asarray(space.high, dtype=jnp.float32)
        # the uniform proposal's log-density on the action box: -sum_i log(high_i - low_i)
        log_uniform = -float(np.log(space.high - space.low).sum())
    policy = greedy_policy(agent, lambda: state["params"])
    N, B = args.num_sampled_actions, args.batch_size

    def discrete_step(state, batch, key):
        """One gradient step of the discrete variant: DQN target, exact log-sum-exp penalty."""
        obs, actions, rewards, next_obs, terminals = batch
        target = max_q_target(agent.qf.apply(state["qf_target"], next_obs), rewards, terminals, args.gamma)

        def q_loss_fn(qf_params):
            q_all = agent.qf.apply(qf_params, obs)
            q = jnp.take_along_axis(q_all, actions[:, None], 1).squeeze(1)
            qf_loss, bellman, penalty = cql_critic_loss(
                q, target, q_all, jnp.full_like(q_all, log_uniform), penalty_weight(state)
            )
            return qf_loss, {
                "qf_loss": qf_loss,
                "bellman_error": bellman,
                "cql_penalty": penalty,
                "q_values": q.mean(),
            }

        q_grads, step_losses = jax.grad(q_loss_fn, has_aux=True)(state["params"]["qf"])
        q_updates, q_opt = q_optimizer.update(q_grads, state["q_opt"])
        qf_params = optax.apply_updates(state["params"]["qf"], q_updates)
        log_cql_alpha, cql_alpha_opt = tune_penalty_weight(state, step_losses)
        # target += tau * (online - target)
        qf_target = optax.incremental_update(qf_params, state["qf_target"], args.tau)
        return {
            "params": {"qf": qf_params},
            "qf_target": qf_target,
            "q_opt": q_opt,
            "log_cql_alpha": log_cql_alpha,
            "cql_alpha_opt": cql_alpha_opt,
        }, step_losses

    def continuous_step(state, batch, key):
        """One gradient step: critics (Bellman + conservative penalty), actor, temperature, targets."""
        obs, actions, rewards, next_obs, terminals = batch
        next_key, pi_key, next_pi_key, uniform_key, actor_key = jax.random.split(key, 5)
        params, log_alpha = state["params"], state["log_alpha"]
        alpha = jnp.exp(log_alpha)
        next_actions, _ = agent.sample(params["actor"], next_obs, next_key)
        next_q = agent.q_values(state["qf_target"], next_obs, next_actions)
        target = conservative_target(rewards, terminals, next_q[0], next_q[1], args.gamma)
        # N actions per state from each proposal: uniform on the box, pi(.|s), pi(.|s')
        rep_obs, rep_next_obs = jnp.repeat(obs, N, 0), jnp.repeat(next_obs, N, 0)
        uniform_actions = low + (high - low) * jax.random.uniform(uniform_key, (B * N, action_dim))
        pi_actions, pi_log_prob = agent.sample(params["actor"], rep_obs, pi_key)
        next_pi_actions, next_pi_log_prob = agent.sample(params["actor"], rep_next_obs, next_pi_key)
        sampled = jnp.concatenate([uniform_actions, pi_actions, next_pi_actions], 0)  # (3 B N, A)
        log_density = jnp.concatenate(
            [jnp.full((B, N), log_uniform), pi_log_prob.reshape(B, N), next_pi_log_prob.reshape(B, N)], 1
        )
        target, sampled, log_density = jax.lax.stop_gradient((target, sampled, log_density))
        obs_3 = jnp.tile(rep_obs, (3, 1))
        to_bk = lambda x: x.reshape(3, B, N).transpose(1, 0, 2).reshape(B, 3 * N)  # noqa: E731 (B, 3N)

        cql_alpha = penalty_weight(state)

        def q_loss_fn(qf_params):
            q = agent.q_values(qf_params, obs, actions)
            q_sampled = agent.q_values(qf_params, obs_3, sampled)
            qf1_loss, bellman1, penalty1 = cql_critic_loss(
                q[0], target, to_bk(q_sampled[0]), log_density, cql_alpha
            )
            qf2_loss, bellman2, penalty2 = cql_critic_loss(
                q[1], target, to_bk(q_sampled[1]), log_density, cql_alpha
            )
            return qf1_loss + qf2_loss, {
                "qf1_loss": qf1_loss,
                "qf2_loss": qf2_loss,
                "bellman_error": (bellman1 + bellman2) / 2,
                "cql_penalty": (penalty1 + penalty2) / 2,
                "q_values": q[0].mean(),
            }

        q_grads, step_losses = jax.grad(q_loss_fn, has_aux=True)(params["qf"])
        q_updates, q_opt = q_optimizer.update(q_grads, state["q_opt"])
        qf_params = optax.apply_updates(params["qf"], q_updates)
        log_cql_alpha, cql_alpha_opt = tune_penalty_weight(state, step_losses)

        def actor_loss_fn(actor_params):
            actions_pi, log_prob = agent.sample(actor_params, obs, actor_key)
            q = agent.q_values(qf_params, obs, actions_pi)
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
        step_losses.update(actor_loss=actor_loss, alpha=alpha, alpha_loss=alpha_loss)

        # target += tau * (online - target)
        qf_target = optax.incremental_update(qf_params, state["qf_target"], args.tau)
        return {
            "params": {"actor": actor_params, "qf": qf_params},
            "qf_target": qf_target,
            "q_opt": q_opt,
            "log_alpha": log_alpha,
            "actor_opt": actor_opt,
            "alpha_opt": alpha_opt,
            "log_cql_alpha": log_cql_alpha,
            "cql_alpha_opt": cql_alpha_opt,
        }, step_losses

    @jax.jit
    def update(state, D, idx, key):
        """len(idx) gradient steps as ONE jitted call (a lax.scan); returns the last step's losses."""

        def one_step(carry, rows):
            state, key = carry
            key, step_key = jax.random.split(key)
            batch = tuple(
                D[k][rows] for k in ("observations", "actions", "rewards", "next_observations", "terminals")
            )  # timeouts bootstrap
            step = discrete_step if args.discrete else continuous_step
            state, step_losses = step(state, batch, step_key)
            return (state, key), step_losses

        (state, key), all_losses = jax.lax.scan(one_step, (state, key), idx)
        return state, jax.tree.map(lambda x: x[-1], all_losses), key

    episode_returns, last_returns = [], np.array([np.nan])
    losses, last_print = {}, 0.0
    start_time = time.time()
    step = 0
    while step < args.total_steps:
        # ---- 2. Update: gradient steps on uniform minibatches of the dataset (timeouts bootstrap)
        # the steps up to the next log or evaluation point, drawn at once and run in one call
        stop = min(
            args.total_steps,
            (step // LOG_EVERY + 1) * LOG_EVERY,
            (step // args.eval_every + 1) * args.eval_every,
        )
        idx = np.random.randint(0, size, size=(stop - step, B))
        state, step_losses, key = update(state, D, idx, key)
        step = stop

        if step % LOG_EVERY == 0 or step == args.total_steps:
            losses = {name: value.item() for name, value in step_losses.items()}
            sps = int(step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar("charts/SPS", sps, step)

        # ---- 3. Evaluation: the deterministic policy, fresh environments seeded seed + 10_000 + i
        if step % args.eval_every == 0 or step == args.total_steps:
            last_returns = run_episodes(policy, env_id, args.eval_episodes, args.seed + 10_000)
            episode_returns += [(step, float(r)) for r in last_returns]
            for r in last_returns:
                writer.add_scalar("eval/episodic_return", r, step)
            writer.add_scalar(
                "eval/normalized_score",
                float(offline_data.normalized_score(args.dataset, last_returns.mean())),
                step,
            )
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>7,d}/{args.total_steps:,d}  eval return {last_returns.mean():8.1f}  "
                f"SPS {int(step / (time.time() - start_time)):5,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 4. Summary
    wall_time = time.time() - start_time
    final_mean_return = float(last_returns.mean())
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": final_mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, final_mean_return)),
        "behaviour_return": float(offline_data.episode_returns(data).mean()),
        "sps": args.total_steps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(state["params"]))
        eval_returns = evaluate(
            model_path, env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size, args.discrete
        )
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
