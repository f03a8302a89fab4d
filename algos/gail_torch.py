"""GAIL: generative adversarial imitation learning, PPO on a learned reward -- the PyTorch twin.

A discriminator D(s, a) tells the learner's pairs (label 1) from the expert's (label 0); PPO trains the
policy on the reward -log D(s, a). The environment's reward is only logged, as the true return.
Papers: Ho & Ermon 2016, "Generative Adversarial Imitation Learning", arXiv:1606.03476; Kostrikov
        et al. 2018, "Discriminator-Actor-Critic: Addressing Sample Inefficiency and Reward Bias in
        Adversarial Imitation Learning", arXiv:1809.02925 (the survival bias); Schulman et al. 2017,
        "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Twin:   algos/gail_jax.py (`diff algos/gail_torch.py algos/gail_jax.py` shows only the framework).
Docs:   docs/algorithms/gail.md
Run:    python algos/gail_torch.py --seed 1
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

import offline_data


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    dataset: str = "cartpole-expert"
    """offline_data dataset whose (observation, action) pairs are the expert's demonstrations"""
    expert_episodes: int = 0
    """use only the first k expert trajectories (0: all of them)"""
    total_timesteps: int = 250_000
    """total environment steps, summed over the vector envs (CleanRL's ppo.py: 500k)"""
    num_envs: int = 8
    """parallel environments, gymnasium SyncVectorEnv with same-step autoreset (CleanRL: 4)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the policy and value networks (CleanRL's ppo.py: 2.5e-4)"""
    anneal_lr: bool = True
    """anneal the policy's learning rate linearly to 0 over the run"""
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
    """global gradient-norm clip"""
    disc_learning_rate: float = 3e-4
    """Adam learning rate of the discriminator"""
    disc_steps: int = 4
    """discriminator gradient steps per PPO iteration (each on a fresh learner and expert minibatch)"""
    disc_batch_size: int = 256
    """learner pairs and expert pairs (as many of each) per discriminator step"""
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
    total_timesteps=2048,
    num_envs=4,
    num_steps=128,
    expert_episodes=2,
    disc_steps=2,
    disc_batch_size=64,
    save_model=True,
    eval_episodes=2,
)


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
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old."""
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


def discriminator_inputs(obs, actions, num_actions):
    """The discriminator's input: the observation with the one-hot action appended, (B, obs + A)."""
    one_hot = torch.nn.functional.one_hot(actions.long(), num_actions).to(obs.dtype)
    return torch.cat([obs, one_hot], dim=-1)


def discriminator_loss(learner_logits, expert_logits):
    """Binary cross-entropy with the convention of Ho & Ermon: LEARNER pairs are label 1, EXPERT
    pairs label 0, and D = sigmoid(logit) is the probability that a pair is the learner's:
        loss = mean over learner of -log D  +  mean over expert of -log(1 - D)
             = mean softplus(-logit_learner) + mean softplus(logit_expert)
    (softplus form: exact and finite for any logit). Each half is a mean, so the two sets weigh the
    same whatever their sizes. At the optimum D*(s, a) = rho_learner / (rho_learner + rho_expert)."""
    return (
        torch.nn.functional.softplus(-learner_logits).mean()
        + torch.nn.functional.softplus(expert_logits).mean()
    )


def gail_reward(logits):
    """The learner's reward -log D(s, a) = softplus(-logit): near 0 where the discriminator is sure
    the pair is the learner's (D -> 1), large where it takes it for the expert's (D -> 0).
    Always positive, so every step alive earns something: the survival bias (docs/algorithms/gail.md)."""
    return torch.nn.functional.softplus(-logits)


# ----------------------------------------------------------------------------- networks
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLP(nn.Sequential):
    """64-64 tanh trunk and a linear head; the actor, the critic and the discriminator are three MLPs."""

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
        """Sample actions; return (action, log-prob, value)."""
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


class Discriminator(nn.Module):
    """64-64 tanh MLP on (observation, one-hot action) -> one logit; D = sigmoid(logit) is the
    probability that the pair is the learner's (label 1), not the expert's (label 0)."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.num_actions = num_actions
        self.net = MLP(obs_dim + num_actions, out_dim=1, head_std=1.0)

    def forward(self, obs, actions):
        return self.net(discriminator_inputs(obs, actions, self.num_actions)).squeeze(-1)


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
        ("expert_episodes", args.expert_episodes >= 0, ">= 0 (0 = all)"),
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
        ("disc_learning_rate", args.disc_learning_rate >= 0, ">= 0 (0 freezes the discriminator)"),
        ("disc_steps", args.disc_steps >= 1, ">= 1"),
        ("disc_batch_size", args.disc_batch_size >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size}",
        ),
        ("total_timesteps", args.total_timesteps >= batch_size, f">= one rollout of {batch_size} steps"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has a {type(space).__name__} action space; this script is "
            f"for Discrete actions and there is no continuous-action GAIL script here "
            f"(algos/ppo_continuous_torch.py is the PPO one would build it on)"
        )
    data_env = offline_data.dataset_info(args.dataset)["env_id"]
    if data_env != args.env_id:
        raise ValueError(f"--dataset {args.dataset!r} was collected on {data_env}, not {args.env_id}")


def load_expert_pairs(dataset, expert_episodes):
    """The expert's (observation, action) pairs, from the first expert_episodes trajectories (0: all)."""
    data = offline_data.load_dataset(dataset)
    bounds = offline_data.episode_bounds(data)
    if expert_episodes > len(bounds):
        raise ValueError(
            f"--expert-episodes must be <= {len(bounds)}: {dataset} holds {len(bounds)} trajectories "
            f"(got {expert_episodes})"
        )
    end = bounds[expert_episodes - 1][1] if expert_episodes else len(data["actions"])
    return data["observations"][:end].astype(np.float32), data["actions"][:end].astype(np.int64)


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
    # ---- 1. Setup: expert pairs, run directory, seeding, environments, networks, storage
    check_args(args)
    expert_obs_np, expert_actions_np = load_expert_pairs(args.dataset, args.expert_episodes)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
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
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    disc = Discriminator(obs_dim, num_actions).to(device)
    disc_optimizer = torch.optim.Adam(disc.parameters(), lr=args.disc_learning_rate, eps=1e-5)
    expert_obs = torch.as_tensor(expert_obs_np, device=device)
    expert_actions = torch.as_tensor(expert_actions_np, device=device)
    num_expert = len(expert_actions_np)
    expert = offline_data.expert_policy(args.env_id)  # the scripted expert: only for the agreement log

    # Rollout storage, (T, N, ...), on the device (CleanRL's layout).
    obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions_buf = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logps_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    bootstrap_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
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

        # ---- 2. Rollout (the environment reward is only counted for the log: the TRUE return)
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            with torch.no_grad():
                action, logp, value = agent.act(next_obs)
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. The learned reward of this step is only known after the discriminator's
            # update, so gamma * V(final_obs) is kept apart here and added to it below; the done
            # flag then cuts the recursion as for a termination (whose bootstrap is 0).
            bootstrap = np.zeros(args.num_envs, dtype=np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = torch.as_tensor(
                    np.stack(infos["final_obs"][only_truncated]), dtype=torch.float32, device=device
                )
                with torch.no_grad():
                    bootstrap[only_truncated] = args.gamma * agent.get_value(final_obs).cpu().numpy()
            bootstrap_buf[step] = torch.as_tensor(bootstrap, device=device)
            dones_buf[step] = torch.as_tensor(done, dtype=torch.float32, device=device)
            next_obs = torch.as_tensor(obs, dtype=torch.float32, device=device)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Discriminator: disc_steps gradient steps, each on disc_batch_size learner pairs from
        # this rollout (label 1) and as many expert pairs (label 0), drawn with replacement
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_actions = actions_buf.reshape(-1)
        # imitation check (logged, never learned from): the fraction of the learner's sampled
        # actions that the scripted expert would also take in the same states
        expert_agreement = float(np.mean(expert(b_obs.cpu().numpy()) == b_actions.cpu().numpy()))
        disc_stats = {"disc_loss": 0.0, "disc_learner_acc": 0.0, "disc_expert_acc": 0.0}
        for _ in range(args.disc_steps):
            learner_idx = torch.randint(batch_size, (args.disc_batch_size,), device=device)
            expert_idx = torch.randint(num_expert, (args.disc_batch_size,), device=device)
            learner_logits = disc(b_obs[learner_idx], b_actions[learner_idx])
            expert_logits = disc(expert_obs[expert_idx], expert_actions[expert_idx])
            d_loss = discriminator_loss(learner_logits, expert_logits)
            disc_optimizer.zero_grad()
            d_loss.backward()
            disc_optimizer.step()
            disc_stats["disc_loss"] += d_loss.item() / args.disc_steps
            # accuracy on each set: learner pairs called learner (D > 0.5), expert pairs called expert
            disc_stats["disc_learner_acc"] += (learner_logits > 0).float().mean().item() / args.disc_steps
            disc_stats["disc_expert_acc"] += (expert_logits < 0).float().mean().item() / args.disc_steps

        # ---- 4. Reward: -log D(s, a) with the discriminator AFTER this iteration's update (Ho &
        # Ermon's Algorithm 1 order). No normalisation and no clipping: softplus(-logit) is finite
        # and >= 0, and its scale (about log 2 = 0.69 when D is unsure) suits the value clip.
        with torch.no_grad():
            disc_rewards = gail_reward(disc(b_obs, b_actions)).reshape(args.num_steps, args.num_envs)
            last_value = agent.get_value(next_obs)
        rewards_buf = disc_rewards + bootstrap_buf
        # ---- 5. Advantages (bootstrap from the observation after the rollout)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 6. Update: PPO, epochs x minibatches over the flattened batch
        b_logps = logps_buf.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1),
            returns.reshape(-1),
            values_buf.reshape(-1),
        )
        stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
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
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                with torch.no_grad():
                    logratio = logp - b_logps[mb]
                    # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
                    stats["approx_kl"] += ((logratio.exp() - 1) - logratio).mean().item()
                    stats["clipfrac"] += ((logratio.exp() - 1.0).abs() > args.clip_coef).float().mean().item()
                stats["policy_loss"] += pg_loss.item()
                stats["value_loss"] += v_loss.item()
                stats["entropy"] += entropy_loss.item()

        num_updates = args.update_epochs * args.num_minibatches
        stats = {name: total / num_updates for name, total in stats.items()}
        stats.update(disc_stats, disc_reward=disc_rewards.mean().item())
        var_returns = b_returns.var().item()
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name, value in stats.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/expert_agreement", expert_agreement, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  true return(20) {mean_recent:7.1f}  "
                f"D acc {stats['disc_learner_acc']:.2f}/{stats['disc_expert_acc']:.2f}  SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary
    envs.close()
    wall_time = time.time() - start_time
    final_mean_return = float(np.mean(recent)) if recent else float("nan")
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": final_mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, final_mean_return)),
        "expert_agreement": expert_agreement,
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
        writer.add_scalar(
            "eval/normalized_score",
            float(offline_data.normalized_score(args.dataset, np.mean(eval_returns))),
            0,
        )
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
