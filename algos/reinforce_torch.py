"""REINFORCE (Monte Carlo policy gradient) with reward-to-go and a learned baseline -- the PyTorch twin.

One complete episode per environment, then one gradient step on -mean_t(log pi(a_t | s_t) w_t), w_t
the reward-to-go G_t (or G_0) minus a learned V(s_t) (or not); every update also logs the variance
of all four estimators on the same batch.
Papers: Williams 1992, "Simple Statistical Gradient-Following Algorithms for Connectionist
        Reinforcement Learning", Machine Learning 8; Sutton et al. 1999, "Policy Gradient Methods for
        Reinforcement Learning with Function Approximation", NeurIPS.
Twin:   algos/reinforce_jax.py (`diff algos/reinforce_torch.py algos/reinforce_jax.py`: the framework).
Docs:   docs/algorithms/reinforce.md
Run:    python algos/reinforce_torch.py --seed 1
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
    total_timesteps: int = 300_000
    """total recorded environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments = complete episodes per gradient step"""
    learning_rate: float = 1e-3
    """Adam learning rate (policy and baseline)"""
    gamma: float = 0.99
    """discount factor"""
    reward_to_go: bool = True
    """weight log pi(a_t | s_t) by the return from t on (False: by the whole episode's return)"""
    baseline: bool = True
    """subtract a learned state-value baseline V(s_t) from the weights"""
    norm_adv: bool = True
    """normalise the weights over the batch (mean 0, std 1)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_timesteps=1000, num_envs=4, save_model=True, eval_episodes=2)


# ----------------------------------------------------------------------------- pure math
def returns_to_go(rewards, dones, gamma):
    """Discounted return from each step on, (T, N) arrays, backwards:
        G_t = r_t + gamma * (1 - done_t) * G_{t+1},   G_T = 0
    dones[t] = 1 on the last step of an episode, so nothing flows across an episode boundary (a
    truncation's bootstrap value, if any, is already folded into rewards[t])."""
    num_steps = rewards.shape[0]
    returns = torch.zeros_like(rewards)
    next_return = torch.zeros_like(rewards[0])
    for t in reversed(range(num_steps)):
        next_return = rewards[t] + gamma * (1.0 - dones[t]) * next_return
        returns[t] = next_return
    return returns


def categorical_log_prob(logits, actions):
    """log pi(a | s) of integer actions under softmax(logits)."""
    logp_all = torch.log_softmax(logits, dim=-1)
    return logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def reinforce_loss(logp, weights, mask):
    """The score-function surrogate as a loss: -sum(mask * logp * w) / sum(mask). Its gradient is
    minus the REINFORCE estimate mean_t grad log pi(a_t | s_t) w_t over the recorded steps; the
    weights are constants (no gradient flows into them)."""
    return -(mask * logp * weights.detach()).sum() / mask.sum()


def masked_normalize(x, mask):
    """(x - mean) / (std + 1e-8) over the recorded steps; unrecorded steps come out as 0."""
    count = mask.sum()
    mean = (x * mask).sum() / count
    std = torch.sqrt((((x - mean) * mask) ** 2).sum() / (count - 1))
    return mask * (x - mean) / (std + 1e-8)


def output_layer_score(hidden, logits, actions):
    """grad log pi(a | s) with respect to the policy's output layer (logits = W h + b), in closed
    form: d log pi(a|s) / d logits = onehot(a) - softmax(logits), so the score is
    (onehot(a) - pi(s)) outer h for W (flattened as (num_actions, hidden), row by row) followed by
    onehot(a) - pi(s) for b. hidden (..., H), logits (..., A), actions (...) -> (..., A * H + A)."""
    delta = nn.functional.one_hot(actions.long(), logits.shape[-1]).to(logits.dtype) - torch.softmax(
        logits, dim=-1
    )
    weight_score = (delta[..., :, None] * hidden[..., None, :]).reshape(delta.shape[:-1] + (-1,))
    return torch.cat([weight_score, delta], dim=-1)


def estimator_variance(scores, weights, mask):
    """Variance across episodes of the single-episode policy-gradient estimate, the trace of its
    covariance. Column e of the (T, N) batch is episode e: g_e = sum_t mask w_t s_t with s_t the
    per-step score (scores (T, N, D)), and the result is sum_e ||g_e - mean_e g||^2 / (N - 1)."""
    per_episode = ((mask * weights)[..., None] * scores).sum(0)
    deviation = per_episode - per_episode.mean(0)
    return (deviation**2).sum() / (per_episode.shape[0] - 1)


# ----------------------------------------------------------------------------- networks
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLP(nn.Sequential):
    """64-64 tanh trunk and a linear head; the policy and the baseline are two separate MLPs."""

    def __init__(self, in_dim, out_dim, head_std):
        super().__init__(
            layer_init(nn.Linear(in_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, out_dim), std=head_std),
        )

    def forward(self, x, return_hidden=False):
        for layer in list(self)[:-1]:
            x = layer(x)
        out = self[-1](x)
        return (x, out) if return_hidden else out  # the last hidden layer too, for output_layer_score


class Agent(nn.Module):
    """Separate 64-64 tanh policy and baseline (the baseline is unused with --no-baseline)."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.critic = MLP(obs_dim, out_dim=1, head_std=1.0)
        self.actor = MLP(obs_dim, out_dim=num_actions, head_std=0.01)

    def get_value(self, obs):
        return self.critic(obs).squeeze(-1)

    def actor_hidden_and_logits(self, obs):
        """The policy's last hidden layer h and its logits W h + b (what output_layer_score needs)."""
        return self.actor(obs, return_hidden=True)

    def act(self, obs):
        """Sample actions from the policy."""
        logits = self.actor(obs)
        return torch.multinomial(torch.softmax(logits, dim=-1), 1).squeeze(-1)


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
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_timesteps", args.total_timesteps >= 1, ">= 1"),
        ("num_envs", args.num_envs >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.norm_adv and args.num_envs < 2:
        raise ValueError(f"--norm-adv needs --num-envs >= 2 episodes per batch (got {args.num_envs})")
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
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)

    @torch.no_grad()
    def measure(obs, actions, returns, mask):
        """The variance across the batch's episodes of the four single-episode gradient estimates,
        on the same batch and at the parameters the update differentiates at: weights G_0 ("plain"),
        G_t ("rtg"), and with --baseline G_0 - V(s_t) ("baseline") and G_t - V(s_t) ("rtg_baseline"),
        unnormalised, from the same returns (truncation bootstrap included) as the update. The
        gradient is taken with respect to the policy's output layer only (output_layer_score)."""
        hidden, logits = agent.actor_hidden_and_logits(obs)
        scores = output_layer_score(hidden, logits, actions)
        weights = {"plain": returns[0].expand_as(returns), "rtg": returns}
        if args.baseline:
            values = agent.get_value(obs)
            weights.update(baseline=weights["plain"] - values, rtg_baseline=returns - values)
        return {f"grad_var_{name}": estimator_variance(scores, w, mask).item() for name, w in weights.items()}

    episode_returns, recent = [], []
    global_step, iteration, last_print = 0, 0, 0.0
    stats = {}
    grad_variances = {}  # name -> the logged variance of each update, for the summary's medians
    start_time = time.time()
    reset_seed = args.seed

    while global_step < args.total_timesteps:
        iteration += 1
        # ---- 2. Rollout: one complete episode per environment, (T, N) lists of the recorded steps
        next_obs, _ = envs.reset(seed=reset_seed)
        reset_seed = None  # seeded once; later resets continue the environments' generators
        active = np.ones(args.num_envs, dtype=bool)
        obs_l, actions_l, rewards_l, dones_l, mask_l = [], [], [], [], []
        ep_return = np.zeros(args.num_envs)
        while active.any():
            obs_t = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
            with torch.no_grad():
                action = agent.act(obs_t)
            next_obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            done = (terminated | truncated) & active
            reward = np.where(active, reward, 0.0).astype(np.float32)
            ep_return += reward
            # Time-limit truncation is not a real end: with a baseline, the return goes on as
            # gamma * V(final_obs), folded into this step's reward. Without a baseline there is no
            # estimate of it and the episode is cut there.
            only_truncated = truncated & ~terminated & active
            if args.baseline and only_truncated.any():
                final_obs = torch.as_tensor(
                    np.stack(infos["final_obs"][only_truncated]), dtype=torch.float32, device=device
                )
                with torch.no_grad():
                    reward[only_truncated] += args.gamma * agent.get_value(final_obs).cpu().numpy()
            obs_l.append(obs_t)
            actions_l.append(action)
            rewards_l.append(reward)
            dones_l.append(done.astype(np.float32))
            mask_l.append(active.astype(np.float32))
            global_step += int(active.sum())
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", len(obs_l), global_step)
            active &= ~done

        # ---- 3. Batch: the recorded steps as (T, N) arrays
        obs_b = torch.stack(obs_l)
        actions_b = torch.stack(actions_l)
        rewards_b = torch.as_tensor(np.stack(rewards_l), device=device)
        dones_b = torch.as_tensor(np.stack(dones_l), device=device)
        mask_b = torch.as_tensor(np.stack(mask_l), device=device)

        # Weights: reward-to-go (or the episode return G_0 at every step); minus V(s_t) in the update
        returns = returns_to_go(rewards_b, dones_b, args.gamma)
        weights = returns if args.reward_to_go else returns[0].expand_as(returns)

        # ---- 4. Estimator variance: the four estimators on this batch, measured, not used by the update
        # No random numbers are drawn; with --no-baseline there is no V, only "plain" and "rtg".
        measured = (
            measure(obs_b, actions_b, returns, mask_b) if args.num_envs >= 2 else {}
        )  # a variance needs 2 episodes

        # ---- 5. Update: one gradient step on the policy (and the baseline's regression on the returns)
        logp = categorical_log_prob(agent.actor(obs_b), actions_b)
        values = agent.get_value(obs_b)
        if args.baseline:
            weights = weights - values.detach()
        raw_weights = weights
        if args.norm_adv:
            weights = masked_normalize(weights, mask_b)
        pg_loss = reinforce_loss(logp, weights, mask_b)
        v_loss = 0.5 * ((values - returns) ** 2 * mask_b).sum() / mask_b.sum()
        loss = pg_loss + v_loss if args.baseline else pg_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        with torch.no_grad():
            count = mask_b.sum()
            w_mean = (raw_weights * mask_b).sum() / count
            probs = torch.softmax(agent.actor(obs_b), dim=-1)
            entropy = -(probs * torch.log(probs + 1e-12)).sum(-1)
            stats = {
                "policy_loss": pg_loss.item(),
                "value_loss": v_loss.item(),
                "entropy": ((entropy * mask_b).sum() / count).item(),
                # spread of the unnormalised weights over the steps (not the gradient's: grad_var_*)
                "weight_variance": ((((raw_weights - w_mean) * mask_b) ** 2).sum() / (count - 1)).item(),
            }

        # ---- 6. Logging
        stats = {name: float(value) for name, value in {**stats, **measured}.items()}
        for name, value in measured.items():
            grad_variances.setdefault(name.removeprefix("grad_var_"), []).append(float(value))
        sps = int(global_step / (time.time() - start_time))
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or global_step >= args.total_timesteps):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.1f}  "
                f"SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    # ---- 7. Summary: close, save, evaluate
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
        # median over the updates of each estimator's variance (losses/grad_var_*)
        "grad_variance": {
            name: float(np.median(grad_variances[name]))
            for name in ("plain", "rtg", "baseline", "rtg_baseline")
            if name in grad_variances
        },
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
