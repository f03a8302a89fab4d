"""MuZero: planning with a learned latent model (representation, dynamics, prediction) -- the JAX twin.
A tree search in the learned latent space picks the actions; its visits and values are the targets.

Paper: Schrittwieser et al. 2020, "Mastering Atari, Go, Chess and Shogi by Planning with a Learned
       Model", arXiv:1911.08265 (Nature 588).
Twin:  algos/muzero_torch.py (`diff` the two files: only the framework and the search library differ;
       mctx.muzero_policy here, a batched MCTS of our own there, the same PUCT rule and the same tree-wide
       min-max Q normalisation).
Docs:  docs/algorithms/muzero.md
Run:   python algos/muzero_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial

import flax
import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import mctx
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
    """gymnasium environment id (discrete actions, flat observations)"""
    total_timesteps: int = 100_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 16
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset); one batched search per step"""
    num_simulations: int = 16
    """MCTS simulations per search (each: one selection path, one model call); the paper's Atari: 50"""
    unroll_steps: int = 5
    """K: steps the dynamics network is unrolled in training"""
    td_steps: int = 100
    """n: real rewards in each value target before a stored search value bootstraps it (Atari: 10)"""
    gamma: float = 0.997
    """discount factor"""
    learning_rate: float = 1e-3
    """Adam learning rate (the pseudocode's Atari: SGD, momentum 0.9, from 0.05, weight decay 1e-4)"""
    batch_size: int = 128
    """trajectory windows per gradient step (the paper's Atari: 1024)"""
    buffer_size: int = 100_000
    """replay capacity in transitions (buffer_size // num_envs rows of num_envs streams)"""
    learning_starts: int = 2_000
    """environment steps before the first gradient step (each env's stream must then hold a window)"""
    gradient_steps: int = 4
    """gradient steps after every vector-env step once learning has started"""
    hidden_size: int = 64
    """width of the hidden layer of each network"""
    latent_size: int = 32
    """size of the latent state (min-max scaled to [0, 1])"""
    support_size: int = 20
    """value and reward: categorical over the integers -support_size..support_size of h(x) (Atari: 300)"""
    value_loss_coef: float = 0.25
    """weight of the value loss (the paper's 0.25 of MuZero Reanalyze; plain MuZero's is 1)"""
    pb_c_init: float = 1.25
    """c1 of the PUCT rule"""
    pb_c_base: float = 19652.0
    """c2 of the PUCT rule"""
    min_q_range: float = 0.01
    """smallest range of the min-max Q normalisation (EfficientZero's 0.01; MuZero's pseudocode: none)"""
    dirichlet_alpha: float = 0.25
    """Dirichlet concentration of the root exploration noise"""
    dirichlet_fraction: float = 0.25
    """share of the Dirichlet noise in the root prior (training only)"""
    max_grad_norm: float = 5.0
    """global gradient-norm clip (the pseudocode clips none)"""
    scale_obs: bool = True
    """map each observation entry with finite declared bounds onto [-1, 1] (unbounded ones unchanged)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model (argmax of the visit counts)"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_timesteps=480,
    num_envs=4,
    num_simulations=3,
    unroll_steps=2,
    td_steps=3,
    learning_starts=200,
    batch_size=16,
    gradient_steps=1,
    save_model=True,
    eval_episodes=2,
)

EPS = 0.001  # epsilon of the value transform h


# ----------------------------------------------------------------------------- pure math
def h(x, eps=EPS):
    """The MuZero value/reward transform h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x: squashes large
    returns so one categorical support covers them (Pohlen et al. 2018, arXiv:1805.11593)."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def h_inv(y, eps=EPS):
    """The exact inverse of h: solve the quadratic in sqrt(|x| + 1)."""
    # (sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps), rationalised to avoid the float32 cancellation
    root = 2.0 * (jnp.abs(y) + 1.0 + eps) / (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(y) + 1.0 + eps)) + 1.0)
    return jnp.sign(y) * (root**2 - 1.0)


def scalar_to_support(x, support_size):
    """Two-hot projection of h(x) onto the integers -support_size..support_size: the two nearest
    atoms share the mass so that the distribution's mean is exactly h(x) (clipped to the support)."""
    y = jnp.clip(h(x), -support_size, support_size)
    low = jnp.minimum(
        jnp.floor(y), support_size - 1
    )  # the lower atom; y = support_size puts all mass on the top one
    upper_weight = (y - low)[..., None]
    low_index = (low + support_size).astype(jnp.int32)
    return (
        jax.nn.one_hot(low_index, 2 * support_size + 1) * (1.0 - upper_weight)
        + jax.nn.one_hot(low_index + 1, 2 * support_size + 1) * upper_weight
    )


def support_to_scalar(logits, support_size):
    """Expected atom under softmax(logits), mapped back through h_inv."""
    atoms = jnp.arange(-support_size, support_size + 1, dtype=logits.dtype)
    return h_inv((jax.nn.softmax(logits, axis=-1) * atoms).sum(-1))


def obs_scaling(low, high):
    """Per-entry (centre, half_width) that map an observation entry with finite bounds [low, high] onto
    [-1, 1] as (obs - centre) / half_width; an unbounded (or degenerate, low = high) entry gets centre 0
    and half-width 1 (it passes unchanged). Host-side numpy, the same in both twins. CartPole-v1
    declares x in +-4.8 and theta in +-0.419 rad (twice its termination limits) and leaves both
    velocities unbounded: raw, the angle the policy must read spans one eleventh of the position's
    range; scaled, the same range."""
    bounded = np.isfinite(low) & np.isfinite(high) & (high > low)
    low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)  # unbounded: the identity
    return ((high + low) / 2.0).astype(np.float32), ((high - low) / 2.0).astype(np.float32)


def scale_latent(s):
    """Min-max scale each latent state to [0, 1] (the paper's hidden-state normalisation)."""
    s_min = s.min(axis=-1, keepdims=True)
    s_max = s.max(axis=-1, keepdims=True)
    return (s - s_min) / (s_max - s_min + 1e-5)


def scale_gradient(x, scale):
    """Identity forward, gradient multiplied by scale backward (the paper halves the gradient that
    flows into the dynamics network through each unrolled latent state)."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def n_step_targets(rewards, values, terminated, truncated, bootstrap_values, gamma, td_steps, unroll_steps):
    """Targets for the K + 1 positions of a window that starts at a sampled step t.

    rewards, terminated, truncated, bootstrap_values: (B, K + n) for steps t .. t+K+n-1; values:
    (B, K + n + 1) the stored root values of the search at steps t .. t+K+n. Value target at
    position k: z_k = sum_{i<n} gamma^i r_{t+k+i} + gamma^n v_{t+k+n}, cut at an episode end: a
    termination ends the sum (no bootstrap), a truncation adds gamma^{i+1} times bootstrap_values
    (the value of the true last observation) and ends it. Past the end of the sampled episode the
    model sits in an absorbing state: value and reward targets 0 after a termination; after a
    truncation the task goes on, so those positions are masked instead.
    Returns value_targets (B, K+1), reward_targets (B, K) for the rewards r_{t+k-1} predicted at
    unroll step k = 1..K, alive (B, K+1: same episode as step t; the policy mask), value_mask
    (B, K+1) and reward_mask (B, K)."""
    done = jnp.maximum(terminated, truncated)
    keep = 1.0 - done  # 0 at a step that ends the episode
    ones = jnp.ones_like(done[:, :1])
    alive = jnp.cumprod(jnp.concatenate([ones, keep], 1), 1)  # alive[:, j]: no end before step j
    untruncated = jnp.cumprod(jnp.concatenate([ones, 1.0 - truncated], 1), 1)  # no truncation before step j
    # All K + 1 positions at once: column k of step i reads step t+k+i, with the same operations in
    # the same order as a loop over k (torch gives bit-identical targets; XLA's fusion may round a last
    # digit differently), in n array steps instead of (K + 1) n. The per-step reward (with a
    # truncation's bootstrap) and the survival factor are elementwise, so they are computed once for
    # the window, not once per column slice: the same values bit for bit, in fewer small operations
    # (docs/algorithms/muzero.md, Speed).
    positions = unroll_steps + 1
    step_reward = rewards + gamma * truncated * bootstrap_values  # what step j adds to the sum
    z = jnp.zeros_like(rewards[:, :positions])
    running = alive[:, :positions]
    discount = 1.0
    for i in range(td_steps):
        j = slice(i, i + positions)
        z = z + running * discount * step_reward[:, j]
        running = running * keep[:, j]
        discount *= gamma
    value_targets = z + running * discount * values[:, td_steps : td_steps + positions]
    reward_targets = rewards[:, :unroll_steps] * alive[:, :unroll_steps]
    return (
        value_targets,
        reward_targets,
        alive[:, : unroll_steps + 1],
        untruncated[:, : unroll_steps + 1],
        untruncated[:, :unroll_steps],
    )


def muzero_loss(
    policy_logits,
    value_logits,
    reward_logits,
    target_policies,
    target_values,
    target_rewards,
    policy_mask,
    value_mask,
    reward_mask,
    support_size,
    value_loss_coef,
):
    """Cross-entropies of the K + 1 predictions against the targets, the value and reward targets
    projected two-hot onto the support of h. policy_logits (B, K+1, A), value_logits (B, K+1, S),
    reward_logits (B, K, S). Step 0 weighs 1, each unrolled step 1/K (the paper's gradient scale),
    then the sum is averaged over the batch. Returns (loss, policy_loss, value_loss, reward_loss)."""
    unroll_steps = reward_logits.shape[1]
    weights = jnp.full((unroll_steps + 1,), 1.0 / unroll_steps)
    weights = weights.at[0].set(1.0)
    policy_ce = -(target_policies * jax.nn.log_softmax(policy_logits, -1)).sum(-1)
    value_ce = -(scalar_to_support(target_values, support_size) * jax.nn.log_softmax(value_logits, -1)).sum(
        -1
    )
    reward_ce = -(
        scalar_to_support(target_rewards, support_size) * jax.nn.log_softmax(reward_logits, -1)
    ).sum(-1)
    policy_loss = (policy_ce * policy_mask * weights).sum(1).mean()
    value_loss = (value_ce * value_mask * weights).sum(1).mean()
    reward_loss = (reward_ce * reward_mask * weights[1:]).sum(1).mean()
    return policy_loss + value_loss_coef * value_loss + reward_loss, policy_loss, value_loss, reward_loss


def puct_scores(prior_probs, child_visits, normalised_q, parent_visits, pb_c_init, pb_c_base):
    """The PUCT rule: Q + P sqrt(N) / (1 + n) (c1 + log((N + c2 + 1) / c2)), with N the parent's
    visits, n each child's, Q min-max normalised (0 for an unvisited child). Search takes its argmax.
    mctx.muzero_action_selection computes the same scores inside the jitted search."""
    pb_c = pb_c_init + jnp.log((parent_visits + pb_c_base + 1.0) / pb_c_base)
    return normalised_q + jnp.sqrt(parent_visits)[..., None] * pb_c[..., None] * prior_probs / (
        child_visits + 1.0
    )


def normalise_q(q, visited, q_min, q_max, min_range):
    """Min-max normalisation of Q with the smallest and largest Q of the tree's visited edges; an
    unvisited child scores 0 (the same as the worst visited one). The range is at least min_range
    (as in EfficientZero): otherwise two nearly equal Q-values of an untrained model are stretched
    to 0 and 1 and the search follows their noise."""
    scale = jnp.maximum(q_max - q_min, min_range)[..., None]
    return jnp.where(visited, (q - jnp.where(visited, q_min[..., None], 0.0)) / scale, 0.0)


def visit_policy(visit_counts, temperature):
    """The acting distribution counts^(1/T) / sum counts^(1/T); T -> 0 is the argmax."""
    logits = jnp.log(visit_counts) / temperature
    return jax.nn.softmax(logits - logits.max(-1, keepdims=True), -1)


def temperature_schedule(progress):
    """Visit-count temperature by training progress (the paper's Atari schedule, in fractions):
    1.0 for the first half, 0.5 to three quarters, 0.25 after."""
    return 1.0 if progress < 0.5 else 0.5 if progress < 0.75 else 0.25


# ----------------------------------------------------------------------------- the search
def min_max_qtransform(tree, node_index, *, min_range):
    """mctx qtransform (called on one unbatched tree): Q of the node's children, min-max normalised
    with the smallest and largest Q over all visited edges of the tree, as run_mcts in the torch
    twin does (mctx's default normalises by the parent and siblings only)."""
    visited_edges = tree.children_visits > 0
    edge_q = tree.children_rewards + tree.children_discounts * tree.children_values
    q_min = jnp.where(visited_edges, edge_q, jnp.inf).min()
    q_max = jnp.where(visited_edges, edge_q, -jnp.inf).max()
    return normalise_q(
        tree.qvalues(node_index), tree.children_visits[node_index] > 0, q_min, q_max, min_range
    )


def run_mcts(
    recurrent_fn,
    root_latent,
    root_logits,
    root_value,
    num_simulations,
    gamma,
    pb_c_init,
    pb_c_base,
    min_q_range,
    key,
    dirichlet_fraction=0.0,
    dirichlet_alpha=0.25,
):
    """A batched MCTS in latent space, one tree per environment: mctx.muzero_policy, the PUCT rule,
    mctx's tree arrays (node_visits, node_values, children_index, children_rewards, ...) and its
    conventions (a new node starts with one visit and its predicted value; backups keep running
    means), our min_max_qtransform. recurrent_fn(latent, action) -> (reward, value, prior_logits,
    next_latent) is called once per simulation for all B trees, inside one jitted loop.
    key: the root's Dirichlet noise (dirichlet_fraction of the prior) and mctx's tie-breaking.
    Returns (root visit counts (B, A), root value (B,))."""

    def mctx_recurrent_fn(params, rng_key, action, latent):
        reward, value, logits, next_latent = recurrent_fn(latent, action)
        return mctx.RecurrentFnOutput(
            reward=reward, discount=jnp.full_like(reward, gamma), prior_logits=logits, value=value
        ), next_latent

    output = mctx.muzero_policy(
        params=(),
        rng_key=key,
        root=mctx.RootFnOutput(prior_logits=root_logits, value=root_value, embedding=root_latent),
        recurrent_fn=mctx_recurrent_fn,
        num_simulations=num_simulations,
        qtransform=partial(min_max_qtransform, min_range=min_q_range),
        dirichlet_fraction=dirichlet_fraction,
        dirichlet_alpha=dirichlet_alpha,
        pb_c_init=pb_c_init,
        pb_c_base=pb_c_base,
    )
    summary = output.search_tree.summary()
    return summary.visit_counts.astype(jnp.float32), summary.value


# ----------------------------------------------------------------------------- networks
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MuZeroNet(nn.Module):
    """The three MuZero functions, each a one-hidden-layer ELU MLP:
    representation h: observation -> latent s^0; dynamics g: (s^{k-1}, one-hot a) -> (r^k logits, s^k);
    prediction f: s^k -> (policy logits p^k, value logits v^k). Latents are min-max scaled to [0, 1].
    The three heads start at zero: a uniform prior and reward = value = 0 everywhere, a consistent
    model, so the first searches follow the prior instead of amplifying small random Q differences."""

    num_actions: int
    hidden_size: int
    latent_size: int
    support_size: int

    def setup(self):
        atoms = 2 * self.support_size + 1
        self.representation = nn.Sequential(
            [layer_init(self.hidden_size), nn.elu, layer_init(self.latent_size)]
        )
        self.dynamics_trunk = nn.Sequential([layer_init(self.hidden_size), nn.elu])
        self.dynamics_latent = layer_init(self.latent_size)
        self.dynamics_reward = layer_init(atoms, std=0.0)
        self.prediction_trunk = nn.Sequential([layer_init(self.hidden_size), nn.elu])
        self.prediction_policy = layer_init(self.num_actions, std=0.0)
        self.prediction_value = layer_init(atoms, std=0.0)

    def __call__(self, obs, action):  # for init: touches every layer
        latent = self.represent(obs)
        return self.dynamics(latent, action), self.predict(latent)

    def represent(self, obs):
        return scale_latent(self.representation(obs))

    def dynamics(self, latent, action):
        x = self.dynamics_trunk(jnp.concatenate([latent, jax.nn.one_hot(action, self.num_actions)], -1))
        return scale_latent(self.dynamics_latent(x)), self.dynamics_reward(x)

    def predict(self, latent):
        x = self.prediction_trunk(latent)
        return self.prediction_policy(x), self.prediction_value(x)

    def initial_inference(self, obs):
        """obs -> (latent, policy logits, scalar value)."""
        latent = self.represent(obs)
        policy_logits, value_logits = self.predict(latent)
        return latent, policy_logits, support_to_scalar(value_logits, self.support_size)

    def recurrent_inference(self, latent, action):
        """The search's model step: (latent, action) -> (scalar reward, scalar value, policy logits,
        next latent)."""
        next_latent, reward_logits = self.dynamics(latent, action)
        policy_logits, value_logits = self.predict(next_latent)
        return (
            support_to_scalar(reward_logits, self.support_size),
            support_to_scalar(value_logits, self.support_size),
            policy_logits,
            next_latent,
        )


def search(network, args, params, obs, key, temperature=1.0, dirichlet_fraction=0.0, sample=True):
    """One batched search from the observations: returns (actions, visit-count policy, root values, key).
    With sample: Dirichlet noise at the root and actions sampled from the visit counts at the
    temperature; without: no noise and the argmax of the visit counts (evaluation). Jitted as one call
    (make_act): the whole search, its key splits and the sampling."""
    latent, logits, value = network.apply(params, obs, method=MuZeroNet.initial_inference)

    def recurrent_fn(latent, action):  # the model step inside mctx's loop
        return network.apply(params, latent, action, method=MuZeroNet.recurrent_inference)

    key, search_key, action_key = jax.random.split(key, 3)
    visit_counts, root_value = run_mcts(
        recurrent_fn,
        latent,
        logits,
        value,
        args.num_simulations,
        args.gamma,
        args.pb_c_init,
        args.pb_c_base,
        args.min_q_range,
        search_key,
        dirichlet_fraction * sample,
        args.dirichlet_alpha,
    )
    policy = visit_counts / visit_counts.sum(-1, keepdims=True)
    if not sample:
        actions = visit_counts.argmax(-1)
    else:
        actions = jax.random.categorical(action_key, jnp.log(visit_policy(visit_counts, temperature)))
    return actions, policy, root_value, key


def make_act(network, args):
    """search as one jitted function of (params, obs, key, temperature, dirichlet_fraction)."""
    return jax.jit(partial(search, network, args), static_argnames=("sample",))


def make_envs(env_id, num_envs, scale_obs=True):
    """Vector env with the autoreset mode chosen explicitly: SAME_STEP. When an episode ends at a
    step, that step already returns the next episode's first observation, and the true last
    observation comes in infos["final_obs"] (masked by infos["_final_obs"]). With scale_obs every
    sub-env maps its bounded observation entries onto [-1, 1] (obs_scaling): the wrapper sits inside
    each sub-env, so infos["final_obs"] arrives scaled too, and replay stores what the network sees."""
    wrappers = []
    if scale_obs:
        probe = gym.make(env_id)  # construction only, for the declared bounds
        space = probe.observation_space
        probe.close()
        # gymnasium's RescaleObservation makes the same affine map when given per-entry targets (+-inf
        # where the space is unbounded) but divides 0 / 0 on a constant entry; this form,
        # (obs - centre) / half_width with obs_scaling's half-width 1 there, does not.
        centre, half_width = obs_scaling(space.low, space.high)
        scaled_space = gym.spaces.Box(
            (space.low - centre) / half_width, (space.high - centre) / half_width, dtype=np.float32
        )
        wrappers.append(
            lambda env: gym.wrappers.TransformObservation(
                env, lambda obs: ((obs - centre) / half_width).astype(np.float32), scaled_space
            )
        )
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        wrappers=wrappers,
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    per_env = (args.unroll_steps + args.td_steps + 2) * args.num_envs  # more than one window per stream
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("num_simulations", args.num_simulations >= 1, ">= 1 (one expansion per simulation)"),
        (
            "unroll_steps",
            args.unroll_steps >= 1,
            ">= 1 (the dynamics network trains only through the unroll)",
        ),
        ("td_steps", args.td_steps >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("buffer_size", args.buffer_size >= 1, ">= 1"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("gradient_steps", args.gradient_steps >= 1, ">= 1"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("latent_size", args.latent_size >= 2, ">= 2 (min-max scaling makes a one-entry latent constant)"),
        ("support_size", args.support_size >= 1, ">= 1"),
        ("value_loss_coef", args.value_loss_coef >= 0, ">= 0"),
        ("pb_c_init", args.pb_c_init >= 0, ">= 0"),
        ("pb_c_base", args.pb_c_base > 0, "> 0"),
        ("min_q_range", args.min_q_range > 0, "> 0"),
        ("dirichlet_alpha", args.dirichlet_alpha > 0, "> 0"),
        ("dirichlet_fraction", 0 <= args.dirichlet_fraction <= 1, "in [0, 1]"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "learning_starts",
            args.learning_starts >= per_env,
            f">= (--unroll-steps + --td-steps + 2) * --num-envs = {per_env}: more than one window per env",
        ),
        (
            "buffer_size",
            args.buffer_size >= per_env,
            f">= (--unroll-steps + --td-steps + 2) * --num-envs = {per_env}: more than one window per env",
        ),
        ("total_timesteps", args.total_timesteps > args.learning_starts, "> --learning-starts"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    env = gym.make(args.env_id)  # env construction only: no step taken
    space, obs_space = env.action_space, env.observation_space
    env.close()
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; MuZero's search here "
            f"enumerates Discrete actions. For continuous actions use the model-based "
            f"algos/pets_jax.py or algos/mbpo_jax.py (or algos/sac_jax.py)"
        )
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(
            f"--env-id {args.env_id} has a {obs_space} observation space; this script's MLP "
            f"representation needs flat Box observations"
        )


def evaluate(model_path, args, seed):
    """Load the saved parameters into a fresh network; play eval_episodes episodes at once (env i
    seeded seed + i) with the noiseless search, acting on the argmax of the visit counts."""
    envs = make_envs(args.env_id, args.eval_episodes, args.scale_obs)
    network = MuZeroNet(
        int(envs.single_action_space.n), args.hidden_size, args.latent_size, args.support_size
    )
    dummy = jnp.zeros((1, int(np.prod(envs.single_observation_space.shape))))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(
            network.init(jax.random.PRNGKey(0), dummy, jnp.zeros(1, jnp.int32)), f.read()
        )
    obs, _ = envs.reset(seed=seed)
    totals, finished = np.zeros(args.eval_episodes), np.zeros(args.eval_episodes, dtype=bool)
    act = make_act(network, args)
    key = jax.random.PRNGKey(seed)  # unused without sampling (no noise, argmax), but the search takes one
    while not finished.all():
        actions, _, _, key = act(params, obs, key, sample=False)
        actions = np.asarray(actions)
        obs, reward, terminated, truncated, _ = envs.step(actions)
        totals += reward * ~finished  # each env's first episode only
        finished |= terminated | truncated
    envs.close()
    return totals.tolist()


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)
    num_iterations = args.total_timesteps // args.num_envs
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # ---- 1. Setup: seeding, environments, network, optimiser, replay
    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # One jitted search per env step: run it inline on this thread rather than hand it to XLA's
    # worker thread and wait for it. Read when the CPU backend starts: before the first JAX operation.
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)  # root noise, action sampling (inside the jitted search)
    rng = np.random.default_rng(args.seed)  # replay sampling

    envs = make_envs(args.env_id, args.num_envs, args.scale_obs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    network = MuZeroNet(num_actions, args.hidden_size, args.latent_size, args.support_size)
    key, init_key = jax.random.split(key)
    params = network.init(init_key, jnp.zeros((1, obs_dim)), jnp.zeros(1, jnp.int32))
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(args.learning_rate))
    opt_state = optimizer.init(params)
    K, n = args.unroll_steps, args.td_steps

    def loss_fn(params, obs, actions, policies, rewards, values, terminated, truncated, bootstrap_values):
        value_targets, reward_targets, policy_mask, value_mask, reward_mask = n_step_targets(
            rewards, values, terminated, truncated, bootstrap_values, args.gamma, n, K
        )
        latent = network.apply(params, obs, method=MuZeroNet.represent)
        policy_logits, value_logits = network.apply(params, latent, method=MuZeroNet.predict)
        all_policy, all_value, all_reward = [policy_logits], [value_logits], []
        for k in range(K):
            latent, reward_logits = network.apply(
                params, scale_gradient(latent, 0.5), actions[:, k], method=MuZeroNet.dynamics
            )
            policy_logits, value_logits = network.apply(params, latent, method=MuZeroNet.predict)
            all_policy.append(policy_logits)
            all_value.append(value_logits)
            all_reward.append(reward_logits)
        loss, policy_loss, value_loss, reward_loss = muzero_loss(
            jnp.stack(all_policy, 1),
            jnp.stack(all_value, 1),
            jnp.stack(all_reward, 1),
            policies,
            value_targets,
            reward_targets,
            policy_mask,
            value_mask,
            reward_mask,
            args.support_size,
            args.value_loss_coef,
        )
        return loss, (policy_loss, value_loss, reward_loss)

    @jax.jit
    def update(params, opt_state, *batch):
        """One gradient step as one jitted call: targets, K-step unroll, loss, gradient, clip and Adam."""
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, aux

    act = make_act(network, args)
    initial_value = jax.jit(
        lambda params, obs: network.apply(params, obs, method=MuZeroNet.initial_inference)[2]
    )

    # Replay of trajectories: num_envs streams in a ring of rows (row = one vector step). Each row
    # keeps what the targets need: the search's policy and root value, and for a truncated step
    # the predicted value of the true last observation (the bootstrap; termination has none).
    # buffers on the host; each sampled batch moves to the device
    rows = args.buffer_size // args.num_envs
    obs_rb = np.zeros((rows, args.num_envs, obs_dim), dtype=np.float32)
    actions_rb = np.zeros((rows, args.num_envs), dtype=np.int32)
    rewards_rb = np.zeros((rows, args.num_envs), dtype=np.float32)
    terminated_rb = np.zeros((rows, args.num_envs), dtype=np.float32)
    truncated_rb = np.zeros((rows, args.num_envs), dtype=np.float32)
    bootstrap_rb = np.zeros((rows, args.num_envs), dtype=np.float32)
    root_values_rb = np.zeros((rows, args.num_envs), dtype=np.float32)
    policies_rb = np.zeros((rows, args.num_envs, num_actions), dtype=np.float32)
    rb_pos, rb_size = 0, 0

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print, num_updates = 0, 0.0, 0
    losses = {
        "loss": float("nan"),
        "policy_loss": float("nan"),
        "value_loss": float("nan"),
        "reward_loss": float("nan"),
    }
    start_time = time.time()
    obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        global_step += args.num_envs
        temperature = temperature_schedule(global_step / args.total_timesteps)
        # ---- 2. Act: one batched search over the vector envs, noise at the root, sampled by visits
        action, policy, root_value, key = act(params, obs, key, temperature, args.dirichlet_fraction)
        action, policy, root_value = np.asarray(action), np.asarray(policy), np.asarray(root_value)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        ep_return += reward
        ep_length += 1
        next_obs = np.asarray(next_obs, dtype=np.float32)

        # ---- 3. Store: a truncated (not terminated) step bootstraps from its true last observation
        bootstrap = np.zeros(args.num_envs, dtype=np.float32)
        cut = truncated & ~terminated
        if cut.any():
            final_obs = np.stack([infos["final_obs"][i] for i in np.flatnonzero(cut)]).astype(np.float32)
            bootstrap[cut] = np.asarray(initial_value(params, final_obs))
        obs_rb[rb_pos], actions_rb[rb_pos], rewards_rb[rb_pos] = obs, action, reward
        terminated_rb[rb_pos], truncated_rb[rb_pos] = terminated, cut
        bootstrap_rb[rb_pos], root_values_rb[rb_pos], policies_rb[rb_pos] = bootstrap, root_value, policy
        rb_pos, rb_size = (rb_pos + 1) % rows, min(rb_size + 1, rows)
        obs = next_obs

        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-20:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        # ---- 4. Update: K-step unroll on windows of K + n + 1 stored steps
        for _ in range(args.gradient_steps if global_step > args.learning_starts else 0):
            # a window needs K + n later rows already written: the newest K + n rows cannot start one
            oldest = (rb_pos - rb_size) % rows
            start = rng.integers(0, rb_size - K - n, args.batch_size)
            env = rng.integers(0, args.num_envs, args.batch_size)
            t = (oldest + start[:, None] + np.arange(K + n + 1)) % rows  # (B, K + n + 1)
            e = env[:, None]
            params, opt_state, loss, (policy_loss, value_loss, reward_loss) = update(
                params,
                opt_state,
                obs_rb[t[:, 0], env],
                actions_rb[t[:, :K], e],
                policies_rb[t[:, : K + 1], e],
                rewards_rb[t[:, :-1], e],
                root_values_rb[t, e],
                terminated_rb[t[:, :-1], e],
                truncated_rb[t[:, :-1], e],
                bootstrap_rb[t[:, :-1], e],
            )
            num_updates += 1
            if num_updates % 100 == 0:
                losses = {
                    "loss": float(loss),
                    "policy_loss": float(policy_loss),
                    "value_loss": float(value_loss),
                    "reward_loss": float(reward_loss),
                }
                sps = int(global_step / (time.time() - start_time))
                for name, value in losses.items():
                    writer.add_scalar(f"losses/{name}", value, global_step)
                writer.add_scalar("charts/temperature", temperature, global_step)
                writer.add_scalar("charts/SPS", sps, global_step)

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

    # ---- 5. Summary: close, log the last losses, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    if num_updates > 0:
        losses = {
            "loss": float(loss),
            "policy_loss": float(policy_loss),
            "value_loss": float(value_loss),
            "reward_loss": float(reward_loss),
        }
    for name, value in losses.items():  # the last update's losses (short runs log fewer than 100 updates)
        writer.add_scalar(f"losses/{name}", value, global_step)
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
        eval_returns = evaluate(model_path, args, seed=args.seed + 10_000)
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
