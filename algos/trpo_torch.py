"""TRPO: trust region policy optimisation, discrete actions -- the PyTorch twin.

One policy step per rollout: the natural direction F^-1 g by conjugate gradient on Fisher-vector
products, scaled to the KL radius max_kl, then a backtracking line search; the critic is fitted apart.
Papers: Schulman et al. 2015, "Trust Region Policy Optimization", arXiv:1502.05477;
        Kakade 2001, "A Natural Policy Gradient", NeurIPS; Schulman et al. 2016, "High-Dimensional
        Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438.
Twin:   algos/trpo_jax.py (`diff algos/trpo_torch.py algos/trpo_jax.py` shows only the framework).
Docs:   docs/algorithms/trpo.md
Run:    python algos/trpo_torch.py --seed 1
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
from torch.func import functional_call
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
    num_envs: int = 4
    """parallel environments (gymnasium SyncVectorEnv, same-step autoreset)"""
    num_steps: int = 256
    """steps per environment per rollout (one policy step per rollout)"""
    max_kl: float = 0.01
    """trust-region radius delta: the mean KL(pi_old || pi_new) allowed per step"""
    cg_iters: int = 10
    """conjugate-gradient iterations for F^-1 g"""
    cg_damping: float = 1e-3
    """damping lambda: the Fisher-vector product uses F + lambda I (why 1e-3: docs/algorithms/trpo.md)"""
    backtrack_iters: int = 10
    """line-search trials, each halving the step"""
    vf_learning_rate: float = 1e-3
    """Adam learning rate of the value function"""
    vf_iters: int = 20
    """full-batch Adam steps on the value function per rollout"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.98
    """lambda of GAE (the TRPO paper: Monte Carlo returns; why 0.98: docs/algorithms/trpo.md)"""
    norm_adv: bool = True
    """normalise advantages over the batch"""
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
    total_timesteps=1024, num_envs=4, num_steps=128, vf_iters=2, save_model=True, eval_episodes=2
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


def categorical_log_prob(logits, actions):
    """log pi(a | s) of integer actions under softmax(logits)."""
    logp_all = torch.log_softmax(logits, dim=-1)
    return logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_kl(logits_old, logits_new):
    """Mean over states of KL(pi_old || pi_new) = sum_a pi_old (log pi_old - log pi_new)."""
    logp_old = torch.log_softmax(logits_old, dim=-1)
    logp_new = torch.log_softmax(logits_new, dim=-1)
    return (logp_old.exp() * (logp_old - logp_new)).sum(-1).mean()


def surrogate(logp, logp_old, advantages):
    """The importance-weighted surrogate mean(pi / pi_old * A), to maximise; its gradient at
    pi = pi_old is the policy gradient."""
    return (torch.exp(logp - logp_old) * advantages).mean()


def fisher_vector_product(kl_fn, theta, v, damping):
    """(H + damping I) v with H the Hessian of kl_fn at theta, by differentiating g(theta) . v
    where g is the KL's gradient (Pearlmutter's trick): two backward passes, no matrix. At
    theta = theta_old the Hessian of KL(pi_old || pi_theta) is the Fisher information matrix."""
    theta = theta.detach().requires_grad_(True)
    grad = torch.autograd.grad(kl_fn(theta), theta, create_graph=True)[0]
    return torch.autograd.grad(grad @ v, theta)[0] + damping * v


def conjugate_gradient(Avp, b, iters, residual_tol=1e-10):
    """Solve A x = b for symmetric positive-definite A given only v -> A v; from x = 0, at most
    iters steps (exact after dim steps in exact arithmetic)."""
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = r @ r
    for _ in range(iters):
        if float(rr) < residual_tol:
            break
        Ap = Avp(p)
        alpha = rr / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def line_search(objective, theta, full_step, max_kl, backtrack_iters):
    """Try theta + 0.5^k full_step, k = 0, 1, ...; accept the first whose mean KL is <= max_kl and
    whose surrogate improves on theta's. objective(theta) -> (surrogate, kl). Returns
    (theta_new, accepted, step_fraction); when nothing is accepted, theta itself (unchanged)."""
    surrogate_old, _ = objective(theta)
    for k in range(backtrack_iters):
        fraction = 0.5**k
        candidate = theta + fraction * full_step
        surrogate_new, kl = objective(candidate)
        if float(kl) <= max_kl and float(surrogate_new - surrogate_old) > 0:
            return candidate, True, fraction
    return theta, False, 0.0


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
        ("max_kl", args.max_kl > 0, "> 0: the trust region needs a positive radius"),
        ("cg_iters", args.cg_iters >= 1, ">= 1"),
        ("cg_damping", args.cg_damping >= 0, ">= 0"),
        ("backtrack_iters", args.backtrack_iters >= 1, ">= 1"),
        ("vf_learning_rate", args.vf_learning_rate > 0, "> 0"),
        ("vf_iters", args.vf_iters >= 1, ">= 1"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
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
    # Only the critic has an optimiser; the actor moves by the natural-gradient step.
    optimizer = torch.optim.Adam(agent.critic.parameters(), lr=args.vf_learning_rate)
    shapes = [p.shape for p in agent.actor.parameters()]
    names = [name for name, _ in agent.actor.named_parameters()]

    def unflatten(theta):
        """The flat actor vector back to a {name: tensor} dict for functional_call."""
        chunks = torch.split(theta, [int(np.prod(shape)) for shape in shapes])
        return {name: chunk.reshape(shape) for name, chunk, shape in zip(names, chunks, shapes)}

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
    next_obs = torch.as_tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32, device=device)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout
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

        # ---- 3. Advantages: GAE, bootstrapped from the observation after the rollout
        with torch.no_grad():
            last_value = agent.get_value(next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Policy step: one natural-gradient step inside the KL trust region
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        b_actions, b_logps = actions_buf.reshape(-1), logps_buf.reshape(-1)
        b_advantages, b_returns, b_values = (
            advantages.reshape(-1),
            returns.reshape(-1),
            values_buf.reshape(-1),
        )
        if args.norm_adv:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std() + 1e-8)
        theta = nn.utils.parameters_to_vector(agent.actor.parameters()).detach()
        with torch.no_grad():
            logits_old = agent.actor(b_obs)
        policy_logits = lambda theta: functional_call(agent.actor, unflatten(theta), (b_obs,))
        surrogate_fn = lambda theta: surrogate(
            categorical_log_prob(policy_logits(theta), b_actions), b_logps, b_advantages
        )
        kl_fn = lambda theta: categorical_kl(logits_old, policy_logits(theta))

        def objective(theta):
            with torch.no_grad():
                return surrogate_fn(theta), kl_fn(theta)

        theta_g = theta.clone().requires_grad_(True)
        g = torch.autograd.grad(surrogate_fn(theta_g), theta_g)[0]
        Fvp = lambda v: fisher_vector_product(kl_fn, theta, v, args.cg_damping)
        step_dir = conjugate_gradient(Fvp, g, args.cg_iters)
        # Scale so that the quadratic model of the KL, 0.5 s^T F s, equals max_kl.
        shs = 0.5 * (step_dir @ Fvp(step_dir))
        full_step = step_dir * torch.sqrt(args.max_kl / shs)
        new_theta, accepted, fraction = line_search(
            objective, theta, full_step, args.max_kl, args.backtrack_iters
        )
        nn.utils.vector_to_parameters(new_theta, agent.actor.parameters())
        surrogate_new, kl_new = objective(new_theta)
        surrogate_old, _ = objective(theta)

        # ---- 5. Value function: a separate regression on the GAE returns
        for _ in range(args.vf_iters):
            v_loss = 0.5 * ((agent.get_value(b_obs) - b_returns) ** 2).mean()
            optimizer.zero_grad()
            v_loss.backward()
            optimizer.step()
        stats = {
            "surrogate_improvement": (surrogate_new - surrogate_old).item(),
            "kl": kl_new.item(),
            "step_fraction": fraction,
            "accepted": float(accepted),
            "value_loss": v_loss.item(),
            "expected_improvement": (g @ full_step).item(),
        }

        # ---- 6. Logging
        var_returns = b_returns.var().item()
        explained_var = (
            np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var().item() / var_returns
        )
        sps = int(global_step / (time.time() - start_time))
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
