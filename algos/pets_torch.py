"""PETS: probabilistic ensembles with trajectory sampling, CEM model-predictive control -- the PyTorch twin.

No policy and no value function: an ensemble of probabilistic networks learns the dynamics, and at
every environment step the cross-entropy method searches action sequences through it (trajectory
sampling TS-1, the task's known reward), executes the first action of the best plan and replans.
Paper:  Chua, Calandra, McAllister & Levine 2018, "Deep Reinforcement Learning in a Handful of
        Trials using Probabilistic Dynamics Models", arXiv:1805.12114.
Twin:   algos/pets_jax.py (`diff algos/pets_torch.py algos/pets_jax.py` shows only the framework).
Docs:   docs/algorithms/pets.md
Run:    python algos/pets_torch.py --seed 1
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
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "Pendulum-v1"
    """gymnasium environment id (Box actions; its reward function must be known to this script)"""
    total_timesteps: int = 3_000
    """total environment steps (Pendulum-v1: 200 a episode, so 3,000 = 15 episodes)"""
    warmup_episodes: int = 1
    """episodes of uniformly random actions before the first model fit"""
    ensemble_size: int = 5
    """number of probabilistic networks in the dynamics ensemble"""
    hidden_size: int = 64
    """width of the three hidden layers of each member (paper: 200 to 500)"""
    model_lr: float = 1e-3
    """Adam learning rate of the ensemble"""
    model_updates: int = 300
    """Adam steps of the ensemble after each episode, on all the data so far (paper: 5 epochs)"""
    model_batch_size: int = 64
    """transitions per member per gradient step, from the member's bootstrap resample (paper: 32)"""
    logvar_bound_coef: float = 0.01
    """weight of the penalty sum(max_logvar) - sum(min_logvar) that keeps the soft bounds tight"""
    horizon: int = 25
    """planning horizon of the MPC: imagined steps per candidate action sequence"""
    population: int = 100
    """candidate action sequences per CEM iteration (paper: 400 to 500)"""
    num_elites: int = 10
    """best candidates that CEM refits its mean and std to (paper: 40 to 50)"""
    cem_iterations: int = 5
    """CEM iterations per environment step"""
    cem_smoothing: float = 0.1
    """CEM refit: new = smoothing * old + (1 - smoothing) * elite statistic"""
    particles: int = 2
    """imagined trajectories per candidate, each through random members (TS-1; paper: 20)"""
    save_model: bool = False
    """save the trained ensemble (and its normalisation) to the run directory and evaluate the MPC"""
    eval_episodes: int = 10
    """episodes of the evaluation after --save-model (the MPC with the saved model)"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    total_timesteps=300,
    warmup_episodes=1,
    ensemble_size=2,
    hidden_size=16,
    model_updates=5,
    horizon=3,
    population=8,
    num_elites=2,
    cem_iterations=2,
    particles=2,
    save_model=True,
    eval_episodes=1,
)

MAX_LOGVAR_INIT, MIN_LOGVAR_INIT = 0.5, -10.0
# The environments whose reward this script knows, as a function of (s, a): see pendulum_reward.
KNOWN_REWARDS = ("Pendulum-v1",)


# ----------------------------------------------------------------------------- pure math
def pendulum_reward(obs, action):
    """Pendulum-v1's reward from the observation before the step, (cos th, sin th, thdot), and the
    action: -(th^2 + 0.1 thdot^2 + 0.001 u^2), th = atan2(sin, cos) in (-pi, pi] (the environment's
    angle_normalize), u the torque clipped into [-2, 2]."""
    th = torch.atan2(obs[..., 1], obs[..., 0])
    u = torch.clamp(action[..., 0], -2.0, 2.0)
    return -(th**2 + 0.1 * obs[..., 2] ** 2 + 0.001 * u**2)


def soft_bound_logvar(raw, max_logvar, min_logvar):
    """Squeeze a raw log-variance softly into [min_logvar, max_logvar] (PETS appendix A.1):
    first max - softplus(max - raw) (at most max, ~raw far below it), then
    min + softplus(. - min) (at least min). Smooth, so the gradient never vanishes at a hard clip."""
    logvar = max_logvar - F.softplus(max_logvar - raw)
    return min_logvar + F.softplus(logvar - min_logvar)


def gaussian_nll(mean, logvar, target):
    """Negative log-likelihood of target under N(mean, exp(logvar)), diagonal: summed over the last
    (output) axis, averaged over all the others (members, batch):

        0.5 * sum_d [ (y_d - mu_d)^2 exp(-logvar_d) + logvar_d + log(2 pi) ].
    """
    per_dim = (target - mean) ** 2 * torch.exp(-logvar) + logvar + np.log(2.0 * np.pi)
    return 0.5 * per_dim.sum(-1).mean()


def ensemble_loss(mean, logvar, target, max_logvar, min_logvar, bound_coef):
    """The ensemble's training loss: the Gaussian NLL plus bound_coef * (sum max_logvar - sum min_logvar),
    which pulls the learnable soft bounds towards each other (otherwise max could grow freely)."""
    return gaussian_nll(mean, logvar, target) + bound_coef * (max_logvar.sum() - min_logvar.sum())


def ts1_group(x, perm, ensemble_size):
    """TS-1 routing: the rows of x (N, d) in the order perm, split into ensemble_size equal groups
    (E, N / E, d); group e goes through member e, so each row meets a uniformly random member."""
    return x[perm].reshape(ensemble_size, -1, x.shape[-1])


def ts1_ungroup(y, perm):
    """Undo ts1_group: (E, N / E, d) back to (N, d) in the original row order."""
    flat = y.reshape(-1, y.shape[-1])
    return torch.empty_like(flat).index_copy_(0, perm, flat)


def cem_refit(samples, values, mean, std, num_elites, smoothing):
    """One CEM refit: the num_elites samples (population, horizon, action_dim) with the highest values
    (population,), their mean and (population) std, blended with the old ones:
    new = smoothing * old + (1 - smoothing) * elite statistic."""
    elites = samples[torch.topk(values, num_elites).indices]
    new_mean = smoothing * mean + (1.0 - smoothing) * elites.mean(0)
    new_std = smoothing * std + (1.0 - smoothing) * elites.std(0, unbiased=False)
    return new_mean, new_std


def cem_optimize(objective, mean, std, low, high, noise, num_elites, smoothing):
    """The cross-entropy method over action sequences. noise (iterations, population, horizon,
    action_dim) holds standard normal draws; each iteration samples clip(mean + std * noise[i], low,
    high), scores them with objective(samples, i) -> (population,) and refits mean and std to the
    elites. Returns the final mean (horizon, action_dim): MPC executes its first action."""
    for i in range(noise.shape[0]):
        samples = torch.clamp(mean + std * noise[i], low, high)
        mean, std = cem_refit(samples, objective(samples, i), mean, std, num_elites, smoothing)
    return mean


def shift_mean(mean, fill):
    """Warm start of the next step's CEM: drop the executed first action, append fill (the middle of
    the action range) at the end."""
    return torch.cat([mean[1:], fill[None]], 0)


# ----------------------------------------------------------------------------- networks
class EnsembleLinear(nn.Module):
    """ensemble_size independent linear layers applied at once: x (E, N, in) -> (E, N, out), one
    batched matmul. torch's default weights per member, uniform in +-1/sqrt(fan_in); zero biases
    (the JAX twin does the same)."""

    def __init__(self, ensemble_size, in_features, out_features):
        super().__init__()
        bound = 1.0 / np.sqrt(in_features)
        self.weight = nn.Parameter(
            torch.empty(ensemble_size, in_features, out_features).uniform_(-bound, bound)
        )
        self.bias = nn.Parameter(torch.zeros(ensemble_size, 1, out_features))

    def forward(self, x):
        return torch.baddbmm(self.bias, x, self.weight)


class ProbabilisticEnsemble(nn.Module):
    """E members, each an MLP with three SiLU (swish) hidden layers mapping the normalised input to
    the mean and the soft-bounded log-variance of a diagonal Gaussian over the normalised target.
    max_logvar / min_logvar are learnable, one per output dimension, shared by the members.
    The normalisation statistics live in buffers, so they are saved with the weights."""

    def __init__(self, ensemble_size, in_dim, out_dim, hidden_size):
        super().__init__()
        self.ensemble_size, self.out_dim = ensemble_size, out_dim
        self.layers = nn.ModuleList(
            [
                EnsembleLinear(ensemble_size, in_dim, hidden_size),
                EnsembleLinear(ensemble_size, hidden_size, hidden_size),
                EnsembleLinear(ensemble_size, hidden_size, hidden_size),
                EnsembleLinear(ensemble_size, hidden_size, 2 * out_dim),
            ]
        )
        self.max_logvar = nn.Parameter(torch.full((out_dim,), MAX_LOGVAR_INIT))
        self.min_logvar = nn.Parameter(torch.full((out_dim,), MIN_LOGVAR_INIT))
        for name, dim in (("in_mean", in_dim), ("out_mean", out_dim)):
            self.register_buffer(name, torch.zeros(dim))
        for name, dim in (("in_std", in_dim), ("out_std", out_dim)):
            self.register_buffer(name, torch.ones(dim))

    def forward(self, x):
        """Normalised inputs (E, N, in) -> normalised (mean, logvar), each (E, N, out)."""
        for layer in self.layers[:-1]:
            x = F.silu(layer(x))
        out = self.layers[-1](x)
        mean, raw = out[..., : self.out_dim], out[..., self.out_dim :]
        return mean, soft_bound_logvar(raw, self.max_logvar, self.min_logvar)

    def set_normalizer(self, inputs, targets):
        """Mean and std of the raw inputs and targets (std floored at 1e-6)."""
        for name, data in (("in", inputs), ("out", targets)):
            getattr(self, f"{name}_mean").copy_(torch.as_tensor(data.mean(0)))
            getattr(self, f"{name}_std").copy_(torch.as_tensor(np.maximum(data.std(0), 1e-6)))

    def sample(self, x, eps):
        """Raw inputs (E, N, in), standard normal eps (E, N, out) -> a raw target sample
        out_mean + out_std * (mean + exp(logvar / 2) * eps), one per row from its member."""
        mean, logvar = self((x - self.in_mean) / self.in_std)
        return self.out_mean + self.out_std * (mean + torch.exp(0.5 * logvar) * eps)


def fit_ensemble(model, optimizer, inputs, targets, num_updates, batch_size, bound_coef, rng):
    """num_updates Adam steps on ensemble_loss. Each member gets its own bootstrap resample of the
    N rows (N draws with replacement, from rng), and each step draws its own minibatch from it.
    Normalisation statistics are refreshed from all the data first. Returns the last loss."""
    model.set_normalizer(inputs, targets)
    n, E = len(inputs), model.ensemble_size
    device = model.in_mean.device  # the data moves to the model's device; rng stays on the host
    x = (torch.as_tensor(inputs, device=device) - model.in_mean) / model.in_std
    y = (torch.as_tensor(targets, device=device) - model.out_mean) / model.out_std
    bootstrap = torch.as_tensor(rng.integers(0, n, size=(E, n)), device=device)
    loss = torch.zeros((), device=device)
    for _ in range(num_updates):
        idx = torch.gather(
            bootstrap, 1, torch.as_tensor(rng.integers(0, n, size=(E, batch_size)), device=device)
        )
        mean, logvar = model(x[idx])
        loss = ensemble_loss(mean, logvar, y[idx], model.max_logvar, model.min_logvar, bound_coef)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


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
    last observation is infos["final_obs"][i]. The model learns s' - s from that one."""
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
        ("warmup_episodes", args.warmup_episodes >= 1, ">= 1"),
        ("ensemble_size", args.ensemble_size >= 1, ">= 1"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("model_lr", args.model_lr > 0, "> 0"),
        ("model_updates", args.model_updates >= 1, ">= 1"),
        ("model_batch_size", args.model_batch_size >= 1, ">= 1"),
        ("logvar_bound_coef", args.logvar_bound_coef >= 0, ">= 0"),
        ("horizon", args.horizon >= 1, ">= 1"),
        ("population", args.population >= 1, ">= 1"),
        ("num_elites", args.num_elites >= 1, ">= 1"),
        ("cem_iterations", args.cem_iterations >= 1, ">= 1"),
        ("cem_smoothing", 0 <= args.cem_smoothing < 1, "in [0, 1)"),
        ("particles", args.particles >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("num_elites", args.num_elites <= args.population, "<= --population"),
        # TS-1 sends equal groups of the population * particles rows through the members
        (
            "population",
            args.ensemble_size >= 1 and args.population * args.particles % args.ensemble_size == 0,
            "such that --population * --particles is a multiple of --ensemble-size",
        ),
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
    if args.env_id not in KNOWN_REWARDS:
        raise ValueError(
            f"--env-id {args.env_id}: PETS plans with the task's known reward function, and this script "
            f"knows it for {', '.join(KNOWN_REWARDS)} only"
        )


class Planner:
    """CEM model-predictive control through the ensemble with TS-1 trajectory sampling."""

    def __init__(self, model, args, low, high):
        self.model, self.args = model, args
        self.device = model.in_mean.device  # plan where the model lives
        self.low, self.high = (
            torch.as_tensor(low, device=self.device),
            torch.as_tensor(high, device=self.device),
        )
        self.fill = (self.low + self.high) / 2.0
        self.init_std = (self.high - self.low) / 4.0
        self.mean = self.fill.repeat(args.horizon, 1)

    def returns(self, obs, samples):
        """Expected return of each candidate (population, horizon, action_dim) from obs: the known
        reward summed along `particles` imagined trajectories per candidate, averaged over them."""
        a, E, P = self.args, self.model.ensemble_size, self.args.particles
        actions = samples.repeat_interleave(P, 0)  # (population * P, horizon, action_dim)
        state = obs.expand(actions.shape[0], -1)
        total = torch.zeros(actions.shape[0], device=self.device)
        for t in range(a.horizon):
            total = total + pendulum_reward(state, actions[:, t])
            perm = torch.randperm(actions.shape[0], device=self.device)
            x = ts1_group(torch.cat([state, actions[:, t]], -1), perm, E)
            delta = self.model.sample(x, torch.randn(E, x.shape[1], state.shape[-1], device=self.device))
            state = state + ts1_ungroup(delta, perm)
        return total.reshape(-1, P).mean(1)

    @torch.no_grad()
    def act(self, obs):
        """Plan from obs (obs_dim,), return the first action; keep the shifted mean for the next step."""
        a = self.args
        obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        noise = torch.randn(a.cem_iterations, a.population, a.horizon, self.low.shape[0], device=self.device)
        mean = cem_optimize(
            lambda samples, i: self.returns(obs, samples),
            self.mean,
            self.init_std.expand_as(self.mean),
            self.low,
            self.high,
            noise,
            a.num_elites,
            a.cem_smoothing,
        )
        self.mean = shift_mean(mean, self.fill)
        return mean[0].cpu().numpy()

    def reset(self):
        self.mean = self.fill.repeat(self.args.horizon, 1)


def evaluate(model_path, env_id, eval_episodes, seed, args):
    """Load the saved ensemble into a fresh network; run the MPC with it (no further training)."""
    env = gym.make(env_id)
    space = env.action_space
    obs_dim, action_dim = int(np.prod(env.observation_space.shape)), int(np.prod(space.shape))
    model = ProbabilisticEnsemble(args.ensemble_size, obs_dim + action_dim, obs_dim, args.hidden_size)
    model.load_state_dict(torch.load(model_path, map_location="cpu"))
    planner = Planner(model, args, space.low, space.high)
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        planner.reset()
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(planner.act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: seeding, the environment, the ensemble and its optimiser, the planner, the data
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
    rng = np.random.default_rng(args.seed)
    # Intra-op threads: one. The planner's matmuls are small (population * particles rows).
    torch.set_num_threads(1)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args.env_id, 1)
    envs.action_space.seed(args.seed)
    space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    action_dim = int(np.prod(space.shape))
    model = ProbabilisticEnsemble(args.ensemble_size, obs_dim + action_dim, obs_dim, args.hidden_size).to(
        device
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.model_lr)
    planner = Planner(model, args, space.low, space.high)

    # All the data: (s, a) inputs and s' - s targets.
    inputs_buf = np.zeros((args.total_timesteps, obs_dim + action_dim), dtype=np.float32)
    targets_buf = np.zeros((args.total_timesteps, obs_dim), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return, ep_length = np.zeros(1), np.zeros(1, dtype=np.int64)
    losses, last_print, model_fitted = {}, 0.0, False
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)

    for global_step in range(1, args.total_timesteps + 1):
        # ---- 2. Act: random during the warm-up episodes, then the MPC through the model
        if not model_fitted:
            actions = envs.action_space.sample()
        else:
            actions = planner.act(obs[0])[None].astype(np.float32)
        next_obs, reward, terminated, truncated, infos = envs.step(actions)
        ep_return += reward
        ep_length += 1

        # ---- 3. Store: an ended episode's next observation is its true last one, not the reset
        real_next_obs = transition_next_obs(next_obs, infos)
        inputs_buf[global_step - 1] = np.concatenate([obs[0], actions[0]])
        targets_buf[global_step - 1] = real_next_obs[0] - obs[0]
        obs = next_obs
        for i in np.flatnonzero(terminated | truncated):
            episode_returns.append((global_step, float(ep_return[i])))
            recent = [r for _, r in episode_returns[-5:]]
            writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
            writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
            ep_return[i], ep_length[i] = 0.0, 0
            planner.reset()

            # ---- 4. Model: after each episode past the warm-up, fit the ensemble on all the data so far
            if len(episode_returns) >= args.warmup_episodes and global_step < args.total_timesteps:
                model.train()
                loss = fit_ensemble(
                    model,
                    optimizer,
                    inputs_buf[:global_step],
                    targets_buf[:global_step],
                    args.model_updates,
                    args.model_batch_size,
                    args.logvar_bound_coef,
                    rng,
                )
                model.eval()
                model_fitted = True
                losses = {
                    "model_loss": loss,
                    "max_logvar": model.max_logvar.mean().item(),
                    "min_logvar": model.min_logvar.mean().item(),
                }
                for name, value in losses.items():
                    writer.add_scalar(f"losses/{name}", value, global_step)

        # SPS and the progress line every 100 steps
        if global_step % 100 == 0 or global_step == args.total_timesteps:
            sps = int(global_step / (time.time() - start_time))
            writer.add_scalar("charts/SPS", sps, global_step)
            if args.progress and (time.time() - last_print > 0.5 or global_step == args.total_timesteps):
                last_print = time.time()
                mean_recent = np.mean(recent) if recent else float("nan")
                print(
                    f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(5) {mean_recent:7.1f}  "
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
        torch.save(model.state_dict(), model_path)
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, args.seed + 10_000, args)
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
