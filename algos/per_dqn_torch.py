"""Prioritized experience replay DQN: a sum tree samples transitions by TD error -- the PyTorch twin.

DQN with one change to the replay: transition i is drawn with probability p_i^alpha / sum_k p_k^alpha,
p_i its last |TD error| (a sum tree), and its loss is scaled by an importance weight (N P(i))^-beta,
beta annealed to 1. Flags add an n-step target, LayerNorm, advantage learning and a learning-rate
anneal (all off by default).
Papers: Schaul, Quan, Antonoglou and Silver 2015, "Prioritized Experience Replay",
        arXiv:1511.05952; Mnih et al. 2015 (DQN), Nature 518.
Twin:   algos/per_dqn_jax.py (`diff` with this file shows only the framework).
Docs:   docs/algorithms/per_dqn.md
Run:    python algos/per_dqn_torch.py --seed 1
"""

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter


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
    learning_rate: float = 5e-4
    """Adam learning rate (CleanRL's DQN: 2.5e-4; the paper: a quarter of DQN's step size)"""
    buffer_size: int = 100_000
    """replay buffer capacity (transitions); the oldest are overwritten first (CleanRL: 10k)"""
    alpha: float = 0.6
    """prioritisation exponent: P(i) is proportional to p_i^alpha (0: uniform replay)"""
    beta_start: float = 0.4
    """importance-sampling exponent at the start, annealed linearly to 1 over the run"""
    prior_eps: float = 1e-6
    """added to |TD error| so that no transition gets priority 0"""
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


def max_q_target(next_q_target, rewards, dones, gamma):
    """The DQN target y = r + gamma * (1 - done) * max_a' Q_target(s', a').

    gamma: the discount, or a (B,) array of per-sample discounts gamma^k (n-step transitions).

    next_q_target: (B, A) target-network values at the next observation. dones = terminated only:
    a truncated episode bootstraps, since the time limit is not part of the task. The max over
    noisy estimates is biased upward (worked problem 4)."""
    return rewards + gamma * (1.0 - dones) * next_q_target.max(dim=-1).values


def advantage_learning_target(targets, q_target_obs, actions, alpha):
    """Advantage learning (Baird 1999; Bellemare et al. 2016, arXiv:1512.04860):
    y_AL = y - alpha * (max_b Q_target(s, b) - Q_target(s, a)), both read at the *current* state s.

    The greedy action's target is y itself, so the greedy policy at the fixed point is Q*'s; any other
    action's value settles below Q*'s, with V(s) - Q(s, a) = (V*(s) - Q*(s, a)) / (1 - alpha): every
    action gap multiplied by 1 / (1 - alpha). q_target_obs: (B, A) target-network values at s;
    actions: (B,) the taken actions. alpha = 0 gives y back."""
    return targets - alpha * (
        q_target_obs.max(1).values - q_target_obs.gather(1, actions.unsqueeze(1)).squeeze(1)
    )


def weighted_td_loss(q_taken, targets, weights):
    """Huber loss (delta = 1) on the TD errors, each scaled by its importance weight, averaged over
    the batch; returns (loss, |TD errors|), the latter for the new priorities."""
    error = q_taken - targets
    abs_error = error.abs()
    huber = torch.where(abs_error < 1.0, 0.5 * error**2, abs_error - 0.5)
    return (weights * huber).mean(), abs_error


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
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """128-128 ReLU MLP: observation -> one Q-value per action; with layer_norm, a LayerNorm before
    each hidden ReLU."""

    def __init__(self, obs_dim, num_actions, layer_norm=False):
        super().__init__()
        self.num_actions = num_actions
        # LayerNorm (eps 1e-6, flax's default) before each hidden ReLU; nn.Identity without it
        norm = lambda: nn.LayerNorm(128, eps=1e-6) if layer_norm else nn.Identity()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 128)),
            norm(),
            nn.ReLU(),
            layer_init(nn.Linear(128, 128)),
            norm(),
            nn.ReLU(),
            layer_init(nn.Linear(128, num_actions), std=1.0),
        )

    def forward(self, obs):
        return self.net(obs)

    @torch.no_grad()
    def act(self, obs, epsilon):
        """Epsilon-greedy: each env takes a uniform-random action with probability epsilon, the
        greedy action otherwise."""
        greedy = self.net(obs).argmax(dim=-1)
        explore = torch.rand(obs.shape[0], device=obs.device) < epsilon
        random_actions = torch.randint(self.num_actions, (obs.shape[0],), device=obs.device)
        return torch.where(explore, random_actions, greedy)


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
        ("alpha", args.alpha >= 0, ">= 0 (0 is uniform replay)"),
        ("beta_start", 0 <= args.beta_start <= 1, "in [0, 1]"),
        ("prior_eps", args.prior_eps > 0, "> 0"),
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
            f"actions. For continuous actions use algos/sac_torch.py, algos/td3_torch.py or "
            f"algos/ddpg_torch.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed, layer_norm):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    q_network = QNetwork(
        int(np.prod(env.observation_space.shape)), int(env.action_space.n), layer_norm=layer_norm
    )
    q_network.load_state_dict(torch.load(model_path, map_location="cpu"))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = q_network(torch.as_tensor(obs, dtype=torch.float32)).argmax().item()
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

    # Seeding: python, numpy, torch and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # tiny networks: intra-op threads cost far more than they save here
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)  # prioritised replay sampling

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    q_network = QNetwork(obs_dim, int(envs.single_action_space.n), layer_norm=args.layer_norm).to(device)
    target_network = copy.deepcopy(q_network)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)

    # Replay buffer, on the host (each sampled batch moves to the device): a ring of preallocated
    # arrays of n-step transitions. next_obs holds the true observation n steps on (final_obs at an
    # episode end), dones the `terminated` flag only, discounts gamma^k for the k rewards summed.
    obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    next_obs_rb = np.zeros((args.buffer_size, obs_dim), dtype=np.float32)
    actions_rb = np.zeros(args.buffer_size, dtype=np.int64)
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
        action = q_network.act(torch.as_tensor(obs, device=device), epsilon).cpu().numpy()
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

        # episode statistics of every env whose episode ended at this step
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
                b_obs, b_next_obs = (
                    torch.as_tensor(obs_rb[b], device=device),
                    torch.as_tensor(next_obs_rb[b], device=device),
                )
                b_actions, b_rewards, b_dones, b_discounts = (
                    torch.as_tensor(x[b], device=device)
                    for x in (actions_rb, rewards_rb, dones_rb, discounts_rb)
                )
                with torch.no_grad():
                    targets = max_q_target(target_network(b_next_obs), b_rewards, b_dones, b_discounts)
                    if args.al_alpha > 0.0:  # advantage learning; --al-alpha 0 skips it
                        targets = advantage_learning_target(
                            targets, target_network(b_obs), b_actions, args.al_alpha
                        )
                q_taken = q_network(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
                loss, abs_errors = weighted_td_loss(
                    q_taken, targets, torch.as_tensor(b_weights, device=device)
                )
                if args.anneal_lr:  # linear from learning_rate to 0 over the run's gradient steps
                    optimizer.param_groups[0]["lr"] = args.learning_rate * (
                        1.0 - num_updates / max(num_gradient_steps, 1)
                    )
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm)
                optimizer.step()
                new_priorities = abs_errors.detach().cpu().numpy().astype(np.float64) + args.prior_eps
                tree.update(b, new_priorities**args.alpha)
                max_priority = max(max_priority, float(new_priorities.max()))
                num_updates += 1
                if num_updates % 100 == 0:
                    losses = {"td_loss": loss.item(), "q_values": q_taken.mean().item()}
                    sps = int(global_step / (time.time() - start_time))
                    for name, value in losses.items():
                        writer.add_scalar(f"losses/{name}", value, global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    writer.add_scalar("charts/SPS", sps, global_step)

            # ---- 5. Target network: hard copy (tau = 1) or Polyak average every C steps
            if iteration % args.target_network_frequency == 0:
                with torch.no_grad():
                    for p_target, p in zip(target_network.parameters(), q_network.parameters()):
                        p_target.lerp_(p, args.tau)

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
        losses = {"td_loss": loss.item(), "q_values": q_taken.mean().item()}
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
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(q_network.state_dict(), model_path)
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
