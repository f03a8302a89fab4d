"""TRPO: trust region policy optimisation, discrete actions -- the JAX twin.

One policy step per rollout: the natural direction F^-1 g by conjugate gradient on Fisher-vector
products, scaled to the KL radius max_kl, then a backtracking line search; the critic is fitted apart.
Papers: Schulman et al. 2015, "Trust Region Policy Optimization", arXiv:1502.05477;
        Kakade 2001, "A Natural Policy Gradient", NeurIPS; Schulman et al. 2016, "High-Dimensional
        Continuous Control Using Generalized Advantage Estimation", arXiv:1506.02438.
Twin:   algos/trpo_torch.py (`diff algos/trpo_torch.py algos/trpo_jax.py` shows only the framework).
Docs:   docs/algorithms/trpo.md
Run:    python algos/trpo_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial

import flax.linen as nn
import flax.serialization
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from jax.flatten_util import ravel_pytree
from tensorboardX import SummaryWriter


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
@jax.jit
def compute_gae(rewards, values, dones, last_value, gamma, lam):
    """Generalised advantage estimation on (T, N) arrays.

    dones[t] = 1 when the episode ended with the step taken at t (terminated or truncated; a
    truncation's bootstrap value is already folded into rewards[t]). The recursion runs backwards:
        delta_t = r_t + gamma * (1 - done_t) * V_{t+1} - V_t,   V_T = last_value
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    so nothing flows across an episode boundary. Returns (advantages, returns = A + V).
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)

    def step(next_advantage, xs):
        reward, value, next_value, done = xs
        not_done = 1.0 - done
        delta = reward + gamma * not_done * next_value - value
        advantage = delta + gamma * lam * not_done * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(last_value), (rewards, values, next_values, dones), reverse=True
    )
    return advantages, advantages + values


def categorical_log_prob(logits, actions):
    """log pi(a | s) of integer actions under softmax(logits)."""
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp_all, actions[..., None].astype(jnp.int32), axis=-1).squeeze(-1)


def categorical_kl(logits_old, logits_new):
    """Mean over states of KL(pi_old || pi_new) = sum_a pi_old (log pi_old - log pi_new)."""
    logp_old = jax.nn.log_softmax(logits_old, axis=-1)
    logp_new = jax.nn.log_softmax(logits_new, axis=-1)
    return (jnp.exp(logp_old) * (logp_old - logp_new)).sum(-1).mean()


def surrogate(logp, logp_old, advantages):
    """The importance-weighted surrogate mean(pi / pi_old * A), to maximise; its gradient at
    pi = pi_old is the policy gradient."""
    return (jnp.exp(logp - logp_old) * advantages).mean()


def fisher_vector_product(kl_fn, theta, v, damping):
    """(H + damping I) v with H the Hessian of kl_fn at theta, as a forward-mode derivative of the
    KL's gradient in direction v (jvp of grad): no matrix is formed. At theta = theta_old the
    Hessian of KL(pi_old || pi_theta) is the Fisher information matrix."""
    return jax.jvp(jax.grad(kl_fn), (theta,), (v,))[1] + damping * v


def conjugate_gradient(Avp, b, iters, residual_tol=1e-10):
    """Solve A x = b for symmetric positive-definite A given only v -> A v; from x = 0, at most
    iters steps (exact after dim steps in exact arithmetic)."""
    x = jnp.zeros_like(b)
    r, p = b, b
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
def layer_init(features, std=np.sqrt(2), bias_const=0.0):
    return nn.Dense(
        features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const)
    )


class MLP(nn.Module):
    """64-64 tanh trunk and a linear head; the actor and the critic are two separate MLPs."""

    out_dim: int
    head_std: float

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(layer_init(64)(x))
        x = nn.tanh(layer_init(64)(x))
        return layer_init(self.out_dim, std=self.head_std)(x)


class Agent:
    """Separate 64-64 tanh actor and critic (no shared trunk); params = {"actor": ..., "critic": ...}."""

    def __init__(self, obs_dim, num_actions):
        self.obs_dim = obs_dim
        self.critic = MLP(out_dim=1, head_std=1.0)
        self.actor = MLP(out_dim=num_actions, head_std=0.01)

    def init(self, key):
        actor_key, critic_key = jax.random.split(key)
        dummy = jnp.zeros((1, self.obs_dim))
        return {"actor": self.actor.init(actor_key, dummy), "critic": self.critic.init(critic_key, dummy)}

    def get_value(self, params, obs):
        return self.critic.apply(params["critic"], obs).squeeze(-1)

    @partial(jax.jit, static_argnums=0)
    def act(self, params, obs, key):
        """Sample actions; return (action, log-prob, value, key). The key is split inside the
        jitted call: splitting outside would cost a second dispatch per step."""
        key, sample_key = jax.random.split(key)
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        action = jax.random.categorical(sample_key, logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, action[:, None], axis=-1).squeeze(-1)
        return action, logp, self.get_value(params, obs), key

    def evaluate_actions(self, params, obs, actions):
        """Log-prob of given actions, entropy and value, with gradients, for the update."""
        logits = self.actor.apply(params["actor"], obs)
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=-1).squeeze(-1)
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
        return logp, entropy, self.get_value(params, obs)


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
            f"actions. For continuous actions use algos/ppo_continuous_jax.py"
        )


def evaluate(model_path, env_id, eval_episodes, seed):
    """Load the saved parameters into a fresh network; run the greedy (argmax) policy."""
    env = gym.make(env_id)
    agent = Agent(int(np.prod(env.observation_space.shape)), int(env.action_space.n))
    with open(model_path, "rb") as f:
        params = flax.serialization.from_bytes(agent.init(jax.random.PRNGKey(0)), f.read())
    greedy = jax.jit(lambda params, obs: agent.actor.apply(params["actor"], obs).argmax(-1))
    returns = []
    for episode in range(eval_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            action = int(greedy(params, obs))
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

    # Seeding: python, numpy, jax and the environments (env i gets seed + i).
    random.seed(args.seed)
    np.random.seed(args.seed)
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    key = jax.random.PRNGKey(args.seed)

    envs = make_envs(args.env_id, args.num_envs)
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    key, init_key = jax.random.split(key)
    params = agent.init(init_key)
    # Only the critic has an optimiser; the actor moves by the natural-gradient step.
    optimizer = optax.adam(args.vf_learning_rate)
    opt_state = optimizer.init(params["critic"])
    _, unflatten = ravel_pytree(params["actor"])

    def policy_logits(theta, obs):
        return agent.actor.apply(unflatten(theta), obs)

    @jax.jit
    def surrogate_grad(theta, batch):
        surrogate_fn = lambda theta: surrogate(
            categorical_log_prob(policy_logits(theta, batch["obs"]), batch["actions"]),
            batch["logps"],
            batch["advantages"],
        )
        return jax.grad(surrogate_fn)(theta)

    @jax.jit
    def objective(theta, batch):
        logp = categorical_log_prob(policy_logits(theta, batch["obs"]), batch["actions"])
        return (
            surrogate(logp, batch["logps"], batch["advantages"]),
            categorical_kl(batch["logits_old"], policy_logits(theta, batch["obs"])),
        )

    @jax.jit
    def fvp(theta, v, batch):
        kl_fn = lambda theta: categorical_kl(batch["logits_old"], policy_logits(theta, batch["obs"]))
        return fisher_vector_product(kl_fn, theta, v, args.cg_damping)

    @jax.jit
    def update_critic(critic_params, opt_state, obs, returns):
        """vf_iters full-batch Adam steps on the value regression, one jitted call (lax.scan)."""

        def step(carry, _):
            critic_params, opt_state = carry
            v_loss_fn = lambda cp: 0.5 * ((agent.critic.apply(cp, obs).squeeze(-1) - returns) ** 2).mean()
            v_loss, grads = jax.value_and_grad(v_loss_fn)(critic_params)
            updates, opt_state = optimizer.update(grads, opt_state, critic_params)
            return (optax.apply_updates(critic_params, updates), opt_state), v_loss

        (critic_params, opt_state), v_losses = jax.lax.scan(
            step, (critic_params, opt_state), None, length=args.vf_iters
        )
        return critic_params, opt_state, v_losses[-1]

    get_value = jax.jit(agent.get_value)

    # Rollout storage, (T, N, ...), on the host: the envs step on numpy anyway.
    obs_buf = np.zeros((args.num_steps, args.num_envs, obs_dim), dtype=np.float32)
    actions_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.int32)
    logps_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    rewards_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    dones_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)
    values_buf = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    episode_returns, recent = [], []
    ep_return = np.zeros(args.num_envs)
    ep_length = np.zeros(args.num_envs, dtype=np.int64)
    global_step, last_print = 0, 0.0
    start_time = time.time()
    next_obs = np.asarray(envs.reset(seed=args.seed)[0], dtype=np.float32)

    for iteration in range(1, num_iterations + 1):
        # ---- 2. Rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            action, logp, value, key = agent.act(params, next_obs, key)
            action = np.asarray(action)
            actions_buf[step], logps_buf[step], values_buf[step] = action, logp, value
            obs, reward, terminated, truncated, infos = envs.step(action)
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            # Time-limit truncation is not a real end: the return goes on from the true final
            # observation. Fold gamma * V(final_obs) into this step's reward; the done flag then
            # cuts the recursion as for a termination (whose bootstrap is 0).
            reward = reward.astype(np.float32)
            only_truncated = truncated & ~terminated
            if only_truncated.any():
                final_obs = np.stack(infos["final_obs"][only_truncated]).astype(np.float32)
                reward[only_truncated] += args.gamma * np.asarray(get_value(params, final_obs))
            rewards_buf[step] = reward
            dones_buf[step] = done
            next_obs = np.asarray(obs, dtype=np.float32)
            for i in np.flatnonzero(done):
                episode_returns.append((global_step, float(ep_return[i])))
                recent = [r for _, r in episode_returns[-20:]]
                writer.add_scalar("charts/episodic_return", ep_return[i], global_step)
                writer.add_scalar("charts/episodic_length", ep_length[i], global_step)
                ep_return[i], ep_length[i] = 0.0, 0

        # ---- 3. Advantages: GAE, bootstrapped from the observation after the rollout
        last_value = get_value(params, next_obs)
        advantages, returns = compute_gae(
            rewards_buf, values_buf, dones_buf, last_value, args.gamma, args.gae_lambda
        )

        # ---- 4. Policy step: one natural-gradient step inside the KL trust region
        b_advantages = advantages.reshape(-1)
        if args.norm_adv:
            b_advantages = (b_advantages - b_advantages.mean()) / (b_advantages.std(ddof=1) + 1e-8)
        theta, _ = ravel_pytree(params["actor"])
        b_obs = obs_buf.reshape(batch_size, obs_dim)
        batch = {
            "obs": b_obs,
            "actions": actions_buf.reshape(-1),
            "logps": logps_buf.reshape(-1),
            "advantages": b_advantages,
            "logits_old": policy_logits(theta, b_obs),
        }

        g = surrogate_grad(theta, batch)
        Fvp = lambda v: fvp(theta, v, batch)
        step_dir = conjugate_gradient(Fvp, g, args.cg_iters)
        # Scale so that the quadratic model of the KL, 0.5 s^T F s, equals max_kl.
        shs = 0.5 * (step_dir @ Fvp(step_dir))
        full_step = step_dir * jnp.sqrt(args.max_kl / shs)
        new_theta, accepted, fraction = line_search(
            lambda theta: objective(theta, batch), theta, full_step, args.max_kl, args.backtrack_iters
        )
        params = {"actor": unflatten(new_theta), "critic": params["critic"]}
        surrogate_new, kl_new = objective(new_theta, batch)
        surrogate_old, _ = objective(theta, batch)

        # ---- 5. Value function: a separate regression on the GAE returns
        b_returns, b_values = np.asarray(returns).reshape(-1), values_buf.reshape(-1)
        critic_params, opt_state, v_loss = update_critic(params["critic"], opt_state, b_obs, b_returns)
        params = {"actor": params["actor"], "critic": critic_params}
        stats = {
            "surrogate_improvement": float(surrogate_new - surrogate_old),
            "kl": float(kl_new),
            "step_fraction": fraction,
            "accepted": float(accepted),
            "value_loss": float(v_loss),
            "expected_improvement": float(g @ full_step),
        }

        # ---- 6. Logging
        var_returns = b_returns.var(ddof=1)
        explained_var = np.nan if var_returns == 0 else 1.0 - (b_returns - b_values).var(ddof=1) / var_returns
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
        model_path = os.path.join(run_dir, "model.msgpack")
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes(params))
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
