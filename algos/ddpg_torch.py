"""DDPG: deep deterministic policy gradient, continuous actions -- the PyTorch twin.

Off-policy deterministic actor-critic: the critic regresses one-step targets from slowly
tracking target networks, and the actor ascends the critic's slope in the action.
Papers: Lillicrap et al. 2015, "Continuous control with deep reinforcement learning",
        arXiv:1509.02971; Silver et al. 2014, "Deterministic Policy Gradient Algorithms" (ICML).
Twin:   algos/ddpg_jax.py (`diff algos/ddpg_torch.py algos/ddpg_jax.py` shows only the framework).
Docs:   docs/algorithms/ddpg.md
Run:    python algos/ddpg_torch.py --seed 1
"""

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
    env_id: str = "Pendulum-v1"
    """gymnasium environment id (Box actions with finite bounds; CleanRL: Hopper-v4)"""
    total_timesteps: int = 30_000
    """total environment steps (CleanRL: 1M)"""
    buffer_size: int = 1_000_000
    """replay buffer capacity (capped at total_timesteps)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the replay buffer"""
    learning_starts: int = 5_000
    """warm-up: uniformly random actions and no update for this many steps (CleanRL: 25k)"""
    learning_rate: float = 3e-4
    """Adam learning rate of the actor and of the critic"""
    exploration_noise: float = 0.1
    """std of the Gaussian exploration noise, as a fraction of the action half-range"""
    hidden_size: int = 256
    """width of the two hidden layers of the actor and of each critic"""
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
    total_timesteps=600, learning_starts=300, batch_size=32, hidden_size=32, save_model=True, eval_episodes=1
)


# ----------------------------------------------------------------------------- pure math
def ddpg_target(rewards, terminated, next_q, gamma):
    """r + gamma * (1 - terminated) * Q'(s', mu'(s')), both from the target networks.

    Only a termination cuts the bootstrap: a time-limit truncation stored its true final
    observation as s' and bootstraps from it like any other step."""
    return rewards + gamma * (1.0 - terminated) * next_q


def critic_loss(q, target):
    """Mean squared Bellman error against the (no-gradient) target."""
    return ((q - target) ** 2).mean()


def ddpg_actor_loss(q):
    """-mean Q(s, mu(s)): the deterministic policy gradient ascends the critic's slope in a."""
    return -q.mean()


# ----------------------------------------------------------------------------- networks
def layer_init(layer):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the JAX twin does the same)."""
    nn.init.kaiming_uniform_(layer.weight, a=np.sqrt(5))
    nn.init.zeros_(layer.bias)
    return layer


class QNetwork(nn.Module):
    """Q(s, a): the concatenated observation and action through a hidden-hidden ReLU MLP."""

    def __init__(self, obs_dim, action_dim, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim + action_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, 1)),
        )

    def forward(self, obs, actions):
        return self.net(torch.cat([obs, actions], -1)).squeeze(-1)


class Actor(nn.Module):
    """Deterministic policy mu(s) = scale * tanh(MLP(s)) + bias, inside any finite Box."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, action_dim)),
        )
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))

    def forward(self, obs):
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias


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
        ("buffer_size", args.buffer_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_starts", args.learning_starts >= 0, ">= 0"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("exploration_noise", args.exploration_noise >= 0, ">= 0"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("buffer_size", args.buffer_size >= args.batch_size, ">= --batch-size"),
        ("learning_starts", args.learning_starts >= args.batch_size, ">= --batch-size"),
        ("total_timesteps", args.total_timesteps > args.learning_starts, "> --learning-starts"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Box actions. "
            f"For discrete actions use algos/dqn_torch.py or algos/ppo_torch.py"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ValueError(
            f"--env-id {args.env_id} has unbounded actions; the tanh squashing needs finite bounds"
        )


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved parameters into a fresh network; run the deterministic policy without noise."""
    env = gym.make(env_id)
    space = env.action_space
    actor = Actor(
        int(np.prod(env.observation_space.shape)),
        int(np.prod(space.shape)),
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    actor.load_state_dict(torch.load(model_path, map_location="cpu")["actor"])
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = actor(torch.as_tensor(obs, dtype=torch.float32)).numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environments, networks, optimisers, replay buffer
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
    # Intra-op threads: at most two (see algos/sac_torch.py): a second thread splits the 256 x 256
    # products when a core is free; the test suite sets OMP_NUM_THREADS=1 and the min keeps it.
    torch.set_num_threads(min(2, torch.get_num_threads()))
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args.env_id, 1)
    envs.action_space.seed(args.seed)
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(space.shape))
    action_scale = torch.as_tensor((space.high - space.low) / 2.0, dtype=torch.float32, device=device)
    action_low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
    action_high = torch.as_tensor(space.high, dtype=torch.float32, device=device)
    actor = Actor(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    actor_target = Actor(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    actor_target.load_state_dict(actor.state_dict())
    qf, qf_target = (
        QNetwork(obs_dim, action_dim, args.hidden_size),
        QNetwork(obs_dim, action_dim, args.hidden_size),
    )
    qf_target.load_state_dict(qf.state_dict())
    for net in (actor, actor_target, qf, qf_target):
        net.to(device)
    target_params = list(qf_target.parameters()) + list(actor_target.parameters())
    online_params = list(qf.parameters()) + list(actor.parameters())
    q_optimizer = torch.optim.Adam(qf.parameters(), lr=args.learning_rate)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate)

    # Replay buffer on the host (each sampled batch moves to the device): flat arrays, written in a ring.
    capacity = min(args.buffer_size, args.total_timesteps)
    obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    next_obs_buf = np.zeros((capacity, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((capacity, action_dim), dtype=np.float32)
    rewards_buf = np.zeros(capacity, dtype=np.float32)
    terminated_buf = np.zeros(capacity, dtype=np.float32)

    episode_returns, recent = [], []
    ep_return, ep_length = np.zeros(1), np.zeros(1, dtype=np.int64)
    losses, last_print = {}, 0.0
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 2. Act: random during the warm-up, then the policy plus Gaussian noise, clipped
        if global_step <= args.learning_starts:
            actions = envs.action_space.sample()
        else:
            with torch.no_grad():
                mu = actor(torch.as_tensor(obs, dtype=torch.float32, device=device))
                noisy = mu + torch.randn_like(mu) * action_scale * args.exploration_noise
                actions = torch.max(torch.min(noisy, action_high), action_low).cpu().numpy()
        next_obs, reward, terminated, truncated, infos = envs.step(actions)
        ep_return += reward
        ep_length += 1

        # ---- 3. Store: an ended episode's next observation is its true last one, not the reset
        real_next_obs = transition_next_obs(next_obs, infos)
        slot = (global_step - 1) % capacity
        obs_buf[slot], next_obs_buf[slot], actions_buf[slot] = obs[0], real_next_obs[0], actions[0]
        rewards_buf[slot], terminated_buf[slot] = reward[0], terminated[0]
        obs = next_obs
        # episode statistics of every env whose episode ended at this step
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-10:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0

        if global_step <= args.learning_starts:
            continue

        # ---- 4. Update: critic, actor, then the Polyak targets
        idx = np.random.randint(0, min(global_step, capacity), size=args.batch_size)
        b_obs, b_next_obs = (
            torch.as_tensor(obs_buf[idx], device=device),
            torch.as_tensor(next_obs_buf[idx], device=device),
        )
        b_actions = torch.as_tensor(actions_buf[idx], device=device)
        b_rewards, b_terminated = (
            torch.as_tensor(rewards_buf[idx], device=device),
            torch.as_tensor(terminated_buf[idx], device=device),
        )

        with torch.no_grad():
            target = ddpg_target(
                b_rewards, b_terminated, qf_target(b_next_obs, actor_target(b_next_obs)), args.gamma
            )
        q = qf(b_obs, b_actions)
        qf1_loss = critic_loss(q, target)
        q_optimizer.zero_grad()
        qf1_loss.backward()
        q_optimizer.step()

        actor_loss = ddpg_actor_loss(qf(b_obs, actor(b_obs)))
        actor_optimizer.zero_grad()
        # Gradients for the actor's parameters only: the critic's weight gradients would be computed
        # and then thrown away (the critic's input gradient, dQ/da, still flows into the actor).
        actor_loss.backward(inputs=list(actor.parameters()))
        actor_optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(target_params, online_params, args.tau)  # target += tau * (online - target)

        # losses and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            losses = {
                "qf1_loss": qf1_loss.item(),
                "qf1_values": q.mean().item(),
                "actor_loss": actor_loss.item(),
            }
            sps = int(global_step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(10) {mean_recent:7.1f}  "
                    f"SPS {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 5. Summary: close, save, evaluate
    if args.progress:
        print(file=sys.stderr)
    envs.close()
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
        model_path = os.path.join(run_dir, "model.pt")
        torch.save({"actor": actor.state_dict(), "qf": qf.state_dict()}, model_path)
        eval_returns = evaluate(
            model_path, args.env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size
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
