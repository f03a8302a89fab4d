"""Rainbow: double, dueling, prioritized, 3-step, distributional and noisy DQN, one agent -- the JAX twin.

Papers: Hessel et al. 2017, "Rainbow: Combining Improvements in Deep Reinforcement Learning",
        arXiv:1710.02298; its parts: van Hasselt et al. 2015 (arXiv:1509.06461), Wang et al. 2016
        (arXiv:1511.06581), Schaul et al. 2015 (arXiv:1511.05952), Bellemare et al. 2017
        (arXiv:1707.06887), Fortunato et al. 2017, "Noisy Networks for Exploration" (arXiv:1706.10295).
Twin:   algos/rainbow_torch.py (`diff algos/rainbow_torch.py algos/rainbow_jax.py` shows only the framework).
Docs:   docs/algorithms/rainbow.md
Run:    python algos/rainbow_jax.py --seed 1
"""

import math
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
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 100_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 1
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    learning_rate: float = 1e-3
    """Adam learning rate (Rainbow's Atari value: 6.25e-5)"""
    buffer_size: int = 100_000
    """replay buffer capacity (transitions); the oldest are overwritten first"""
    gamma: float = 0.99
    """discount factor"""
    alpha: float = 0.5
    """prioritisation exponent: P(i) is proportional to p_i^alpha (0: uniform replay)"""
    beta_start: float = 0.4
    """importance-sampling exponent at the start, annealed linearly to 1 over the run"""
    prior_eps: float = 1e-6
    """added to a transition's loss so that no transition gets priority 0"""
    n_step: int = 3
    """rewards summed into one transition before bootstrapping (multi-step returns)"""
    n_atoms: int = 51
    """atoms of the categorical return distribution"""
    v_min: float = -100.0
    """smallest atom (return values below it are clipped onto it; Rainbow's Atari value: -10)"""
    v_max: float = 100.0
    """largest atom (return values above it are clipped onto it; Rainbow's Atari value: 10)"""
    noisy_std: float = 0.5
    """sigma_0 of the factorised Gaussian noise of the noisy layers (they replace epsilon-greedy)"""
    tau: float = 1.0
    """target network update rate: 1.0 is a hard copy, < 1 Polyak averaging"""
    target_network_frequency: int = 500
    """vector-env steps between target network updates"""
    batch_size: int = 128
    """transitions per gradient step"""
    learning_starts: int = 1_000
    """environment steps of uniform-random play before the first gradient step"""
    train_frequency: int = 4
    """vector-env steps between gradient steps"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run's gradient steps (off: Rainbow's is constant)"""
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
    total_timesteps=1500,
    learning_starts=500,
    target_network_frequency=100,
    tau=0.5,
    save_model=True,
    eval_episodes=2,
)


# ----------------------------------------------------------------------------- pure math
def n_step_transition(window, gamma):
    """Fold a window of consecutive one-step transitions (obs, action, reward, next_obs, terminated),
    oldest first, into one: (obs_0, action_0, R, next_obs_k, terminated_k, gamma^k), where
    R = sum_{t<k} gamma^t r_t over the window's k transitions. A window ends early at an episode's
    end: a termination stops the sum (no bootstrap), a truncation bootstraps from its final
    observation with discount gamma^k. Plain python, the same in both twins."""
    ret = 0.0
    for t, (_, _, reward, _, _) in enumerate(window):
        ret += gamma**t * float(reward)
    _, _, _, next_obs, terminated = window[-1]
    return window[0][0], window[0][1], ret, next_obs, float(terminated), gamma ** len(window)


def categorical_projection(next_probs, rewards, dones, gamma, atoms):
    """Project the distribution of r + gamma * (1 - done) * Z(s', a*) back onto the fixed atoms, as
    in algos/c51_jax.py; gamma may be a (B,) array of per-sample discounts gamma^k.

    Each shifted atom Tz_i, clipped to [v_min, v_max], gives its mass p_i to the two support atoms
    around it in proportion to closeness: z_j gets p_i * max(0, 1 - |Tz_i - z_j| / dz)."""
    delta_z = atoms[1] - atoms[0]
    tz = jnp.clip(rewards[:, None] + (gamma * (1.0 - dones))[:, None] * atoms[None, :], atoms[0], atoms[-1])
    weights = jnp.maximum(1.0 - jnp.abs(tz[:, :, None] - atoms[None, None, :]) / delta_z, 0.0)  # (B, i, j)
    return (next_probs[:, :, None] * weights).sum(axis=1)


def weighted_categorical_loss(logits, target_probs, weights):
    """Cross-entropy of the predicted atom distribution (logits of the taken action, (B, N)) against
    the projected target, each scaled by its importance weight, averaged over the batch; returns
    (loss, per-sample cross-entropy), the latter for the new priorities."""
    cross_entropy = -(target_probs * jax.nn.log_softmax(logits, axis=-1)).sum(axis=-1)
    return (weights * cross_entropy).mean(), cross_entropy


def dueling_aggregate(value, advantage):
    """Per atom: V(s) + A(s, a) - mean_a' A(s, a'), value (B, 1, N), advantage (B, A, N) -> (B, A, N)
    logits. Subtracting the mean makes the split into V and A identifiable."""
    return value + advantage - advantage.mean(axis=1, keepdims=True)


def noisy_linear(x, mu_w, sigma_w, mu_b, sigma_b, eps_in, eps_out):
    """Factorised Gaussian noisy layer, weights (in, out): y = x (mu_w + sigma_w * f(eps_in) f(eps_out)^T)
    + mu_b + sigma_b * f(eps_out), with f(e) = sign(e) sqrt(|e|): two noise vectors of sizes in
    and out per forward pass instead of an in x out matrix."""
    f_in = jnp.sign(eps_in) * jnp.sqrt(jnp.abs(eps_in))
    f_out = jnp.sign(eps_out) * jnp.sqrt(jnp.abs(eps_out))
    return x @ (mu_w + sigma_w * f_in[:, None] * f_out[None, :]) + mu_b + sigma_b * f_out


def importance_weights(probs, buffer_len, beta):
    """w_i = (N P(i))^-beta / max_j w_j over the batch: corrects the bias of sampling by priority
    (beta = 1: fully), scaled so that the largest weight is 1 and the step size can only shrink."""
    weights = (buffer_len * probs) ** (-beta)
    return weights / weights.max()


class SumTree:
    """A binary tree whose leaves hold the priorities and whose inner nodes hold the sums of their
    children, in one array: node k has children 2k and 2k + 1, the root is node 1, the leaves are
    nodes capacity .. 2 * capacity - 1. Updating a leaf and drawing a sample both walk one
    root-to-leaf path: O(log N). Plain numpy, the same in both twins (it lives on the host)."""

    def __init__(self, capacity):
        self.capacity = 1 << max(capacity - 1, 1).bit_length()  # a power of two >= capacity
        self.tree = np.zeros(2 * self.capacity, dtype=np.float64)

    def total(self):
        return self.tree[1]

    def update(self, idx, priorities):
        """Set leaves idx (array) to priorities, then recompute their ancestors level by level."""
        nodes = np.asarray(idx) + self.capacity
        self.tree[nodes] = priorities
        nodes = nodes // 2
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            nodes = nodes // 2

    def find(self, values):
        """Leaf index of each value in [0, total): descend left when the value is within the left
        sum, else subtract it and descend right."""
        nodes = np.ones(len(values), dtype=np.int64)
        values = np.array(values, dtype=np.float64)
        while nodes[0] < self.capacity:
            left = 2 * nodes
            go_right = values >= self.tree[left]
            values -= self.tree[left] * go_right
            nodes = left + go_right
        return nodes - self.capacity

    def sample(self, batch_size, rng, size):
        """Stratified: one uniform draw in each of batch_size equal slices of [0, total). Returns
        (indices, priorities); indices are clipped below size against float round-off at the edge."""
        bounds = (np.arange(batch_size) + rng.random(batch_size)) * (self.total() / batch_size)
        idx = np.minimum(self.find(bounds), size - 1)
        return idx, self.tree[idx + self.capacity]


def count_gradient_steps(total_timesteps, num_envs, learning_starts, train_frequency):
    """Gradient steps in a whole run: iteration i (of total_timesteps // num_envs, each a step of
    every env) takes one when i * num_envs > learning_starts and i % train_frequency == 0. The
    annealed learning rate reaches 0 after exactly this many."""
    num_iterations = total_timesteps // num_envs
    return max(0, num_iterations // train_frequency - (learning_starts // num_envs) // train_frequency)


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class NoisyLinear(nn.Module):
    """A linear layer with learned noise scales: fresh factorised noise on every forward pass (from
    the "noise" rng stream) when noisy, the mean weights alone otherwise (deterministic evaluation)."""

    features: int
    sigma_0: float

    @nn.compact
    def __call__(self, x, noisy):
        in_features = x.shape[-1]
        bound = 1.0 / np.sqrt(in_features)
        uniform = lambda key, shape: jax.random.uniform(key, shape, minval=-bound, maxval=bound)
        mu_w = self.param("mu_w", uniform, (in_features, self.features))
        sigma_w = self.param(
            "sigma_w", nn.initializers.constant(self.sigma_0 * bound), (in_features, self.features)
        )
        mu_b = self.param("mu_b", uniform, (self.features,))
        sigma_b = self.param("sigma_b", nn.initializers.constant(self.sigma_0 * bound), (self.features,))
        if not noisy:
            return x @ mu_w + mu_b
        in_key, out_key = jax.random.split(self.make_rng("noise"))
        eps_in, eps_out = (
            jax.random.normal(in_key, (in_features,)),
            jax.random.normal(out_key, (self.features,)),
        )
        return noisy_linear(x, mu_w, sigma_w, mu_b, sigma_b, eps_in, eps_out)


class QNetwork(nn.Module):
    """128-128 ReLU trunk, then noisy dueling heads: V(s) and A(s, a) as logits over n_atoms atoms,
    aggregated into (B, A, N) logits."""

    num_actions: int
    n_atoms: int
    v_min: float
    v_max: float
    sigma_0: float

    @nn.compact
    def __call__(self, obs, noisy=True):
        x = nn.relu(layer_init(128)(obs))
        x = nn.relu(layer_init(128)(x))
        value = NoisyLinear(self.n_atoms, self.sigma_0)(x, noisy).reshape(*obs.shape[:-1], 1, self.n_atoms)
        advantage = NoisyLinear(self.num_actions * self.n_atoms, self.sigma_0)(x, noisy)
        advantage = advantage.reshape(*obs.shape[:-1], self.num_actions, self.n_atoms)
        return dueling_aggregate(value, advantage)

    def q_values(self, obs, noisy=True):
        """Q(s, a) = sum_j p_j(s, a) z_j, the mean of each action's distribution."""
        atoms = jnp.linspace(self.v_min, self.v_max, self.n_atoms)
        return (jax.nn.softmax(self(obs, noisy), axis=-1) * atoms).sum(axis=-1)


@partial(jax.jit, static_argnums=0)
def act(q_network, params, obs, explore, key):
    """Greedy with respect to one noisy draw of the network (the noise is the exploration);
    uniform-random actions while explore is true (the warm-up). Keys split inside; returns (action, key)."""
    key, noise_key, action_key = jax.random.split(key, 3)
    greedy = q_network.apply(params, obs, method="q_values", rngs={"noise": noise_key}).argmax(axis=-1)
    random_actions = jax.random.randint(action_key, (obs.shape[0],), 0, q_network.num_actions)
    return jnp.where(explore, random_actions, greedy), key


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
    last observation is infos["final_obs"][i]. A truncated transition bootstraps from that one."""
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
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("buffer_size", args.buffer_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("alpha", args.alpha >= 0, ">= 0 (0: uniform replay)"),
        ("beta_start", 0 <= args.beta_start <= 1, "in [0, 1]"),
        ("prior_eps", args.prior_eps > 0, "> 0"),
        ("n_step", args.n_step >= 1, ">= 1 (1: the one-step target)"),
        ("n_atoms", args.n_atoms >= 2, ">= 2"),
        ("v_min", math.isfinite(args.v_min), "finite"),
        ("v_max", math.isfinite(args.v_max), "finite"),
        ("noisy_std", args.noisy_std >= 0, ">= 0"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("target_network_frequency", args.target_network_frequency >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("train_frequency", args.train_frequency >= 1, ">= 1"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("v_max", args.v_max > args.v_min, "> --v-min"),
        ("buffer_size", args.buffer_size >= args.batch_size, ">= --batch-size"),
        ("learning_starts", args.learning_starts >= args.batch_size, ">= --batch-size"),
        ("total_timesteps", args.total_timesteps > args.learning_starts, "> --learning-starts"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(space).__name__} action space; this script is "
            f"for Discrete actions. For continuous actions use algos/sac_jax.py, "
            f"algos/td3_jax.py or algos/ddpg_jax.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed, n_atoms, v_min, v_max):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy, noise off."""
    env = gym.make(env_id)
    q_network = QNetwork(int(env.action_space.n), n_atoms, v_min, v_max, 0.0)
    dummy = jnp.zeros((1, int(np.prod(env.observation_space.shape))))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(q_network.init(jax.random.PRNGKey(0), dummy, False), f.read())
    greedy = jax.jit(lambda params, obs: q_network.apply(params, obs, False, method="q_values").argmax(-1))
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
    # ---- 1. Setup: seeding, environments, networks, optimiser, prioritised replay buffer
    num_iterations = args.total_timesteps // args.num_envs
    num_gradient_steps = count_gradient_steps(
        args.total_timesteps, args.num_envs, args.learning_starts, args.train_frequency
    )
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # One small jitted call per env step: run it inline on this thread rather than hand it to XLA's
    # worker thread and wait for it (the counterpart of the torch twin's single intra-op thread).
    # Read when the CPU backend starts, so it must come before the first JAX operation.
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)  # prioritised replay sampling

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    q_network = QNetwork(
        int(envs.single_action_space.n), args.n_atoms, args.v_min, args.v_max, args.noisy_std
    )
    key, init_key = jax.random.split(key)
    params = q_network.init(init_key, jnp.zeros((1, obs_dim)), False)
    target_params = params
    # the step size: constant, or linear from learning_rate to 0 over the gradient steps (anneal_lr)
    learning_rate = (
        optax.linear_schedule(args.learning_rate, 0.0, max(num_gradient_steps, 1))
        if args.anneal_lr
        else args.learning_rate
    )
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate))
    opt_state = optimizer.init(params)
    atoms = jnp.linspace(args.v_min, args.v_max, args.n_atoms)

    def loss_fn(params, target_params, obs, actions, rewards, next_obs, dones, discounts, weights, key):
        rows = jnp.arange(args.batch_size)
        select_key, target_key, online_key = jax.random.split(key, 3)
        # double: the online network selects the next action, the target network scores it
        next_actions = q_network.apply(
            params, next_obs, method="q_values", rngs={"noise": select_key}
        ).argmax(axis=-1)
        next_probs = jax.nn.softmax(
            q_network.apply(target_params, next_obs, rngs={"noise": target_key}), axis=-1
        )
        target_probs = categorical_projection(
            next_probs[rows, next_actions], rewards, dones, discounts, atoms
        )
        logits = q_network.apply(params, obs, rngs={"noise": online_key})[rows, actions]
        loss, cross_entropy = weighted_categorical_loss(logits, jax.lax.stop_gradient(target_probs), weights)
        q_taken = (jax.nn.softmax(logits, axis=-1) * atoms).sum(axis=-1)
        return loss, (q_taken.mean(), cross_entropy)

    @jax.jit
    def update(params, target_params, opt_state, key, *batch):
        """One gradient step as one jitted call: noise draws, target, loss, gradient, clip and Adam."""
        key, loss_key = jax.random.split(key)
        (loss, (q_mean, cross_entropy)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, target_params, *batch, loss_key
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, q_mean, cross_entropy, key

    soft_update = jax.jit(
        lambda params, target_params: optax.incremental_update(params, target_params, args.tau)
    )

    # buffers on the host; each sampled batch moves to the device
    # Replay buffer: a ring of preallocated arrays of n-step transitions. next_obs holds the true
    # observation n steps on (final_obs at an episode end), dones the `terminated` flag only, and
    # discounts gamma^k for the k rewards summed into the transition.
    obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    next_obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    actions_rb = np.zeros(args.buffer_size, dtype=np.int32)
    rewards_rb = np.zeros(args.buffer_size, dtype=np.float32)
    dones_rb = np.zeros(args.buffer_size, dtype=np.float32)
    discounts_rb = np.zeros(args.buffer_size, dtype=np.float32)
    rb_pos, rb_size = 0, 0
    tree, max_priority = SumTree(args.buffer_size), 1.0  # new transitions get the largest priority so far
    windows = [[] for _ in range(args.num_envs)]  # the last n one-step transitions of each env

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print, num_updates = 0, 0.0, 0
    losses = {"loss": float("nan"), "q_values": float("nan")}
    start_time = time.time()
    obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Act: greedy on one noisy draw of the network, uniform-random during the warm-up
        global_step += args.num_envs
        action, key = act(q_network, params, obs, global_step <= args.learning_starts, key)
        action = np.asarray(action)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        ep_return += reward
        ep_length += 1
        next_obs = np.asarray(next_obs, dtype=np.float32)

        # ---- 3. Store: an ended episode's true last observation is final_obs, not the reset one
        real_next_obs = transition_next_obs(next_obs, infos)
        for i in range(args.num_envs):
            windows[i].append((obs[i], action[i], reward[i], real_next_obs[i], terminated[i]))
            ended = terminated[i] or truncated[i]
            # a full window gives one n-step transition; at an episode's end every shorter tail does too
            while len(windows[i]) == args.n_step or (ended and windows[i]):
                transition = n_step_transition(windows[i], args.gamma)
                (
                    obs_rb[rb_pos],
                    actions_rb[rb_pos],
                    rewards_rb[rb_pos],
                    next_obs_rb[rb_pos],
                    dones_rb[rb_pos],
                    discounts_rb[rb_pos],
                ) = transition
                tree.update(np.array([rb_pos]), np.array([max_priority**args.alpha]))
                rb_pos, rb_size = (rb_pos + 1) % args.buffer_size, min(rb_size + 1, args.buffer_size)
                windows[i].pop(0)
        obs = next_obs

        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-20:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        # ---- 4. Update: one gradient step on a prioritised minibatch every train_frequency steps
        if global_step > args.learning_starts:
            if iteration % args.train_frequency == 0:
                b, priorities = tree.sample(args.batch_size, rng, rb_size)
                beta = min(
                    1.0, args.beta_start + (1.0 - args.beta_start) * global_step / args.total_timesteps
                )
                b_weights = importance_weights(priorities / tree.total(), rb_size, beta).astype(np.float32)
                params, opt_state, loss, q_mean, cross_entropy, key = update(
                    params,
                    target_params,
                    opt_state,
                    key,
                    obs_rb[b],
                    actions_rb[b],
                    rewards_rb[b],
                    next_obs_rb[b],
                    dones_rb[b],
                    discounts_rb[b],
                    b_weights,
                )
                new_priorities = np.asarray(cross_entropy).astype(np.float64) + args.prior_eps
                tree.update(b, new_priorities**args.alpha)
                max_priority = max(max_priority, float(new_priorities.max()))
                num_updates += 1
                if num_updates % 100 == 0:
                    losses = {"loss": float(loss), "q_values": float(q_mean)}
                    sps = int(global_step / (time.time() - start_time))
                    for name, value in losses.items():
                        writer.add_scalar(f"losses/{name}", value, global_step)
                    writer.add_scalar("charts/beta", beta, global_step)
                    writer.add_scalar("charts/SPS", sps, global_step)

            # ---- 5. Target network: hard copy (tau = 1) or Polyak average every C steps
            if iteration % args.target_network_frequency == 0:
                target_params = soft_update(params, target_params)

        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            sps = int(global_step / (time.time() - start_time))
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.1f}  "
                f"SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 6. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    if num_updates > 0:
        losses = {"loss": float(loss), "q_values": float(q_mean)}
    writer.add_scalar("charts/SPS", int(global_step / wall_time), global_step)
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "num_updates": num_updates,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(params))
        eval_returns = evaluate(
            model_path,
            args.env_id,
            args.eval_episodes,
            args.seed + 10_000,
            args.n_atoms,
            args.v_min,
            args.v_max,
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
