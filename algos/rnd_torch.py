"""PPO with Random Network Distillation (RND), discrete actions -- the PyTorch twin.
Novelty is a predictor's error at matching a fixed random network on s', learned by a second value head.

Papers: Burda, Edwards, Storkey & Klimov 2018, "Exploration by Random Network Distillation",
        arXiv:1810.12894; on top of Schulman et al. 2017, "Proximal Policy Optimization
        Algorithms", arXiv:1707.06347 (the PPO base is algos/ppo_torch.py, visible below).
Twin:   algos/rnd_jax.py (`diff` the two files: only the framework differs)
Docs:   docs/algorithms/rnd.md
Run:    python algos/rnd_torch.py --seed 1
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

import explore_envs  # registers DeepSea{N}-v0, DeepSeaStochastic{N}-v0 and the NoisyTV*DeepSea{N}-v0 variants


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "DeepSea12-v0"
    """gymnasium id, discrete actions: DeepSea{N}-v0, NoisyTV*DeepSea{N}-v0, MountainCar-v0, ..."""
    total_timesteps: int = 81_920
    """total environment steps, summed over the vector envs (the normaliser's warm-up steps not counted)"""
    num_envs: int = 8
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate of the agent and of the RND predictor"""
    anneal_lr: bool = True
    """anneal the learning rates linearly to 0 over the run"""
    gamma: float = 0.999
    """discount of the extrinsic return (episodic)"""
    gamma_int: float = 0.99
    """discount of the intrinsic return (non-episodic)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation (both heads)"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise the combined advantages per minibatch"""
    norm_adv_per_head: bool = False
    """standardise each head's advantages over the batch before weighting them (off: the paper's sum)"""
    clip_coef: float = 0.2
    """surrogate clipping coefficient epsilon"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient (the sum of the two heads' losses)"""
    max_grad_norm: float = 0.5
    """gradient-norm clip, applied to the actor and to the critic separately"""
    bonus_scale: float = 1.0
    """int_coef (beta): weight of the intrinsic advantage; 0 = entropy-only PPO with the same networks"""
    ext_coef: float = 2.0
    """weight of the extrinsic advantage (the paper's 2, with int_coef 1)"""
    update_proportion: float = 0.25
    """fraction of each minibatch the predictor trains on (the paper's 0.25)"""
    rnd_output_dim: int = 64
    """width of the target's (and predictor's) output embedding"""
    obs_norm_steps: int = 64
    """random-policy steps per environment that initialise the observation normaliser"""
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
    env_id="DeepSea5-v0",
    total_timesteps=1024,
    num_envs=4,
    num_steps=64,
    obs_norm_steps=8,
    save_model=True,
    eval_episodes=2,
)

MOUNTAIN_CAR_SOLVED = -150.0  # episodes_to_solve on MountainCar-v0: the goal within 150 steps on average


# ----------------------------------------------------------------------------- pure math
def update_running_moments(mean, var, count, batch):
    """Merge a batch (rows = samples) into running (mean, var, count): the parallel-variance update
    of Chan, Golub & LeVeque. With delta = batch_mean - mean and n = count + batch_count:
        mean' = mean + delta * batch_count / n
        M2'   = var * count + batch_var * batch_count + delta^2 * count * batch_count / n
        var'  = M2' / n                     (population variance, as np.var)
    Exact for any split of the stream into batches. Returns (mean', var', n)."""
    batch_mean = batch.mean(0)
    batch_var = batch.var(0, unbiased=False)
    batch_count = batch.shape[0]
    delta = batch_mean - mean
    total = count + batch_count
    new_mean = mean + delta * batch_count / total
    m2 = var * count + batch_var * batch_count + delta**2 * count * batch_count / total
    return new_mean, m2 / total, total


def normalize_obs(obs, mean, var):
    """RND's input: (obs - mean) / std, clipped to [-5, 5] (a never-seen feature cannot explode)."""
    return torch.clamp((obs - mean) / torch.sqrt(var + 1e-8), -5.0, 5.0)


def discounted_reward_stream(running, rewards, gamma):
    """The non-episodic discounted sum of intrinsic rewards, step by step, carried across rollouts
    and episode ends: running_t = gamma * running_{t-1} + r_t. Its running variance scales the
    intrinsic reward. rewards (T, N), running (N,). Returns (stream (T, N), last running)."""
    stream = torch.zeros_like(rewards)
    for t in range(rewards.shape[0]):
        running = gamma * running + rewards[t]
        stream[t] = running
    return stream, running


def rnd_intrinsic_reward(predicted, target):
    """The novelty of s': ||f_hat(s') - f(s')||^2 over the embedding (last) axis. Small where the
    predictor has been trained (visited states), large elsewhere."""
    return ((predicted - target) ** 2).sum(-1)


def rnd_predictor_loss(predicted, target, mask):
    """Mean squared distillation error over the samples kept by mask (1 = train on it). The mask keeps
    a random update_proportion of each minibatch, so the predictor does not outpace the target's
    novelty signal when many environments feed it. Only the predictor gets a gradient."""
    errors = rnd_intrinsic_reward(predicted, target.detach())
    return (errors * mask).sum() / torch.clamp(mask.sum(), min=1.0)


def compute_gae(rewards, values, dones, last_value, gamma, lam, episodic=True):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    With episodic=False the episode ends are ignored (done_t = 0 throughout): the return flows on
    into the next episode's first states, as RND's intrinsic return does. Returns (advantages,
    returns = A + V).
    """
    if not episodic:
        dones = torch.zeros_like(dones)
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


def standardize(x):
    """(x - mean) / (unbiased std + 1e-8): PPO's advantage normalisation."""
    return (x - x.mean()) / (x.std() + 1e-8)


def combine_advantages(ext_advantages, int_advantages, ext_coef, int_coef, per_head=False):
    """The advantage the policy follows: ext_coef * A_ext + int_coef * A_int (the paper's weighted sum;
    PPO then standardises it per minibatch). per_head: standardise each head over the batch first
    (`standardize`), so that the coefficients, not the two reward scales, set the balance.
    The paper's games pay a sparse extrinsic reward and the plain sum works; MountainCar pays -1 every
    step, its extrinsic advantages carry value-fit noise of order 1 while the normalised novelty's are
    of order 1e-4, and the plain sum is all noise (docs/algorithms/rnd.md)."""
    if per_head:
        ext_advantages, int_advantages = standardize(ext_advantages), standardize(int_advantages)
    return ext_coef * ext_advantages + int_coef * int_advantages


def ppo_policy_loss(logp, logp_old, advantages, clip_coef):
    """Clipped surrogate as a loss: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = pi / pi_old."""
    ratio = torch.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -torch.min(unclipped, clipped).mean()


def ppo_value_loss(values, returns):
    """0.5 * mean squared error, unclipped (as in the RND paper's PPO: with gamma 0.999 the
    extrinsic returns reach hundreds on MountainCar, and a 0.2 value clip would hold the head back)."""
    return 0.5 * ((values - returns) ** 2).mean()


# ----------------------------------------------------------------------------- networks
def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLP(nn.Sequential):
    """64-64 tanh trunk and a linear head."""

    def __init__(self, in_dim, out_dim, head_std):
        super().__init__(
            layer_init(nn.Linear(in_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, out_dim), std=head_std),
        )


class Agent(nn.Module):
    """A 64-64 tanh actor and a 64-64 tanh critic with two value heads (column 0: extrinsic,
    column 1: intrinsic) on one trunk."""

    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.critic = MLP(obs_dim, out_dim=2, head_std=1.0)
        self.actor = MLP(obs_dim, out_dim=num_actions, head_std=0.01)

    def get_value(self, obs):
        return self.critic(obs)

    def act(self, obs):
        """Sample actions; return (action, log-prob, values (.., 2))."""
        logits = self.actor(obs)
        logp_all = torch.log_softmax(logits, dim=-1)
        action = torch.multinomial(logp_all.exp(), 1).squeeze(-1)
        logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, logp, self.get_value(obs)

    def evaluate_actions(self, obs, actions):
        """Log-prob of given actions, entropy and values, with gradients, for the update."""
        logits = self.actor(obs)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy, self.get_value(obs)


class RNDNet(nn.Sequential):
    """Leaky-ReLU MLP from the normalised observation to an embedding. The target is 64-64 and
    never trained; the predictor is one hidden layer deeper (64-64-64), as the paper's predictor
    is larger than its target."""

    def __init__(self, in_dim, out_dim, depth):
        layers, width = [], in_dim
        for _ in range(depth):
            layers += [layer_init(nn.Linear(width, 64)), nn.LeakyReLU()]
            width = 64
        super().__init__(*layers, layer_init(nn.Linear(width, out_dim)))


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
        ("gamma_int", 0 <= args.gamma_int <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("ent_coef", args.ent_coef >= 0, ">= 0"),
        ("vf_coef", args.vf_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("bonus_scale", args.bonus_scale >= 0, ">= 0 (0 turns the bonus off)"),
        ("ext_coef", args.ext_coef >= 0, ">= 0"),
        ("update_proportion", 0 < args.update_proportion <= 1, "in (0, 1]"),
        ("rnd_output_dim", args.rnd_output_dim >= 1, ">= 1"),
        ("obs_norm_steps", args.obs_norm_steps >= 1, ">= 1"),
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
    if args.norm_adv_per_head and not args.norm_adv:
        raise ValueError(
            "--norm-adv-per-head standardises the heads and then the sum per minibatch; "
            "it cannot be combined with --no-norm-adv"
        )
    match = explore_envs.ID_PATTERN.match(args.env_id)
    if args.env_id.startswith(("DeepSea", "NoisyTV")) and (
        match is None or not 1 <= int(match.group(2)) <= explore_envs.MAX_SIZE
    ):
        raise ValueError(
            f"--env-id {args.env_id}: DeepSea ids are DeepSea{{N}}-v0, DeepSeaStochastic{{N}}-v0 "
            f"or NoisyTV*DeepSea{{N}}-v0 (algos/explore_envs.py) with 1 <= N <= {explore_envs.MAX_SIZE}"
        )
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_torch.py"
        )


def solve_threshold(env_id):
    """The return whose 20-episode mean counts as solved: 0.9 of DeepSea's optimum, -150 on
    MountainCar-v0; None elsewhere."""
    if explore_envs.is_deep_sea(env_id):
        return 0.9 * explore_envs.deep_sea_optimal_return(env_id)
    return MOUNTAIN_CAR_SOLVED if env_id == "MountainCar-v0" else None


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters and observation statistics into a fresh network; run the greedy
    (argmax) policy on the normalised observation."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    saved = torch.load(model_path, map_location="cpu")
    agent.load_state_dict(saved["agent"])
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                x = normalize_obs(
                    torch.as_tensor(obs, dtype=torch.float32), saved["obs_mean"], saved["obs_var"]
                )
                action = agent.actor(x).argmax().item()
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

    # ---- 1. Setup: seeding, environments, networks, optimisers, normalisers
    # Seeding: python, numpy, torch and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    # One intra-op thread: the networks are tiny, a second thread costs more than it saves, and a
    # fixed count keeps float reductions (so seeded runs) the same on any machine and in any process.
    torch.set_num_threads(1)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args.env_id, args.num_envs)
    envs.action_space.seed(args.seed)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    num_actions = int(envs.single_action_space.n)
    agent = Agent(obs_dim, num_actions)
    target = RNDNet(obs_dim, args.rnd_output_dim, depth=2).requires_grad_(False)  # fixed, random
    predictor = RNDNet(obs_dim, args.rnd_output_dim, depth=3)
    for net in (agent, target, predictor):
        net.to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    rnd_optimizer = torch.optim.Adam(predictor.parameters(), lr=args.learning_rate, eps=1e-5)

    # Rollout storage, (T, N, ...), on the device. next_obs_buf holds the true s' of each step
    # (final_obs at an episode end).
    obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    next_obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions_buf = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logps_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    values_buf = torch.zeros((args.num_steps, args.num_envs, 2), device=device)

    # Observation normaliser, initialised from uniformly random actions, as the paper does before
    # training starts (these steps are not counted in global_step; no episode of theirs enters the
    # curve). RND's input is the normalised s'; the policy and critic see the normalised s too (the
    # paper's policy sees pixels / 255; on MountainCar the raw velocity, |v| < 0.07, is too small
    # a signal for the policy to act on: docs/algorithms/rnd.md).
    obs_mean, obs_var, obs_count = (
        torch.zeros(obs_dim, device=device),
        torch.ones(obs_dim, device=device),
        1e-4,
    )
    next_obs = torch.as_tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32, device=device)
    warmup = []
    for _ in range(args.obs_norm_steps):
        obs, *_ = envs.step(envs.action_space.sample())
        warmup.append(torch.as_tensor(obs, dtype=torch.float32, device=device))
    obs_mean, obs_var, obs_count = update_running_moments(obs_mean, obs_var, obs_count, torch.cat(warmup))
    # Intrinsic-reward normaliser: running variance of the non-episodic discounted intrinsic return.
    int_mean, int_var, int_count = torch.zeros((), device=device), torch.ones((), device=device), 1e-4
    int_running = torch.zeros(args.num_envs, device=device)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    tv_actions, late_actions = 0, 0  # noisy-TV action counts over the last 25% of the steps
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = torch.as_tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32, device=device)
    next_obs = normalize_obs(next_obs, obs_mean, obs_var)

    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate
            rnd_optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            with torch.no_grad():
                action, logp, value = agent.act(next_obs)
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action.cpu().numpy())
            if global_step > 0.75 * args.total_timesteps:
                tv_actions += int((action == 2).sum())
                late_actions += args.num_envs
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            real_next_obs = np.array(obs, dtype=np.float32)
            if done.any():
                real_next_obs[done] = np.stack(infos["final_obs"][done])
            # Time-limit truncation is not a real end: the extrinsic return goes on from the true
            # final observation. Fold gamma * V_ext(final_obs) into this step's reward; the done
            # flag then cuts the extrinsic recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = normalize_obs(
                    torch.as_tensor(real_next_obs[only_truncated], device=device), obs_mean, obs_var
                )
                with torch.no_grad():
                    reward[only_truncated] += args.gamma * agent.get_value(final_obs)[:, 0].cpu().numpy()
            rewards_buf[step] = torch.as_tensor(reward, device=device)
            dones_buf[step] = torch.as_tensor(done, dtype=torch.float32, device=device)
            next_obs_buf[step] = torch.as_tensor(real_next_obs, device=device)
            next_obs = normalize_obs(
                torch.as_tensor(obs, dtype=torch.float32, device=device), obs_mean, obs_var
            )
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Intrinsic rewards: the novelty of every s' of the rollout
        # Computed after the observation normaliser has seen them, then divided by the running std
        # of the discounted intrinsic return.
        b_next_obs = next_obs_buf.reshape(batch_size, obs_dim)
        obs_mean, obs_var, obs_count = update_running_moments(obs_mean, obs_var, obs_count, b_next_obs)
        with torch.no_grad():
            rnd_in = normalize_obs(b_next_obs, obs_mean, obs_var)
            int_rewards = rnd_intrinsic_reward(predictor(rnd_in), target(rnd_in)).reshape(
                args.num_steps, args.num_envs
            )
        stream, int_running = discounted_reward_stream(int_running, int_rewards, args.gamma_int)
        int_mean, int_var, int_count = update_running_moments(
            int_mean, int_var, int_count, stream.reshape(-1)
        )
        int_rewards = int_rewards / torch.sqrt(int_var)

        # ---- 4. Advantages: two heads, bootstrapped from the observation after the rollout
        # The extrinsic return is episodic (cut at every episode end). The intrinsic one is NOT:
        # novelty found in the next episode is still the agent's to find, so an episode end must not
        # zero its value (else the agent would learn that ending an episode, or avoiding the start,
        # is free of exploration cost); the recursion flows from an episode's last step into the
        # next one's first state.
        with torch.no_grad():
            last_value = agent.get_value(next_obs)
        ext_advantages, ext_returns = compute_gae(
            rewards_buf, values_buf[..., 0], dones_buf, last_value[:, 0], args.gamma, args.gae_lambda
        )
        int_advantages, int_returns = compute_gae(
            int_rewards,
            values_buf[..., 1],
            dones_buf,
            last_value[:, 1],
            args.gamma_int,
            args.gae_lambda,
            episodic=False,
        )
        advantages = combine_advantages(
            ext_advantages, int_advantages, args.ext_coef, args.bonus_scale, args.norm_adv_per_head
        )

        # ---- 5. Update: epochs x minibatches, PPO then the predictor on each minibatch
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_rnd_in = rnd_in
        b_targets = target(b_rnd_in)
        b_actions, b_logps = actions_buf.reshape(-1), logps_buf.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_ext_returns, b_int_returns = ext_returns.reshape(-1), int_returns.reshape(-1)
        b_values = values_buf.reshape(batch_size, 2)
        stats = {
            "policy_loss": 0.0,
            "value_loss": 0.0,
            "entropy": 0.0,
            "approx_kl": 0.0,
            "clipfrac": 0.0,
            "rnd_loss": 0.0,
        }
        for epoch in range(args.update_epochs):
            perm = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb = perm[start : start + minibatch_size]
                logp, entropy, value = agent.evaluate_actions(b_obs[mb], b_actions[mb])
                mb_adv = b_advantages[mb]
                if args.norm_adv:
                    mb_adv = standardize(mb_adv)
                pg_loss = ppo_policy_loss(logp, b_logps[mb], mb_adv, args.clip_coef)
                v_loss = ppo_value_loss(value[:, 0], b_ext_returns[mb]) + ppo_value_loss(
                    value[:, 1], b_int_returns[mb]
                )
                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                # Clip the actor's and the critic's gradients separately: with gamma 0.999 and -1 per
                # step (MountainCar) the value loss is in the hundreds, and one global clip would
                # scale the policy's gradient down with the critic's.
                nn.utils.clip_grad_norm_(agent.actor.parameters(), args.max_grad_norm)
                nn.utils.clip_grad_norm_(agent.critic.parameters(), args.max_grad_norm)
                optimizer.step()
                # The predictor distils the fixed target on a random update_proportion of the minibatch.
                mask = (torch.rand(minibatch_size, device=device) < args.update_proportion).float()
                rnd_loss = rnd_predictor_loss(predictor(b_rnd_in[mb]), b_targets[mb], mask)
                rnd_optimizer.zero_grad()
                rnd_loss.backward()
                rnd_optimizer.step()
                with torch.no_grad():
                    logratio = logp - b_logps[mb]
                    # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
                    stats["approx_kl"] += ((logratio.exp() - 1) - logratio).mean().item()
                    stats["clipfrac"] += ((logratio.exp() - 1.0).abs() > args.clip_coef).float().mean().item()
                stats["policy_loss"] += pg_loss.item()
                stats["value_loss"] += v_loss.item()
                stats["entropy"] += entropy_loss.item()
                stats["rnd_loss"] += rnd_loss.item()

        # ---- 6. Logging
        num_updates = args.update_epochs * args.num_minibatches
        var_returns = b_ext_returns.var().item()
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_ext_returns - b_values[:, 0]).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("charts/intrinsic_reward", int_rewards.mean().item(), global_step)
        for name, total in stats.items():
            writer.add_scalar(f"losses/{name}", total / num_updates, global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        if args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
            last_print = time.time()
            mean_recent = np.mean(recent) if recent else float("nan")
            print(
                f"\rstep {global_step:>9,d}/{args.total_timesteps:,d}  return(20) {mean_recent:7.2f}  "
                f"SPS {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: close, save, evaluate
    envs.close()
    wall_time = time.time() - start_time
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "num_episodes": len(episode_returns),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: total / num_updates for name, total in stats.items()},
    }
    threshold = solve_threshold(args.env_id)
    if threshold is not None:
        # Never solved: the number of finished episodes + 1, so the figure is always finite.
        solved = explore_envs.episodes_to_solve([r for _, r in episode_returns], threshold, 20)
        summary["episodes_to_solve"] = float(len(episode_returns) + 1 if solved is None else solved)
    if args.env_id.startswith("NoisyTV"):
        summary["tv_fraction"] = tv_actions / max(late_actions, 1)
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(
            {
                "agent": agent.state_dict(),
                "predictor": predictor.state_dict(),
                "target": target.state_dict(),
                "obs_mean": obs_mean,
                "obs_var": obs_var,
            },
            model_path,
        )
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
