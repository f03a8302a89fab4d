"""IQL: Implicit Q-Learning, offline RL that never queries an action outside the data -- the PyTorch twin.

V(s) is fitted by expectile regression to min(Q1', Q2')(s, a) at the data's actions, the twin critics
regress on r + gamma (1 - terminal) V(s'), and the policy by advantage-weighted regression, weights
exp(beta (Q - V)). States are normalised by the dataset's statistics (saved with the model); a timeout
bootstraps, only a termination cuts; the evaluation plays the Gaussian policy's mean.
Paper:  Kostrikov, Nair & Levine 2021, "Offline Reinforcement Learning with Implicit Q-Learning",
        arXiv:2110.06169.
Twin:   algos/iql_jax.py (`diff algos/iql_torch.py algos/iql_jax.py` shows only the framework).
Docs:   docs/algorithms/iql.md
Run:    python algos/iql_torch.py --dataset pointmaze-stitch --expectile 0.9 --beta 10 --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter

import offline_data


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the evaluation environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    dataset: str = "pendulum-medium"
    """offline dataset (algos/offline_data.py); Box actions only"""
    total_steps: int = 10_000
    """gradient steps (each: one value, one actor and one critic update)"""
    batch_size: int = 256
    """transitions per gradient step, drawn uniformly from the dataset"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """Polyak coefficient of the target critics: target <- tau * online + (1 - tau) * target"""
    learning_rate: float = 3e-4
    """Adam learning rate of the value network, the critics and the actor (constant; paper: actor's decays)"""
    expectile: float = 0.7
    """expectile of the value regression: 0.5 fits the mean of Q over the data's actions, -> 1 the max"""
    beta: float = 3.0
    """inverse temperature of the advantage weights exp(beta (Q - V))"""
    max_weight: float = 100.0
    """the advantage weights are clamped at this value"""
    hidden_size: int = 128
    """width of the two hidden layers of every network (paper: 256)"""
    eval_every: int = 1_000
    """gradient steps between evaluations"""
    eval_episodes: int = 10
    """episodes per evaluation (and for the saved-model evaluation)"""
    save_model: bool = False
    """save the trained parameters and the state statistics to the run directory and evaluate them"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_steps=60, batch_size=32, hidden_size=32, eval_every=30, eval_episodes=1, save_model=True
)

LOG_EVERY = 100  # gradient steps between logged losses (and the JAX twin's scan length)
STATE_EPS = 1e-3  # added to the dataset's state std
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the policy's log-std is clipped to this range


# ----------------------------------------------------------------------------- pure math
def state_normalizer(observations, eps=STATE_EPS):
    """(mean, std + eps) of the dataset's states, per dimension (numpy, population std). A constant
    dimension gets std eps, not 0: its normalised value is 0 instead of a division by zero."""
    return observations.mean(0).astype(np.float32), (observations.std(0) + eps).astype(np.float32)


def prepare_dataset(data, state_mean, state_std):
    """The arrays the update reads (numpy): states normalised, and the target's done flag from
    `terminals` alone: a timeout is where the collector stopped, not the end of the task, so its s'
    is bootstrapped from like any other."""
    return {
        "obs": ((data["observations"] - state_mean) / state_std).astype(np.float32),
        "next_obs": ((data["next_observations"] - state_mean) / state_std).astype(np.float32),
        "actions": data["actions"].astype(np.float32),
        "rewards": data["rewards"].astype(np.float32),
        "terminals": data["terminals"].astype(np.float32),
    }


def expectile_loss(diff, expectile):
    """Mean of |tau - 1(u < 0)| u^2 over u = Q - V: a positive error (V below Q) weighs tau, a negative
    one 1 - tau. Minimised over V, it gives the tau-expectile of Q: tau 0.5 the mean, tau -> 1 the max."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff**2).mean()


def iql_target(rewards, terminals, next_v, gamma):
    """r + gamma * (1 - terminals) * V(s'): the critics bootstrap from the value network, never from
    Q at an action the data did not take."""
    return rewards + gamma * (1.0 - terminals) * next_v


def critic_losses(q1, q2, target):
    """Mean squared Bellman errors of the two critics against the same (no-gradient) target."""
    return ((q1 - target) ** 2).mean(), ((q2 - target) ** 2).mean()


def advantage_weights(advantages, beta, max_weight):
    """min(exp(beta A), max_weight), a constant to the gradient. exp(+large) overflows to inf and is
    clamped like any other large weight."""
    return torch.clamp(torch.exp(beta * advantages.detach()), max=max_weight)


def gaussian_log_prob(mean, log_std, actions):
    """log N(a; mean, diag(exp(log_std))^2), summed over the action dimensions."""
    z = (actions - mean) / torch.exp(log_std)
    return (-0.5 * z**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)


def awr_actor_loss(log_probs, advantages, beta, max_weight):
    """-mean of min(exp(beta A), max_weight) * log pi(a|s) on the data's actions: weighted behaviour
    cloning, the weights growing with the advantage A = Q - V. Returns (loss, mean weight)."""
    weights = advantage_weights(advantages, beta, max_weight)
    return -(weights * log_probs).mean(), weights.mean()


# ----------------------------------------------------------------------------- networks
def layer_init(layer):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the JAX twin does the same)."""
    nn.init.kaiming_uniform_(layer.weight, a=np.sqrt(5))
    nn.init.zeros_(layer.bias)
    return layer


class QNetwork(nn.Module):
    """Q(s, a): the concatenated (normalised) observation and action through a hidden-hidden ReLU MLP."""

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


class ValueNetwork(nn.Module):
    """V(s): the (normalised) observation through a hidden-hidden ReLU MLP."""

    def __init__(self, obs_dim, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, 1)),
        )

    def forward(self, obs):
        return self.net(obs).squeeze(-1)


class Actor(nn.Module):
    """Gaussian policy: mean = scale * tanh(MLP(s)) + bias (inside any finite Box), log-std a free
    parameter per action dimension (state-independent, clipped to [LOG_STD_MIN, LOG_STD_MAX])."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, action_dim)),
        )
        self.log_std = nn.Parameter(torch.zeros(action_dim))
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))

    def forward(self, obs):
        """(mean, log_std); the deterministic policy of the evaluation is the mean."""
        mean = torch.tanh(self.net(obs)) * self.action_scale + self.action_bias
        return mean, torch.clamp(self.log_std, LOG_STD_MIN, LOG_STD_MAX)


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError). Returns the
    dataset's info."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("tau", 0 < args.tau <= 1, "in (0, 1]"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("expectile", 0 < args.expectile < 1, "in (0, 1) (0.5 fits the mean)"),
        ("beta", args.beta >= 0, ">= 0 (0 is behaviour cloning)"),
        ("max_weight", args.max_weight > 0, "> 0"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    info = offline_data.dataset_info(args.dataset)
    if info["discrete"]:
        raise ValueError(
            f"--dataset {args.dataset} has discrete actions; IQL's Gaussian policy needs Box actions. "
            f"For discrete offline data use algos/cql_torch.py --discrete"
        )
    return info


def run_episodes(policy, env_id, episodes, seed, state_mean, state_std):
    """The deterministic policy on the normalised states, `episodes` environments in lockstep (one
    batched forward pass per step); episode i is seeded seed + i. Returns the undiscounted returns."""
    envs = [offline_data.make_env(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    totals, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        actions = policy(((obs - state_mean) / state_std).astype(np.float32))
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return totals


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved actor and state statistics into a fresh network; run the deterministic policy."""
    saved = torch.load(model_path, map_location="cpu")
    space = offline_data.make_env(env_id).action_space
    state_mean, state_std = saved["state_mean"].numpy(), saved["state_std"].numpy()
    actor = Actor(
        len(state_mean),
        int(np.prod(space.shape)),
        hidden_size,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
    )
    actor.load_state_dict(saved["actor"])

    def policy(obs):
        with torch.no_grad():
            return actor(torch.as_tensor(obs))[0].numpy()

    return run_episodes(policy, env_id, eval_episodes, seed, state_mean, state_std)


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

    # Seeding: python, numpy, torch and the evaluation environments (episode i gets seed + 10_000 + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    # Intra-op threads: at most two; a caller's OMP_NUM_THREADS=1 (the tests set it) is kept.
    torch.set_num_threads(min(2, torch.get_num_threads()))
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)

    # The data: states normalised by the dataset's own statistics, kept on the device
    data = offline_data.load_dataset(args.dataset)
    state_mean, state_std = state_normalizer(data["observations"])
    arrays = prepare_dataset(data, state_mean, state_std)
    dataset = {k: torch.as_tensor(v, device=device) for k, v in arrays.items()}
    size = len(arrays["rewards"])

    space = offline_data.make_env(env_id).action_space
    obs_dim, action_dim = arrays["obs"].shape[1], int(np.prod(space.shape))
    actor = Actor(
        obs_dim, action_dim, args.hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
    )
    vf = ValueNetwork(obs_dim, args.hidden_size)
    qf1, qf2 = (
        QNetwork(obs_dim, action_dim, args.hidden_size),
        QNetwork(obs_dim, action_dim, args.hidden_size),
    )
    qf1_target, qf2_target = (
        QNetwork(obs_dim, action_dim, args.hidden_size),
        QNetwork(obs_dim, action_dim, args.hidden_size),
    )
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    for net in (actor, vf, qf1, qf2, qf1_target, qf2_target):
        net.to(device)
    q_params = list(qf1.parameters()) + list(qf2.parameters())
    target_params = list(qf1_target.parameters()) + list(qf2_target.parameters())
    v_optimizer = torch.optim.Adam(vf.parameters(), lr=args.learning_rate)
    q_optimizer = torch.optim.Adam(q_params, lr=args.learning_rate)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate)

    def policy(obs):
        with torch.no_grad():
            return actor(torch.as_tensor(obs, device=device))[0].cpu().numpy()

    episode_returns, losses, last_print, mean_return = [], {}, 0.0, float("nan")
    start_time = time.time()
    step = 0
    while step < args.total_steps:
        # ---- 2. Update: a block of gradient steps up to the next log point, evaluation or the end; the
        # minibatch indices of the whole block are drawn at once (numpy, the same in both twins)
        block = min(
            LOG_EVERY - step % LOG_EVERY, args.eval_every - step % args.eval_every, args.total_steps - step
        )
        idx = torch.as_tensor(rng.integers(0, size, size=(block, args.batch_size)), device=device)
        for rows in idx:
            b = {k: v[rows] for k, v in dataset.items()}
            # Value: V(s) towards the upper expectile of min(Q1', Q2')(s, a) over the data's actions
            with torch.no_grad():
                target_q = torch.min(qf1_target(b["obs"], b["actions"]), qf2_target(b["obs"], b["actions"]))
            v = vf(b["obs"])
            value_loss = expectile_loss(target_q - v, args.expectile)
            v_optimizer.zero_grad()
            value_loss.backward()
            v_optimizer.step()

            # Actor: advantage-weighted log-likelihood of the data's actions (A with the new V)
            with torch.no_grad():
                advantages = target_q - vf(b["obs"])
            mean, log_std = actor(b["obs"])
            actor_loss, mean_weight = awr_actor_loss(
                gaussian_log_prob(mean, log_std, b["actions"]), advantages, args.beta, args.max_weight
            )
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()

            # Critics: r + gamma (1 - terminals) V(s'), then the Polyak targets
            with torch.no_grad():
                target = iql_target(b["rewards"], b["terminals"], vf(b["next_obs"]), args.gamma)
            q1, q2 = qf1(b["obs"], b["actions"]), qf2(b["obs"], b["actions"])
            qf1_loss, qf2_loss = critic_losses(q1, q2, target)
            q_optimizer.zero_grad()
            (qf1_loss + qf2_loss).backward()
            q_optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(target_params, q_params, args.tau)  # target += tau * (online - target)
        step += block

        if step % LOG_EVERY == 0 or step == args.total_steps:
            step_losses = {
                "value_loss": value_loss,
                "qf1_loss": qf1_loss,
                "qf2_loss": qf2_loss,
                "actor_loss": actor_loss,
                "v_values": v.mean(),
                "qf1_values": q1.mean(),
                "advantage": advantages.mean(),
                "mean_weight": mean_weight,
                "log_std": log_std.mean(),
            }
            losses = {name: value.item() for name, value in step_losses.items()}
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar("charts/SPS", int(step / (time.time() - start_time)), step)

        # ---- 3. Evaluation: the deterministic policy (the mean), episode i seeded seed + 10_000 + i
        if step % args.eval_every == 0 or step == args.total_steps:
            returns = run_episodes(
                policy, env_id, args.eval_episodes, args.seed + 10_000, state_mean, state_std
            )
            mean_return = float(returns.mean())
            for r in returns:
                episode_returns.append((step, float(r)))
                writer.add_scalar("eval/episodic_return", r, step)
            writer.add_scalar(
                "eval/normalized_score", float(offline_data.normalized_score(args.dataset, mean_return)), step
            )
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>7,d}/{args.total_steps:,d}  eval return {mean_return:7.2f}  "
                f"SPS {int(step / (time.time() - start_time)):5,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 4. Summary
    wall_time = time.time() - start_time
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, mean_return)),
        "sps": args.total_steps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(
            {
                "actor": actor.state_dict(),
                "vf": vf.state_dict(),
                "qf1": qf1.state_dict(),
                "qf2": qf2.state_dict(),
                "state_mean": torch.as_tensor(state_mean),
                "state_std": torch.as_tensor(state_std),
            },
            model_path,
        )
        eval_returns = evaluate(model_path, env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size)
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
