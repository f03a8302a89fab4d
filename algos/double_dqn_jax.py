"""Double DQN: the online network selects the next action, the target scores it -- the JAX twin.

DQN with one change to the target, y = r + gamma Q_target(s', argmax_a' Q_online(s', a')): the action
is chosen by one estimate and scored by another, which removes most of the max's upward bias. Flags
add an n-step target, LayerNorm, advantage learning and a learning-rate anneal (all off by default).
Papers: van Hasselt, Guez and Silver 2015, "Deep Reinforcement Learning with Double Q-learning",
        arXiv:1509.06461; van Hasselt 2010, "Double Q-learning", NeurIPS 23.
Twin:   algos/double_dqn_torch.py (`diff algos/double_dqn_torch.py algos/double_dqn_jax.py`: the framework).
Docs:   docs/algorithms/double_dqn.md
Run:    python algos/double_dqn_jax.py --seed 1
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


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 100_000
    """total environment steps, summed over the vector envs (CleanRL: 500k)"""
    num_envs: int = 1
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    learning_rate: float = 1e-3
    """Adam learning rate (CleanRL: 2.5e-4)"""
    buffer_size: int = 100_000
    """replay buffer capacity (transitions); the oldest are overwritten first (CleanRL: 10k)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 1.0
    """target network update rate: 1.0 is a hard copy, < 1 Polyak averaging"""
    target_network_frequency: int = 500
    """vector-env steps between target network updates"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """epsilon at the start of training"""
    end_e: float = 0.01
    """epsilon floor (CleanRL: 0.05)"""
    exploration_fraction: float = 0.1
    """fraction of total_timesteps over which epsilon falls linearly to end_e (CleanRL: 0.5)"""
    learning_starts: int = 1_000
    """environment steps of uniform-random play before the first gradient step (CleanRL: 10k)"""
    train_frequency: int = 4
    """vector-env steps between gradient steps (CleanRL: 10)"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip (CleanRL: none)"""
    anneal_lr: bool = False
    """decay the learning rate linearly to 0 over the run's gradient steps"""
    n_step: int = 1
    """rewards summed before bootstrapping: the n-step target (Sutton 1988; Hessel et al. 2018)"""
    layer_norm: bool = False
    """LayerNorm before each hidden ReLU of the Q-network (Ba et al. 2016)"""
    al_alpha: float = 0.0
    """advantage learning's alpha, 0 off: action gaps x 1 / (1 - alpha) (Baird 1999; Bellemare et al. 2016)"""
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
def linear_schedule(start_e, end_e, duration, t):
    """Epsilon at step t: linear from start_e to end_e over `duration` steps, then flat at end_e."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def n_step_transition(window, gamma):
    """Fold a window of consecutive one-step transitions (obs, action, reward, next_obs, terminated),
    oldest first, into one: (obs_0, action_0, R, next_obs_k, terminated_k, gamma^k), where
    R = sum_{t<k} gamma^t r_t over the window's k transitions. A window ends early at an episode's
    end: a termination stops the sum (no bootstrap), a truncation bootstraps from its final
    observation with discount gamma^k. With n_step = 1 every window is one transition: the one-step
    target. Plain python, the same in both twins."""
    ret = 0.0
    for t, (_, _, reward, _, _) in enumerate(window):
        ret += gamma**t * float(reward)
    _, _, _, next_obs, terminated = window[-1]
    return window[0][0], window[0][1], ret, next_obs, float(terminated), gamma ** len(window)


def double_q_target(next_q_online, next_q_target, rewards, dones, gamma):
    """The Double DQN target y = r + gamma * (1 - done) * Q_target(s', argmax_a' Q_online(s', a')).

    gamma: the discount, or a (B,) array of per-sample discounts gamma^k (n-step transitions).

    next_q_online, next_q_target: (B, A) online- and target-network values at the next observation.
    The online network selects the action, the target network scores it: with errors independent
    of the selection, the upward bias of max_a' Q_target (worked problem 4) is gone. dones =
    terminated only: a truncated episode bootstraps, since the time limit is not part of the task."""
    next_actions = next_q_online.argmax(axis=-1)[..., None]
    return rewards + gamma * (1.0 - dones) * jnp.take_along_axis(
        next_q_target, next_actions, axis=-1
    ).squeeze(-1)


def advantage_learning_target(targets, q_target_obs, actions, alpha):
    """Advantage learning (Baird 1999; Bellemare et al. 2016, arXiv:1512.04860):
    y_AL = y - alpha * (max_b Q_target(s, b) - Q_target(s, a)), both read at the *current* state s.

    The greedy action's target is y itself, so the greedy policy at the fixed point is Q*'s; any other
    action's value settles below Q*'s, with V(s) - Q(s, a) = (V*(s) - Q*(s, a)) / (1 - alpha): every
    action gap multiplied by 1 / (1 - alpha). q_target_obs: (B, A) target-network values at s;
    actions: (B,) the taken actions. alpha = 0 gives y back."""
    return targets - alpha * (
        q_target_obs.max(axis=-1) - jnp.take_along_axis(q_target_obs, actions[:, None], axis=-1).squeeze(-1)
    )


def td_loss(q_taken, targets):
    """Huber loss (delta = 1) on the TD errors, averaged over the batch: quadratic for small errors,
    linear for large ones, so one surprising transition cannot produce a huge gradient."""
    error = q_taken - targets
    abs_error = jnp.abs(error)
    return jnp.where(abs_error < 1.0, 0.5 * error**2, abs_error - 0.5).mean()


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


class QNetwork(nn.Module):
    """128-128 ReLU MLP: observation -> one Q-value per action; with layer_norm, a LayerNorm before
    each hidden ReLU."""

    num_actions: int
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs):
        x = layer_init(128)(obs)
        x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)  # LayerNorm: epsilon 1e-6
        x = layer_init(128)(x)
        x = nn.relu(nn.LayerNorm()(x) if self.layer_norm else x)
        return layer_init(self.num_actions, std=1.0)(x)


EXPLORATION_BLOCK = 1000  # env steps of epsilon-greedy randomness drawn per call of exploration_draws


@partial(jax.jit, static_argnums=(0, 1, 2))
def exploration_draws(num_steps, num_envs, num_actions, key):
    """The epsilon-greedy randomness of the next num_steps env steps, in one call: for each step the
    key is split as a one-step act would split it, and each env gets a uniform coin (explore when
    coin < epsilon, decided on the host) and a uniform random action. Why in blocks: drawn one step
    at a time, inside the jitted act, the threefry draws cost more than the forward pass
    (docs/algorithms/dqn.md, Speed). Returns (coins, random_actions, key), each (num_steps, num_envs)."""

    def one_step(key, _):
        key, explore_key, action_key = jax.random.split(key, 3)
        coins = jax.random.uniform(explore_key, (num_envs,))
        return key, (coins, jax.random.randint(action_key, (num_envs,), 0, num_actions))

    key, (coins, random_actions) = jax.lax.scan(one_step, key, None, length=num_steps)
    return coins, random_actions, key


@partial(jax.jit, static_argnums=0)
def greedy_action(q_network, params, obs):
    """The greedy action argmax_a Q(obs, a) of each env: the forward pass, one jitted call."""
    return q_network.apply(params, obs).argmax(axis=-1)


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
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("target_network_frequency", args.target_network_frequency >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("start_e", 0 <= args.start_e <= 1, "in [0, 1]"),
        ("end_e", 0 <= args.end_e <= 1, "in [0, 1]"),
        ("exploration_fraction", 0 < args.exploration_fraction <= 1, "in (0, 1]"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("train_frequency", args.train_frequency >= 1, ">= 1"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("n_step", args.n_step >= 1, ">= 1 (1 is the one-step target)"),
        ("al_alpha", 0 <= args.al_alpha < 1, "in [0, 1) (0 is the plain target)"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("buffer_size", args.buffer_size >= args.batch_size, ">= --batch-size"),
        ("start_e", args.start_e >= args.end_e, ">= --end-e"),
        ("learning_starts", args.learning_starts >= args.batch_size, ">= --batch-size"),
        ("total_timesteps", args.total_timesteps > args.learning_starts, "> --learning-starts"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/sac_jax.py, algos/td3_jax.py or "
            f"algos/ddpg_jax.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed, layer_norm):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    q_network = QNetwork(int(env.action_space.n), layer_norm=layer_norm)
    dummy = jnp.zeros((1, int(np.prod(env.observation_space.shape))))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(q_network.init(jax.random.PRNGKey(0), dummy), f.read())
    greedy = jax.jit(lambda params, obs: q_network.apply(params, obs).argmax(-1))
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

    # ---- 1. Setup: seeding, environments, networks, optimiser, replay buffer
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
    rng = np.random.default_rng(args.seed)  # replay sampling

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    q_network = QNetwork(int(envs.single_action_space.n), layer_norm=args.layer_norm)
    key, init_key = jax.random.split(key)
    params = q_network.init(init_key, jnp.zeros((1, obs_dim)))
    target_params = params
    # the step size: constant, or linear from learning_rate to 0 over the gradient steps (anneal_lr)
    learning_rate = (
        optax.linear_schedule(args.learning_rate, 0.0, max(num_gradient_steps, 1))
        if args.anneal_lr
        else args.learning_rate
    )
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate))
    opt_state = optimizer.init(params)

    def loss_fn(params, target_params, obs, actions, rewards, next_obs, dones, discounts):
        targets = double_q_target(
            q_network.apply(params, next_obs),
            q_network.apply(target_params, next_obs),
            rewards,
            dones,
            discounts,
        )
        if args.al_alpha > 0.0:  # advantage learning; --al-alpha 0 skips it
            targets = advantage_learning_target(
                targets, q_network.apply(target_params, obs), actions, args.al_alpha
            )
        q_taken = jnp.take_along_axis(q_network.apply(params, obs), actions[:, None], axis=-1).squeeze(-1)
        return td_loss(q_taken, jax.lax.stop_gradient(targets)), q_taken.mean()

    @jax.jit
    def update(params, target_params, opt_state, *batch):
        """One gradient step as one jitted call: target, loss, gradient, clip and Adam."""
        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, target_params, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, q_mean

    soft_update = jax.jit(
        lambda params, target_params: optax.incremental_update(params, target_params, args.tau)
    )

    # Replay buffer, on the host (each sampled batch moves to the device): a ring of preallocated
    # arrays of n-step transitions. next_obs holds the true observation n steps on (final_obs at an
    # episode end), dones the `terminated` flag only, discounts gamma^k for the k rewards summed.
    obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    next_obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    actions_rb = np.zeros(args.buffer_size, dtype=np.int32)
    rewards_rb = np.zeros(args.buffer_size, dtype=np.float32)
    dones_rb = np.zeros(args.buffer_size, dtype=np.float32)
    discounts_rb = np.zeros(args.buffer_size, dtype=np.float32)
    rb_pos, rb_size = 0, 0
    windows = [[] for _ in range(args.num_envs)]  # the last n one-step transitions of each env

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print, num_updates = 0, 0.0, 0
    losses = {"td_loss": float("nan"), "q_values": float("nan")}
    start_time = time.time()
    obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Act: epsilon-greedy (uniform-random before learning_starts), one step of every env
        global_step += args.num_envs
        epsilon = linear_schedule(
            args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step
        )
        if global_step <= args.learning_starts:
            epsilon = 1.0  # uniform-random warm-up fills the buffer
        # the coins and random actions of epsilon-greedy are drawn a block of steps at a time
        j = (iteration - 1) % EXPLORATION_BLOCK
        if j == 0:
            coins, random_actions, key = exploration_draws(
                EXPLORATION_BLOCK, args.num_envs, q_network.num_actions, key
            )
            coins, random_actions = np.asarray(coins), np.asarray(random_actions)
        explore = coins[j] < epsilon
        action = random_actions[j]
        if not explore.all():  # the network is only needed when some env exploits
            action = np.where(explore, action, np.asarray(greedy_action(q_network, params, obs)))
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
                rb_pos, rb_size = (rb_pos + 1) % args.buffer_size, min(rb_size + 1, args.buffer_size)
                windows[i].pop(0)
        obs = next_obs

        # episode statistics of every env whose episode ended at this step
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-20:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        # ---- 4. Update: one gradient step on a uniform minibatch every train_frequency steps
        if global_step > args.learning_starts:
            if iteration % args.train_frequency == 0:
                b = rng.integers(0, rb_size, args.batch_size)
                params, opt_state, loss, q_mean = update(
                    params,
                    target_params,
                    opt_state,
                    obs_rb[b],
                    actions_rb[b],
                    rewards_rb[b],
                    next_obs_rb[b],
                    dones_rb[b],
                    discounts_rb[b],
                )
                num_updates += 1
                if num_updates % 100 == 0:
                    losses = {"td_loss": float(loss), "q_values": float(q_mean)}
                    sps = int(global_step / (time.time() - start_time))
                    for name, value in losses.items():
                        writer.add_scalar(f"losses/{name}", value, global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", sps, global_step)

            # ---- 5. Target network: hard copy (tau = 1) or Polyak average every C steps
            if iteration % args.target_network_frequency == 0:
                target_params = soft_update(params, target_params)

        # the progress line, at most twice a second
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
    # ---- 6. Summary: close, save, evaluate
    if args.progress:
        print(file=sys.stderr)
    envs.close()
    wall_time = time.time() - start_time
    if num_updates > 0:
        losses = {"td_loss": float(loss), "q_values": float(q_mean)}
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
            model_path, args.env_id, args.eval_episodes, seed=args.seed + 10_000, layer_norm=args.layer_norm
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
