"""A2C: synchronous advantage actor-critic, discrete actions -- the PyTorch twin.

Every num_steps steps of num_envs environments, one gradient step of one optimiser on the policy
loss (n-step return or GAE advantage) + vf_coef * value loss - ent_coef * entropy.
Papers: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", arXiv:1602.01783
        (A3C; A2C is its synchronous, batched variant); Schulman et al. 2016, "High-Dimensional
        Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438.
Twin:   algos/a2c_jax.py (`diff algos/a2c_torch.py algos/a2c_jax.py` shows only the framework).
Docs:   docs/algorithms/a2c.md
Run:    python algos/a2c_torch.py --seed 1
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
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 200_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset; A3C: 16 threads)"""
    num_steps: int = 5
    """steps per environment per update (the n of the n-step return)"""
    learning_rate: float = 7e-4
    """RMSprop learning rate (one optimiser for actor and critic; A3C searched it per game)"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 1.0
    """lambda of GAE; 1.0 gives the plain n-step return minus V"""
    norm_adv: bool = False
    """normalise advantages over the batch"""
    ent_coef: float = 0.0
    """entropy bonus coefficient (A3C paper: 0.01)"""
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
SMOKE_ARGS = dict(total_timesteps=1000, num_envs=4, num_steps=5, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    so nothing flows across an episode boundary. Returns (advantages, returns = A + V).
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(last_value)
    next_value = last_value
    for t in reversed(range(num_steps)):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * not_done * next_value - values[t]
        next_advantage = delta + gamma * lam * not_done * next_advantage
        advantages[t] = next_advantage
        next_value = values[t]
    return advantages, advantages + values


def a2c_loss(logp, entropy, values, advantages, returns, vf_coef, ent_coef):
    """The actor-critic loss on one batch, one optimiser for both networks:
        policy  -mean(log pi(a_t | s_t) * A_t)       (A_t a constant: no gradient into the critic)
        value    0.5 * mean((V(s_t) - R_t)^2)         (R_t = A_t + V_old(s_t), a constant target)
        entropy  mean(H(pi(. | s_t)))
    Returns (total = policy + vf_coef * value - ent_coef * entropy, policy, value, entropy)."""
    pg_loss = -(logp * advantages.detach()).mean()
    v_loss = 0.5 * ((values - returns.detach()) ** 2).mean()
    entropy_loss = entropy.mean()
    return pg_loss + vf_coef * v_loss - ent_coef * entropy_loss, pg_loss, v_loss, entropy_loss


# ----------------------------------------------------------------------------- networks
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLP(nn.Sequential):
    """64-64 tanh trunk and a linear head; the actor and the critic are two separate MLPs."""

    def __init__(self, in_dim, out_dim, head_std):
        super().__init__(
            layer_init(nn.Linear(in_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, out_dim), std=head_std),
        )


class Agent(nn.Module):
    """Separate 64-64 tanh actor and critic (no shared trunk)."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.critic = MLP(obs_dim, out_dim=1, head_std=1.0)
        self.actor = MLP(obs_dim, out_dim=num_actions, head_std=0.01)

    def get_value(self, obs):
        return self.critic(obs).squeeze(-1)

    def act(self, obs):
        """Sample actions; return (action, log-prob, value). A raw log-softmax and multinomial
        draw instead of a torch.distributions object: much cheaper in the acting loop."""
        logits = self.actor(obs)
        logp_all = torch.log_softmax(logits, dim=-1)
        action = torch.multinomial(logp_all.exp(), 1).squeeze(-1)
        logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, logp, self.get_value(obs)

    def evaluate_actions(self, obs, actions):
        """Log-prob of given actions, entropy and value, with gradients, for the update."""
        logits = self.actor(obs)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy, self.get_value(obs)


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
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size,
            f">= one rollout, --num-envs * --num-steps = {batch_size}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.norm_adv and batch_size < 2:
        raise ValueError(f"--norm-adv needs --num-envs * --num-steps >= 2 (got {batch_size})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_torch.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    agent.load_state_dict(torch.load(model_path, map_location="cpu"))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = agent.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax().item()
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, environments, networks, optimiser
    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_timesteps // batch_size
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
    # One intra-op thread: the networks are tiny, a second thread costs more than it saves, and a
    # fixed count keeps float reductions (so seeded runs) the same on any machine and in any process.
    torch.set_num_threads(1)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=args.learning_rate, alpha=0.99, eps=1e-5)

    # Rollout storage, (T, N, ...), on the device (CleanRL's layout).
    obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions_buf = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    rewards_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    values_buf = torch.zeros((args.num_steps, args.num_envs), device=device)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = torch.as_tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32, device=device)

    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            with torch.no_grad():
                action, logp, value = agent.act(next_obs)
            actions_buf[step], values_buf[step] = action, value
            obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
            # cuts the recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = torch.as_tensor(
                    np.stack(infos["final_obs"][only_truncated]), dtype=torch.float32, device=device
                )
                with torch.no_grad():
                    reward[only_truncated] += args.gamma * agent.get_value(final_obs).cpu().numpy()
            rewards_buf[step] = torch.as_tensor(reward, device=device)
            dones_buf[step] = torch.as_tensor(done, dtype=torch.float32, device=device)
            next_obs = torch.as_tensor(obs, dtype=torch.float32, device=device)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Advantages: n-step / GAE, bootstrapped from the observation after the rollout
        with torch.no_grad():
            last_value = agent.get_value(next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Update: one gradient step on the whole batch
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_actions = actions_buf.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1),
            returns.reshape(-1),
            values_buf.reshape(-1),
        )
        logp, entropy, value = agent.evaluate_actions(b_obs, b_actions)
        if args.norm_adv:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)
        loss, pg_loss, v_loss, entropy_loss = a2c_loss(
            logp, entropy, value, b_advantages, b_returns, args.vf_coef, args.ent_coef
        )
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        stats = {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy_loss.item()}

        # ---- 5. Logging
        var_returns = b_returns.var().item()
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
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
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": stats,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(agent.state_dict(), model_path)
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
