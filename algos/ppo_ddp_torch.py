"""PPO with the clipped surrogate, discrete actions, data parallel over processes -- the PyTorch twin.

algos/ppo_torch.py over torchrun processes with DistributedDataParallel: every rank steps its own
environments, DDP averages the gradients, and advantages are normalised over the global minibatch.
Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347;
        Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
        Advantage Estimation", arXiv:1506.02438.
Twin:   algos/ppo_ddp_jax.py (jax.sharding); the single-process original is algos/ppo_torch.py
        (`diff algos/ppo_torch.py algos/ppo_ddp_torch.py` shows the distribution).
Docs:   docs/algorithms/ppo_ddp.md
Run:    torchrun --nproc_per_node=2 algos/ppo_ddp_torch.py --num-envs 4  (plain python: one process)
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import tyro
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "CartPole-v1"
    """gymnasium environment id (discrete actions)"""
    total_timesteps: int = 400_000
    """total environment steps, summed over the vector envs of every worker (CleanRL: 500k)"""
    num_envs: int = 8
    """parallel environments per worker, a torchrun rank or a JAX device (CleanRL's ppo.py: 4)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 1e-3
    """Adam learning rate (CleanRL: 2.5e-4; why 1e-3 here: docs/algorithms/ppo.md)"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    num_minibatches: int = 4
    """minibatches per epoch; must divide num_envs * num_steps (each worker's share)"""
    update_epochs: int = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch (over all workers' shares: global mean and std)"""
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
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    eval_episodes: int = 10
    """episodes of the deterministic evaluation after --save-model"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_timesteps=2048, num_envs=4, num_steps=128, save_model=True, eval_episodes=2)


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


# ----------------------------------------------------------------------------- distribution
def all_reduce_sum(x):
    """Sum of x over the ranks (x itself when there is no process group: world size 1)."""
    if dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)  # SUM by default
    return x


def normalize_advantages(adv):
    """(A - mean) / (std + 1e-8) along the last axis (one row per minibatch), with the mean and the
    (unbiased) std of the GLOBAL minibatch, the concatenation of every rank's share: two all-reduces
    for all the rows at once (sums, then squared deviations). Per-rank statistics would give each
    rank another normalisation, and the 2-process update would no longer be the 1-process update on
    the concatenated batch."""
    n = adv.shape[-1] * (dist.get_world_size() if dist.is_initialized() else 1)
    mean = all_reduce_sum(adv.sum(-1, keepdim=True)) / n
    var = all_reduce_sum(((adv - mean) ** 2).sum(-1, keepdim=True)) / (n - 1)
    return (adv - mean) / (var.sqrt() + 1e-8)


def draw_minibatches(generator, batch_size, num_minibatches, update_epochs, num_shards=1):
    """Index tensors of the update's epochs x minibatches over a batch made of num_shards equal
    blocks (one per rank), each minibatch taking the same positions of every block. The permutation
    comes from a generator seeded alike on every rank, so all ranks take the same positions in
    lockstep; a rank holds one block (num_shards=1), the 1-process equivalent holds the
    concatenation (num_shards=world size) and gets the same global minibatches."""
    shard_size = batch_size // num_shards
    minibatch_size = shard_size // num_minibatches
    offsets = torch.arange(num_shards)[:, None] * shard_size
    minibatches = []
    for epoch in range(update_epochs):
        perm = torch.randperm(shard_size, generator=generator)
        for start in range(0, shard_size, minibatch_size):
            minibatches.append((offsets + perm[start : start + minibatch_size]).reshape(-1))
    return minibatches


def ppo_update(model, optimizer, batch, minibatches, args):
    """Epochs x minibatches of clipped-PPO steps on this rank's batch (a dict of flat tensors).
    model is the DistributedDataParallel-wrapped agent (or the plain agent at world size 1): its
    forward is evaluate_actions, and backward all-reduces (averages) the gradients over the ranks,
    so the gradient clip and the Adam step see the gradient of the global minibatch's loss. Returns
    the summed per-minibatch statistics of this rank."""
    params = list(model.parameters())
    stats = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
    minibatches = torch.stack(minibatches).to(batch["obs"].device)
    mb_advs = batch["advantages"][minibatches]  # (updates, minibatch size): fixed during the update
    if args.norm_adv:
        mb_advs = normalize_advantages(mb_advs)  # every minibatch's statistics in two all-reduces
    for mb, mb_adv in zip(minibatches, mb_advs):
        logp, entropy, value = model(batch["obs"][mb], batch["actions"][mb])
        pg_loss = ppo_policy_loss(logp, batch["logps"][mb], mb_adv, args.clip_coef)
        v_loss = ppo_value_loss(
            value, batch["values"][mb], batch["returns"][mb], args.clip_coef if args.clip_vloss else None
        )
        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
        optimizer.zero_grad()
        loss.backward()  # DDP: the gradient all-reduce runs here, bucket by bucket
        nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            logratio = logp - batch["logps"][mb]
            # k3 estimator of KL(pi_old || pi): (r - 1) - log r, unbiased and >= 0
            stats["approx_kl"] += ((logratio.exp() - 1) - logratio).mean().item()
            stats["clipfrac"] += ((logratio.exp() - 1.0).abs() > args.clip_coef).float().mean().item()
        stats["policy_loss"] += pg_loss.item()
        stats["value_loss"] += v_loss.item()
        stats["entropy"] += entropy_loss.item()
    return stats


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

    def forward(self, obs, actions):
        """DistributedDataParallel hooks forward() only: the update calls the wrapped model (this,
        evaluate_actions), the rollout calls the plain module's act and get_value (no gradients)."""
        return self.evaluate_actions(obs, actions)


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
    batch_size = args.num_envs * args.num_steps  # one worker's share
    workers = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's process count; 1 started plainly
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
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and batch_size % args.num_minibatches == 0,
            f"a divisor of --num-envs * --num-steps = {batch_size} (each worker's share)",
        ),
        (
            "total_timesteps",
            args.total_timesteps >= batch_size * workers,
            f">= one rollout of {workers} workers x --num-envs x --num-steps = {batch_size * workers}",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    space = gym.make(args.env_id).action_space  # env construction only: no step taken
    if not isinstance(space, gym.spaces.Discrete):
        raise ValueError(
            f"--env-id {args.env_id} has {type(space).__name__} actions; this script is for Discrete "
            f"actions. For continuous actions use algos/ppo_continuous_torch.py"
        )


def setup_distributed(args):
    """(rank, world size, device). Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the
    environment) join the process group: gloo on the CPU, nccl on CUDA, one GPU per local rank.
    Started plainly: rank 0 of 1, no process group, no collective."""
    use_cuda = args.cuda and torch.cuda.is_available()
    if "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device("cuda" if use_cuda else "cpu")
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


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

    # ---- 1. Setup: process group, seeding, environments, networks, optimiser
    rank, world_size, device = setup_distributed(args)
    batch_size = args.num_envs * args.num_steps  # this rank's share; the global batch is world_size times it
    num_iterations = args.total_timesteps // (batch_size * world_size)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = None
    if rank == 0:  # only rank 0 logs: one run directory, one curve, no N copies of every scalar
        writer = SummaryWriter(run_dir)
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
            + f"\n|world_size|{world_size}|",
        )

    # Seeding: python, numpy, torch and the environments, offset per rank (env i of rank r gets
    # seed + r * num_envs + i: every environment of the run has its own seed). The minibatch
    # shuffling has its own generator, seeded alike on every rank: all ranks take the same positions.
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    shuffle_generator = torch.Generator().manual_seed(args.seed)
    # One intra-op thread: the networks are tiny, a second thread costs more than it saves, and a
    # fixed count keeps float reductions (so seeded runs) the same on any machine and in any process.
    torch.set_num_threads(1)

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n)).to(device)
    # DDP broadcasts rank 0's initial parameters to every rank, then all-reduces gradients in backward.
    model = (
        DistributedDataParallel(agent, device_ids=[device.index] if device.type == "cuda" else None)
        if dist.is_initialized()
        else agent
    )
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # Rollout storage, (T, N, ...), on the device (CleanRL's layout).
    obs_buf = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions_buf = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logps_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones_buf = torch.zeros((args.num_steps, args.num_envs), device=device)
    values_buf = torch.zeros((args.num_steps, args.num_envs), device=device)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = torch.as_tensor(
        envs.reset(seed=args.seed + rank * args.num_envs)[0], dtype=torch.float32, device=device
    )

    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # ---- 2. Rollout: every rank its own envs; global_step counts the steps of all ranks
        finished = []  # (global_step, return, length) of this rank's episodes ended in this rollout
        for step in range(args.num_steps):
            global_step += args.num_envs * world_size
            obs_buf[step] = next_obs
            with torch.no_grad():
                action, logp, value = agent.act(next_obs)
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
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
                finished.append((global_step, float(ep_return[i]), int(ep_length[i])))
                ep_return[i], ep_length[i] = 0.0, 0
        # Finished episodes go to rank 0 once per rollout (one gather, not one per step), in step order.
        if world_size > 1:
            gathered = [None] * world_size if rank == 0 else None
            dist.gather_object(finished, gathered, dst=0)
            finished = sorted(sum(gathered, []), key=lambda e: e[0]) if rank == 0 else []
        for step_, ret, length in finished:
            episode_returns.append((step_, ret))
            writer.add_scalar("charts/episodic_return", ret, step_)
            writer.add_scalar("charts/episodic_length", length, step_)
        recent = [r for _, r in episode_returns[-20:]]

        # ---- 3. Advantages: GAE per rank and env, bootstrapped from the observation after the rollout
        with torch.no_grad():
            last_value = agent.get_value(next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Update: epochs x minibatches over the flattened batch, gradients averaged over ranks
        batch = {
            "obs": obs_buf.reshape(batch_size, obs_dim),
            "actions": actions_buf.reshape(-1),
            "logps": logps_buf.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
            "values": values_buf.reshape(-1),
        }
        minibatches = draw_minibatches(
            shuffle_generator, batch_size, args.num_minibatches, args.update_epochs
        )
        stats = ppo_update(model, optimizer, batch, minibatches, args)
        # The logged losses: this rank's sums averaged over the ranks (one all-reduce per rollout).
        reduced = all_reduce_sum(torch.tensor(list(stats.values()), device=device)) / world_size
        stats = dict(zip(stats, reduced.tolist()))

        # ---- 5. Logging
        num_updates = args.update_epochs * args.num_minibatches
        b_returns, b_values = batch["returns"], batch["values"]
        var_returns = b_returns.var().item()  # explained variance of rank 0's share of the batch
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
        if rank == 0:
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            for name, total in stats.items():
                writer.add_scalar(f"losses/{name}", total / num_updates, global_step)
            writer.add_scalar("losses/explained_variance", explained_var, global_step)
            writer.add_scalar("charts/SPS", sps, global_step)
        if rank == 0 and args.progress and (time.time() - last_print > 0.5 or iteration == num_iterations):
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
    if rank == 0 and args.progress:
        print(file=sys.stderr)

    envs.close()
    wall_time = time.time() - start_time
    if dist.is_initialized():
        dist.barrier()  # every rank is done with collectives before the group goes
        dist.destroy_process_group()
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": float(np.mean(recent)) if recent else float("nan"),
        "sps": global_step / wall_time,
        "wall_time": wall_time,
        "global_step": global_step,
        "run_dir": run_dir,
        "losses": {name: total / num_updates for name, total in stats.items()},
        "world_size": world_size,
        "rank": rank,
    }
    if args.save_model and rank == 0:  # the parameters are the same on every rank: rank 0 saves them
        model_path = os.path.join(run_dir, "model.pt")
        torch.save(agent.state_dict(), model_path)
        eval_returns = evaluate(model_path, args.env_id, args.eval_episodes, seed=args.seed + 10_000)
        for i, r in enumerate(eval_returns):
            writer.add_scalar("eval/episodic_return", r, i)
        summary.update(model_path=model_path, eval_mean_return=float(np.mean(eval_returns)))
    if writer is not None:
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
