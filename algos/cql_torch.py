"""Conservative Q-learning (CQL(H)), offline, continuous or discrete actions -- the PyTorch twin.

Each critic minimises its Bellman error plus cql_alpha (log sum_a exp Q(s, a) - Q(s, a_data)): SAC's actor
and an importance-sampled log-sum-exp for Box actions; with --discrete the exact one and a DQN target.
The Box-action target r + gamma (1 - terminal) min(Q1', Q2')(s', a') has no entropy term; a timeout
bootstraps, only a termination cuts. --cql-lagrange tunes cql_alpha by dual gradient ascent.
Paper:  Kumar, Zhou, Tucker & Levine 2020, "Conservative Q-Learning for Offline Reinforcement
        Learning", arXiv:2006.04779; the actor is SAC's (Haarnoja et al. 2018, arXiv:1801.01290).
Twin:   algos/cql_jax.py (`diff algos/cql_torch.py algos/cql_jax.py` shows only the framework).
Docs:   docs/algorithms/cql.md
Run:    python algos/cql_torch.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

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
    return (2.0 * (np.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def sample_squashed(mean, log_std, noise, action_scale, action_bias):
    """Reparameterised sample of a = scale * tanh(u) + bias, u = mean + std * noise, and its
    log-density by the change of variables (summed over the action axis):

        log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2) - sum_i log(scale_i).
    """
    std = log_std.exp()
    u = mean + std * noise
    gaussian_logp = (-0.5 * noise**2 - log_std - 0.5 * np.log(2.0 * np.pi)).sum(-1)
    log_prob = gaussian_logp - tanh_log_det_jacobian(u) - torch.log(action_scale).sum()
    return torch.tanh(u) * action_scale + action_bias, log_prob


def cql_penalty(q_data, q_sampled, log_density):
    """The conservative penalty of CQL(H), mean over the batch of

        log( (1/K) sum_k exp(Q(s, a_k) - log mu_k(a_k)) ) - Q(s, a_data),

    q_data (B,) the critic on the dataset's actions, q_sampled (B, K) on K sampled actions a_k,
    log_density (B, K) the log-density of the proposal mu_k that drew a_k. The first term is an
    importance-sampling estimate of log integral_a exp Q(s, a) da (log sum_a for discrete actions:
    all A actions with log_density = -log A makes it exact). If every a_k is the dataset action and
    log_density = 0 (a point mass on it), it is log(K e^Q / K) = Q and the penalty is 0."""
    k = q_sampled.shape[-1]
    return (torch.logsumexp(q_sampled - log_density, dim=-1) - np.log(k)).mean() - q_data.mean()


def conservative_target(rewards, terminals, next_q1, next_q2, gamma):
    """r + gamma * (1 - terminal) * min(Q1', Q2')(s', a'), a' ~ pi(s'), with no entropy term.

    Only a termination cuts the bootstrap: a timeout is where the collector stopped, and s' is a
    real state to bootstrap from."""
    return rewards + gamma * (1.0 - terminals) * torch.min(next_q1, next_q2)


def max_q_target(next_q_target, rewards, terminals, gamma):
    """The discrete variant's DQN target: r + gamma * (1 - terminal) * max_a' Q_target(s', a')."""
    return rewards + gamma * (1.0 - terminals) * next_q_target.max(-1).values


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
    return -(log_cql_alpha.exp() * (penalty - threshold).detach())


def sac_actor_loss(q1, q2, log_prob, alpha):
    """mean(alpha * log pi(a|s) - min(Q1, Q2)(s, a)), a the reparameterised sample."""
    return (alpha * log_prob - torch.min(q1, q2)).mean()


def temperature_loss(log_alpha, log_prob, target_entropy):
    """-alpha * mean(log pi + target_entropy), alpha = exp(log_alpha), log pi held fixed: alpha grows
    while the entropy is below the target and shrinks while it is above."""
    return -(log_alpha.exp() * (log_prob + target_entropy).detach()).mean()


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


class DiscreteQNetwork(nn.Module):
    """Q(s, .): the observation through a hidden-hidden ReLU MLP, one output per action (--discrete)."""

    def __init__(self, obs_dim, num_actions, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, num_actions)),
        )

    def forward(self, obs):
        return self.net(obs)


class Actor(nn.Module):
    """Squashed Gaussian policy: a ReLU trunk, then the mean and log std of u, a = scale tanh(u) + bias.
    log std is squashed into [LOG_STD_MIN, LOG_STD_MAX] by a tanh, so it cannot run away."""

    def __init__(self, obs_dim, action_dim, hidden_size, action_scale, action_bias):
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
        )
        self.mean = layer_init(nn.Linear(hidden_size, action_dim))
        self.log_std = layer_init(nn.Linear(hidden_size, action_dim))
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))

    def forward(self, obs):
        h = self.trunk(obs)
        log_std = torch.tanh(self.log_std(h))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(h), log_std

    def sample(self, obs):
        """(action, log-prob) of a reparameterised sample; gradients flow through both."""
        mean, log_std = self(obs)
        return sample_squashed(mean, log_std, torch.randn_like(mean), self.action_scale, self.action_bias)

    def deterministic(self, obs):
        """The evaluation action: tanh of the mean, scaled into the bounds."""
        return torch.tanh(self(obs)[0]) * self.action_scale + self.action_bias


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
    if discrete:
        return {"qf": DiscreteQNetwork(obs_dim, int(space.n), hidden_size)}
    action_dim = int(np.prod(space.shape))
    return {
        "actor": Actor(
            obs_dim, action_dim, hidden_size, (space.high - space.low) / 2.0, (space.high + space.low) / 2.0
        ),
        "qf1": QNetwork(obs_dim, action_dim, hidden_size),
        "qf2": QNetwork(obs_dim, action_dim, hidden_size),
    }


def greedy_policy(nets, discrete, device):
    """Batch of observations -> batch of deterministic actions (argmax Q, or tanh of the actor's mean)."""

    def policy(obs):
        with torch.no_grad():
            obs = torch.as_tensor(obs, dtype=torch.float32, device=device)
            if discrete:
                return nets["qf"](obs).argmax(-1).cpu().numpy()
            return nets["actor"].deterministic(obs).cpu().numpy()

    return policy


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size, discrete):
    """Load the saved parameters into fresh networks; run the deterministic policy."""
    env = offline_data.make_env(env_id)
    nets = make_networks(int(np.prod(env.observation_space.shape)), env.action_space, hidden_size, discrete)
    env.close()
    saved = torch.load(model_path, map_location="cpu")
    for name, net in nets.items():
        net.load_state_dict(saved[name])
    return run_episodes(greedy_policy(nets, discrete, torch.device("cpu")), env_id, eval_episodes, seed)


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
    torch.set_num_threads(1)  # 64-wide networks: a second thread costs more in hand-offs than it saves
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    # The data: small enough to live on the device whole; each batch is indexed there
    data = offline_data.load_dataset(args.dataset)
    size = len(data["rewards"])
    D = {name: torch.as_tensor(data[name], device=device) for name in offline_data.ARRAY_KEYS}
    env = offline_data.make_env(env_id)
    space = env.action_space
    obs_dim = int(np.prod(env.observation_space.shape))
    env.close()

    nets = make_networks(obs_dim, space, args.hidden_size, args.discrete)
    for net in nets.values():
        net.to(device)
    if args.discrete:
        qf = nets["qf"]
        qf_target = DiscreteQNetwork(obs_dim, int(space.n), args.hidden_size).to(device)
        qf_target.load_state_dict(qf.state_dict())
        q_params, target_params = list(qf.parameters()), list(qf_target.parameters())
        # the exact log-sum-exp: every action once, each with the uniform density 1/A
        log_uniform = -float(np.log(space.n))
    else:
        actor, qf1, qf2 = nets["actor"], nets["qf1"], nets["qf2"]
        qf1_target, qf2_target = (
            QNetwork(obs_dim, space.shape[0], args.hidden_size),
            QNetwork(obs_dim, space.shape[0], args.hidden_size),
        )
        qf1_target.load_state_dict(qf1.state_dict())
        qf2_target.load_state_dict(qf2.state_dict())
        qf1_target.to(device)
        qf2_target.to(device)
        q_params = list(qf1.parameters()) + list(qf2.parameters())
        target_params = list(qf1_target.parameters()) + list(qf2_target.parameters())
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.policy_lr)
        action_dim = int(np.prod(space.shape))
        target_entropy = -float(action_dim)
        log_alpha = torch.tensor(
            np.log(args.alpha), dtype=torch.float32, device=device, requires_grad=args.autotune
        )
        alpha_optimizer = torch.optim.Adam([log_alpha], lr=args.alpha_lr)
        low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=device)
        # the uniform proposal's log-density on the action box: -sum_i log(high_i - low_i)
        log_uniform = -float(np.log(space.high - space.low).sum())
    q_optimizer = torch.optim.Adam(q_params, lr=args.q_lr)
    # the penalty weight: args.cql_alpha, or with --cql-lagrange exp(log_cql_alpha), tuned by dual ascent
    log_cql_alpha = torch.tensor(
        np.log(args.cql_alpha) if args.cql_lagrange else 0.0,
        dtype=torch.float32,
        device=device,
        requires_grad=args.cql_lagrange,
    )
    cql_alpha_optimizer = torch.optim.Adam([log_cql_alpha], lr=args.q_lr)

    def penalty_weight():
        """The penalty weight of this step's critic loss; the tuned one capped at 1e6 as in CQL's code."""
        return log_cql_alpha.detach().exp().clamp(max=1e6) if args.cql_lagrange else args.cql_alpha

    def tune_penalty_weight(step_losses):
        """--cql-lagrange: one Adam step of log cql_alpha on lagrange_loss, this step's penalty
        (step_losses["cql_penalty"]; with two critics their mean) held fixed."""
        if not args.cql_lagrange:
            return
        cql_alpha_loss = lagrange_loss(log_cql_alpha, step_losses["cql_penalty"], args.lagrange_threshold)
        cql_alpha_optimizer.zero_grad()
        cql_alpha_loss.backward()
        cql_alpha_optimizer.step()
        step_losses.update(cql_alpha=log_cql_alpha.detach().exp(), cql_alpha_loss=cql_alpha_loss)

    policy = greedy_policy(nets, args.discrete, device)
    N, B = args.num_sampled_actions, args.batch_size

    def discrete_step(batch):
        """One gradient step of the discrete variant: DQN target, exact log-sum-exp penalty."""
        obs, actions, rewards, next_obs, terminals = batch
        with torch.no_grad():
            target = max_q_target(qf_target(next_obs), rewards, terminals, args.gamma)
        q_all = qf(obs)
        q = q_all.gather(1, actions[:, None]).squeeze(1)
        qf_loss, bellman, penalty = cql_critic_loss(
            q, target, q_all, torch.full_like(q_all, log_uniform), penalty_weight()
        )
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        step_losses = {
            "qf_loss": qf_loss,
            "bellman_error": bellman,
            "cql_penalty": penalty,
            "q_values": q.mean(),
        }
        tune_penalty_weight(step_losses)
        with torch.no_grad():
            torch._foreach_lerp_(target_params, q_params, args.tau)  # target += tau * (online - target)
        return step_losses

    def continuous_step(batch):
        """One gradient step: critics (Bellman + conservative penalty), actor, temperature, targets."""
        obs, actions, rewards, next_obs, terminals = batch
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            next_actions, _ = actor.sample(next_obs)
            target = conservative_target(
                rewards,
                terminals,
                qf1_target(next_obs, next_actions),
                qf2_target(next_obs, next_actions),
                args.gamma,
            )
            # N actions per state from each proposal: uniform on the box, pi(.|s), pi(.|s')
            rep_obs, rep_next_obs = obs.repeat_interleave(N, 0), next_obs.repeat_interleave(N, 0)
            uniform_actions = low + (high - low) * torch.rand(B * N, action_dim, device=device)
            pi_actions, pi_log_prob = actor.sample(rep_obs)
            next_pi_actions, next_pi_log_prob = actor.sample(rep_next_obs)
            sampled = torch.cat([uniform_actions, pi_actions, next_pi_actions], 0)  # (3 B N, A)
            log_density = torch.cat(
                [
                    torch.full((B, N), log_uniform, device=device),
                    pi_log_prob.reshape(B, N),
                    next_pi_log_prob.reshape(B, N),
                ],
                1,
            )
        obs_3 = rep_obs.repeat(3, 1)
        to_bk = lambda x: x.reshape(3, B, N).permute(1, 0, 2).reshape(B, 3 * N)  # noqa: E731 (B, 3N)

        q1, q2 = qf1(obs, actions), qf2(obs, actions)
        q1_sampled, q2_sampled = qf1(obs_3, sampled), qf2(obs_3, sampled)
        cql_alpha = penalty_weight()
        qf1_loss, bellman1, penalty1 = cql_critic_loss(q1, target, to_bk(q1_sampled), log_density, cql_alpha)
        qf2_loss, bellman2, penalty2 = cql_critic_loss(q2, target, to_bk(q2_sampled), log_density, cql_alpha)
        step_losses = {
            "qf1_loss": qf1_loss,
            "qf2_loss": qf2_loss,
            "bellman_error": (bellman1 + bellman2) / 2,
            "cql_penalty": (penalty1 + penalty2) / 2,
            "q_values": q1.mean(),
        }
        q_optimizer.zero_grad()
        (qf1_loss + qf2_loss).backward()
        q_optimizer.step()
        tune_penalty_weight(step_losses)

        actions_pi, log_prob = actor.sample(obs)
        actor_loss = sac_actor_loss(qf1(obs, actions_pi), qf2(obs, actions_pi), log_prob, alpha)
        actor_optimizer.zero_grad()
        actor_loss.backward(inputs=list(actor.parameters()))  # the actor's parameters only
        actor_optimizer.step()

        alpha_loss = temperature_loss(log_alpha, log_prob, target_entropy)
        if args.autotune:
            alpha_optimizer.zero_grad()
            alpha_loss.backward()
            alpha_optimizer.step()
        step_losses.update(actor_loss=actor_loss, alpha=alpha, alpha_loss=alpha_loss)

        with torch.no_grad():
            torch._foreach_lerp_(target_params, q_params, args.tau)  # target += tau * (online - target)
        return step_losses

    episode_returns, last_returns = [], np.array([np.nan])
    losses, last_print = {}, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        # ---- 2. Update: gradient steps on uniform minibatches of the dataset (timeouts bootstrap)
        rows = torch.as_tensor(np.random.randint(0, size, size=B), device=device)
        batch = tuple(
            D[k][rows] for k in ("observations", "actions", "rewards", "next_observations", "terminals")
        )  # timeouts bootstrap
        step_losses = (discrete_step if args.discrete else continuous_step)(batch)

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
        model_path = os.path.join(run_dir, "model.pt")
        torch.save({name: net.state_dict() for name, net in nets.items()}, model_path)
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
