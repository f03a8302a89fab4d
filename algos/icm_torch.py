"""PPO with an Intrinsic Curiosity Module (ICM), discrete actions -- the PyTorch twin.
Curiosity is a forward model's error in the features of an encoder that an inverse model trains.

Papers: Pathak, Agrawal, Efros & Darrell 2017, "Curiosity-driven Exploration by Self-supervised
        Prediction", arXiv:1705.05363 (ICM; the paper trains it beside A3C, here beside PPO);
        Burda, Edwards, Pathak, Storkey, Darrell & Efros 2018, "Large-Scale Study of
        Curiosity-Driven Learning", arXiv:1808.04355 (which features to predict in);
        Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Twin:   algos/icm_jax.py (`diff` the two files: only the framework differs)
Docs:   docs/algorithms/icm.md
Run:    python algos/icm_torch.py --seed 1
"""

import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.utils.tensorboard import SummaryWriter

import explore_envs  # registers DeepSea{N}-v0, DeepSeaStochastic{N}-v0 and the NoisyTV*DeepSea{N}-v0 variants


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "DeepSea12-v0"
    """gymnasium id, discrete actions: DeepSea{N}-v0, DeepSeaStochastic{N}-v0, NoisyTV*DeepSea{N}-v0, ..."""
    total_timesteps: int = 200_000
    """total environment steps, summed over the vector envs"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the actor and the critic"""
    anneal_lr: bool = True
    """anneal the actor-critic learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    clip_vloss: bool = True
    """clip the value loss around the rollout's value estimates"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (the actor-critic and the curiosity module each)"""
    bonus_scale: float = 1.0
    """eta of the curiosity eta / 2 * ||phi_hat(s') - phi(s')||^2 (authors' code: 0.01); 0 turns it off"""
    icm_beta: float = 0.2
    """beta: the module minimises (1 - beta) * inverse loss + beta * forward loss (the paper's 0.2)"""
    icm_learning_rate: float = 1e-3
    """Adam learning rate of the curiosity module (constant)"""
    feature_dim: int = 32
    """size of the feature vector phi(s) (ignored with --features identity)"""
    features: str = "inverse"
    """space of the forward model: inverse (ICM's phi), random (phi frozen at init), identity (phi(s) = s)"""
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
    env_id="NoisyTVDeepSea5-v0",
    total_timesteps=2048,
    num_envs=4,
    num_steps=128,
    save_model=True,
    eval_episodes=2,
)

FEATURES = ("inverse", "random", "identity")
DEEP_SEA_ID = re.compile(r"^(" + "|".join(explore_envs.VARIANTS) + r")(-?\d+)-v0$")


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


def ppo_policy_loss(logp, logp_old, advantages, clip_coef):
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old.

    The min makes the objective pessimistic: once the ratio has moved past the clip in the
    direction the advantage favours, the gradient is zero; a move in the wrong direction is never
    clipped away.
    """
    ratio = torch.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -torch.min(unclipped, clipped).mean()


def ppo_value_loss(values, values_old, returns, clip_coef):
    """0.5 * mean of the squared error; with clip_coef, the pessimistic max of the plain error and
    the error of a prediction kept within clip_coef of the rollout's estimate (clip_coef=None: plain)."""
    unclipped = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    values_clipped = values_old + torch.clamp(values - values_old, -clip_coef, clip_coef)
    clipped = (values_clipped - returns) ** 2
    return 0.5 * torch.max(unclipped, clipped).mean()


def icm_losses(action_logits, actions, phi_next_pred, phi_next, beta):
    """The curiosity module's losses on a batch; returns (loss, inverse_loss, forward_loss).

    inverse_loss = mean cross-entropy of the inverse model's logits for a_t given (phi(s), phi(s'));
    forward_loss = mean over the batch of 1/2 ||phi_hat(s') - sg(phi(s'))||^2 (sg: stop-gradient);
    loss = (1 - beta) * inverse_loss + beta * forward_loss.
    The target phi(s') is detached: the forward loss trains the forward model (and the phi(s) it
    reads) but never moves the target. Without it, the cheapest way to predict phi(s') would be to
    make phi constant, and the curiosity reward would collapse to zero everywhere.
    """
    logp_all = torch.log_softmax(action_logits, dim=-1)
    inverse_loss = -logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1).mean()
    forward_loss = 0.5 * ((phi_next_pred - phi_next.detach()) ** 2).sum(-1).mean()
    return (1.0 - beta) * inverse_loss + beta * forward_loss, inverse_loss, forward_loss


def curiosity_reward(phi_next_pred, phi_next, eta):
    """Per-transition curiosity: eta / 2 * ||phi_hat(s') - phi(s')||^2 (the forward model's error)."""
    return eta * 0.5 * ((phi_next_pred - phi_next) ** 2).sum(-1)


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
        draw: cheaper in the acting loop than a torch.distributions object."""
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


class ELUNet(nn.Sequential):
    """One 64-unit ELU layer and a linear head: the encoder, the inverse and the forward model."""

    def __init__(self, in_dim, out_dim, head_std):
        super().__init__(
            layer_init(nn.Linear(in_dim, 64)), nn.ELU(), layer_init(nn.Linear(64, out_dim), std=head_std)
        )


class ICM(nn.Module):
    """Encoder phi, inverse model and forward model. features: "inverse" trains phi through the
    inverse model (the paper), "random" freezes phi at its initialisation, "identity" uses the
    observation itself (phi(s) = s)."""

    def __init__(self, obs_dim, num_actions, feature_dim, features):
        super().__init__()
        self.num_actions, self.features = num_actions, features
        if features == "identity":
            self.encoder, feature_dim = None, obs_dim
        else:
            self.encoder = ELUNet(obs_dim, out_dim=feature_dim, head_std=1.0)
            self.encoder.requires_grad_(features == "inverse")  # random: phi stays as initialised
        self.inverse_model = ELUNet(2 * feature_dim, out_dim=num_actions, head_std=0.01)
        self.forward_model = ELUNet(feature_dim + num_actions, out_dim=feature_dim, head_std=1.0)

    def encode(self, obs):
        return obs if self.encoder is None else self.encoder(obs)

    def forward(self, obs, next_obs, actions):
        """Return (inverse-model logits, phi_hat(s'), phi(s')) for a batch of transitions."""
        phi, phi_next = self.encode(obs), self.encode(next_obs)
        action_logits = self.inverse_model(torch.cat([phi, phi_next], dim=-1))
        one_hot = nn.functional.one_hot(actions.long(), self.num_actions).float()
        phi_next_pred = self.forward_model(torch.cat([phi, one_hot], dim=-1))
        return action_logits, phi_next_pred, phi_next


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
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("bonus_scale", args.bonus_scale >= 0, ">= 0 (0 = the entropy-only PPO baseline)"),
        ("icm_beta", 0 <= args.icm_beta <= 1, "in [0, 1]"),
        ("icm_learning_rate", args.icm_learning_rate > 0, "> 0"),
        ("feature_dim", args.feature_dim >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size}",
        ),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size,
            f">= one rollout, --num-envs * --num-steps = {batch_size}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.features not in FEATURES:
        raise ValueError(f"--features {args.features!r} is unknown: choose one of {', '.join(FEATURES)}")
    match = DEEP_SEA_ID.match(args.env_id)
    if match and not 1 <= int(match.group(2)) <= explore_envs.MAX_SIZE:
        raise ValueError(
            f"--env-id {args.env_id}: the DeepSea size N = {match.group(2)} must be in "
            f"1..{explore_envs.MAX_SIZE}"
        )
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_torch.py"
        )


def solve_threshold(env_id):
    """The 20-episode mean return that counts as solved: 0.9 of DeepSea's optimum; MountainCar's
    flag within 150 steps on average (-150); None elsewhere."""
    if explore_envs.is_deep_sea(env_id):
        return 0.9 * explore_envs.deep_sea_optimal_return(env_id)
    return -150.0 if env_id.startswith("MountainCar") else None


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
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # ---- 1. Setup: seeding, environments, networks, optimisers
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
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions)
    icm = ICM(obs_dim, num_actions, args.feature_dim, args.features)
    for net in (agent, icm):
        net.to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    icm_params = [p for p in icm.parameters() if p.requires_grad]  # a frozen (random) phi is left out
    icm_optimizer = torch.optim.Adam(icm_params, lr=args.icm_learning_rate, eps=1e-5)

    # Rollout storage, (T, N, ...), on the device. next_obs_buf holds
    # the true s' of each step (final_obs at an end).
    obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    next_obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions_buf = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logps_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    values_buf = torch.zeros((args.num_steps, args.num_envs), device=device)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    # The noisy TV: how often the policy watches (action 2) over the last quarter of the env steps.
    noisy_tv = args.env_id.startswith("NoisyTV")
    tv_from_step, tv_actions, tv_steps = 0.75 * num_iterations * batch_size, 0, 0
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
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            if noisy_tv and global_step > tv_from_step:
                tv_actions += int((action == 2).sum())
                tv_steps += args.num_envs
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # The transition's true s': with same-step autoreset, an ended episode's last
            # observation is infos["final_obs"]; obs already holds the next episode's first one.
            real_next = np.array(obs, dtype=np.float32)
            if done.any():
                real_next[done] = np.stack(infos["final_obs"][done])
            next_obs_buf[step] = torch.as_tensor(real_next, device=device)
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
            # cuts the recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = torch.as_tensor(real_next[only_truncated], device=device)
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

        # ---- 3. Curiosity: the forward model's error, added to the reward
        # One number per transition, from the module as it was during the rollout, added to the
        # extrinsic reward of the same step (episodic: the GAE recursion stops at episode ends for
        # both, as in the paper's A3C).
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_next_obs = next_obs_buf.reshape(batch_size, obs_dim)
        b_actions = actions_buf.reshape(-1)
        with torch.no_grad():
            _, phi_next_pred, phi_next = icm(b_obs, b_next_obs, b_actions)
            intrinsic = curiosity_reward(phi_next_pred, phi_next, args.bonus_scale).reshape(
                args.num_steps, args.num_envs
            )
        rewards_buf += intrinsic

        # ---- 4. Advantages: GAE, bootstrapped from the observation after the rollout
        with torch.no_grad():
            last_value = agent.get_value(next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 5. Update: epochs x minibatches; the curiosity module trains on the same minibatches
        # with its own optimiser
        b_logps = logps_buf.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1),
            returns.reshape(-1),
            values_buf.reshape(-1),
        )
        stats = {
            "policy_loss": 0.0,
            "value_loss": 0.0,
            "entropy": 0.0,
            "approx_kl": 0.0,
            "clipfrac": 0.0,
            "icm_loss": 0.0,
            "inverse_loss": 0.0,
            "forward_loss": 0.0,
        }
        for epoch in range(args.update_epochs):
            perm = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb = perm[start : start + minibatch_size]
                logp, entropy, value = agent.evaluate_actions(b_obs[mb], b_actions[mb])
                mb_adv = b_advantages[mb]
                if args.norm_adv:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = ppo_policy_loss(logp, b_logps[mb], mb_adv, args.clip_coef)
                v_loss = ppo_value_loss(
                    value, b_values[mb], b_returns[mb], args.clip_coef if args.clip_vloss else None
                )
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
                action_logits, phi_next_pred, phi_next = icm(b_obs[mb], b_next_obs[mb], b_actions[mb])
                icm_loss, inverse_loss, forward_loss = icm_losses(
                    action_logits, b_actions[mb], phi_next_pred, phi_next, args.icm_beta
                )
                optimizer.zero_grad()
                icm_optimizer.zero_grad()
                (loss + icm_loss).backward()  # disjoint parameters: each optimiser sees its own loss
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                nn.utils.clip_grad_norm_(icm_params, args.max_grad_norm)
                optimizer.step()
                icm_optimizer.step()
                with torch.no_grad():
                    logratio = logp - b_logps[mb]
                    # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
                    stats["approx_kl"] += ((logratio.exp() - 1) - logratio).mean().item()
                    stats["clipfrac"] += ((logratio.exp() - 1.0).abs() > args.clip_coef).float().mean().item()
                stats["policy_loss"] += pg_loss.item()
                stats["value_loss"] += v_loss.item()
                stats["entropy"] += entropy_loss.item()
                stats["icm_loss"] += icm_loss.item()
                stats["inverse_loss"] += inverse_loss.item()
                stats["forward_loss"] += forward_loss.item()

        # ---- 6. Logging
        num_updates = args.update_epochs * args.num_minibatches
        var_returns = b_returns.var().item()
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/intrinsic_reward", intrinsic.mean().item(), global_step)
        for name, total in stats.items():
            writer.add_scalar(f"losses/{name}", total / num_updates, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.3f}  "
                f"curiosity {intrinsic.mean().item():.4f}  SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    returns_only = [r for _, r in episode_returns]
    threshold = solve_threshold(args.env_id)
    solved_at = None if threshold is None else explore_envs.episodes_to_solve(returns_only, threshold, 20)
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        # never solved: the number of finished episodes + 1, so the figure is always finite
        "episodes_to_solve": float(len(returns_only) + 1 if solved_at is None else solved_at),
        "num_episodes": len(returns_only),
        "intrinsic_reward": intrinsic.mean().item(),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: total / num_updates for name, total in stats.items()},
    }
    if noisy_tv:
        summary["tv_fraction"] = tv_actions / max(tv_steps, 1)
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
