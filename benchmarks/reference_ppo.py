"""A seed-style reference PPO (discrete actions), for the speed comparison of
`python -m benchmarks.speed ppo`.

Written the way a first, readable PyTorch PPO usually is: a torch.distributions.Categorical in the
acting loop, a tensor conversion per environment step, a Python loop over epochs and minibatches,
time-limit truncation treated as termination (no bootstrap from the final observation), and torch's
default thread count. The algorithm and the hyperparameters are those of algos/ppo_torch.py (pass
its Args), so the wall-time gap to our twins is the cost of the implementation, not of the method.
Not a test, and not one of the twins: nothing in algos/ imports it.
"""

import random
import time

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

# torch's default intra-op thread count, read when this module is imported: algos/ppo_torch.py pins
# the process to one thread in train(), so the benchmark imports this module before any run. On a
# loaded machine the default costs dearly: at 8k steps on the 2-core dev machine, with other jobs
# running, 2 threads gave 162 SPS against 5,057 SPS on 1 thread (same returns).
DEFAULT_THREADS = torch.get_num_threads()


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Separate 64-64 tanh actor and critic; orthogonal init, head gains 0.01 (policy) and 1.0 (value)."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x, action=None):
        """Sample an action (or score the given one): action, log-prob, entropy, value."""
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.get_value(x)


def train(args) -> dict:
    """Train with the fields of algos/ppo_torch.py's Args; returns the same summary keys as our scripts
    (episodic_returns, final_mean_return, sps, wall_time, global_step). No logging, no progress line."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(DEFAULT_THREADS)  # undo the pin of a twin that ran earlier in this process

    envs = gym.make_vec(
        args.env_id,
        num_envs=args.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size

    # Rollout storage, (num_steps, num_envs, ...).
    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))  # 1 where the episode ended with this step
    values = torch.zeros((args.num_steps, args.num_envs))

    episode_returns = []
    ep_return = np.zeros(args.num_envs)
    global_step = 0
    start_time = time.time()
    next_obs = torch.tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32)

    for iteration in range(num_iterations):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - iteration / num_iterations) * args.learning_rate

        # ---- rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            actions[step], logprobs[step], values[step] = action, logprob, value
            # Same-step autoreset: where an episode ended, next_obs is already the next episode's first.
            next_obs_np, reward, terminated, truncated, _ = envs.step(action.numpy())
            done = np.logical_or(terminated, truncated)  # truncation counted as termination: no bootstrap
            rewards[step] = torch.tensor(reward, dtype=torch.float32)
            dones[step] = torch.tensor(done, dtype=torch.float32)
            next_obs = torch.tensor(next_obs_np, dtype=torch.float32)
            ep_return += reward
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                ep_return[i] = 0.0

        # ---- GAE, backwards over the rollout; a done cuts both the bootstrap and the recursion
        with torch.no_grad():
            next_value = agent.get_value(next_obs)
            advantages = torch.zeros_like(rewards)
            last_gae = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                not_done = 1.0 - dones[t]
                delta = rewards[t] + args.gamma * not_done * next_value - values[t]
                last_gae = delta + args.gamma * args.gae_lambda * not_done * last_gae
                advantages[t] = last_gae
                next_value = values[t]
            returns = advantages + values

        # ---- update: update_epochs passes over the flattened batch in shuffled minibatches
        b_obs, b_actions, b_logprobs = obs.reshape(-1, obs_dim), actions.reshape(-1), logprobs.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        indices = np.arange(batch_size)
        for epoch in range(args.update_epochs):
            np.random.shuffle(indices)
            for start in range(0, batch_size, minibatch_size):
                mb = indices[start : start + minibatch_size]
                _, new_logprob, entropy, new_value = agent.get_action_and_value(b_obs[mb], b_actions[mb])
                ratio = (new_logprob - b_logprobs[mb]).exp()

                mb_adv = b_advantages[mb]
                if args.norm_adv:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                # Clipped surrogate: the pessimistic (smaller) of the plain and the clipped objective.
                surrogate = ratio * mb_adv
                surrogate_clipped = torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef) * mb_adv
                policy_loss = -torch.min(surrogate, surrogate_clipped).mean()

                value_error = (new_value - b_returns[mb]) ** 2
                if (
                    args.clip_vloss
                ):  # the larger of the plain error and that of a prediction kept near the old one
                    change = torch.clamp(new_value - b_values[mb], -args.clip_coef, args.clip_coef)
                    value_clipped = b_values[mb] + change
                    value_error = torch.max(value_error, (value_clipped - b_returns[mb]) ** 2)
                value_loss = 0.5 * value_error.mean()

                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

    envs.close()
    wall_time = time.time() - start_time
    recent = [r for _, r in episode_returns[-20:]]
    return {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
    }
