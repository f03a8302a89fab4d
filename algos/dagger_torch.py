"""DAgger: dataset aggregation, imitation with the expert labelling the learner's states -- the PyTorch twin.

Iteration 0 rolls out the scripted expert; iteration i rolls out the mixture that executes the expert's
action with probability beta_i = beta_decay ** i. The expert labels every visited state, the pairs join
the aggregate D, and the policy (BC's) is retrained on all of D. A BC baseline trained on as many
expert-only labels is reported beside it, at equal labels (dagger_return, bc_return).
Paper:  Ross, Gordon & Bagnell 2011, "A Reduction of Imitation Learning and Structured Prediction to
        No-Regret Online Learning", arXiv:1011.0686 (AISTATS 2011).
Twin:   algos/dagger_jax.py (`diff algos/dagger_torch.py algos/dagger_jax.py` shows only the framework).
Docs:   docs/algorithms/dagger.md
Run:    python algos/dagger_torch.py --seed 1
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
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    env_id: str = "Pendulum-v1"
    """environment with a scripted expert: CartPole-v1, Pendulum-v1 or PointMazeStitch-v0"""
    iterations: int = 10
    """DAgger iterations; iteration 0 rolls out the expert alone"""
    labels_per_iteration: int = 200
    """environment steps per iteration; the expert labels each visited state, so D grows by as many"""
    beta_decay: float = 0.0
    """beta_i = beta_decay ** i, the probability of executing the expert's action (0: 1, then 0)"""
    gradient_steps: int = 1_000
    """gradient steps on the aggregate D after each iteration"""
    warm_start: bool = False
    """continue from the previous iteration's weights and optimiser instead of retraining from scratch"""
    batch_size: int = 256
    """(s, a) pairs per gradient step, drawn uniformly with replacement from D"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    hidden_size: int = 256
    """width of the two hidden layers of the policy"""
    bc_baseline: bool = True
    """also train BC on as many expert labels from expert-only rollouts (bc_return at equal labels)"""
    eval_episodes: int = 10
    """episodes per evaluation (after each iteration, and for the saved-model evaluation)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    env_id="PointMazeStitch-v0",
    iterations=2,
    labels_per_iteration=30,
    beta_decay=0.5,
    gradient_steps=10,
    batch_size=16,
    hidden_size=16,
    eval_episodes=1,
    save_model=True,
)


# ----------------------------------------------------------------------------- pure math
def beta_schedule(iteration, beta_decay):
    """beta_i = beta_decay ** i: 1 at iteration 0 (the expert alone), then geometric. beta_decay = 0
    is the classic schedule (1, 0, 0, ...); Ross et al. use beta_i = p^(i-1) counting from 1."""
    return float(beta_decay) ** iteration


def mixture_actions(expert_actions, learner_actions, coins, beta):
    """The mixture policy beta * expert + (1 - beta) * learner, one draw per state: where the uniform
    coin is below beta the expert's action is executed, elsewhere the learner's (numpy)."""
    take_expert = (np.asarray(coins) < beta).reshape((-1,) + (1,) * (np.ndim(expert_actions) - 1))
    return np.where(take_expert, expert_actions, learner_actions)


def aggregate(buffer_obs, buffer_labels, size, observations, labels):
    """D <- D u {(s, pi*(s))}: the new pairs are written after the first `size` rows of the buffers
    (preallocated for every iteration). Returns the new size (numpy)."""
    buffer_obs[size : size + len(observations)] = observations
    buffer_labels[size : size + len(labels)] = labels
    return size + len(observations)


def squash_actions(pre_tanh, action_scale, action_bias):
    """mu(s) = scale * tanh(x) + bias: any real x lands inside the Box [bias - scale, bias + scale]."""
    return torch.tanh(pre_tanh) * action_scale + action_bias


def bc_mse_loss(predicted, actions):
    """Box actions: the mean over the batch and the action dimensions of (mu(s) - a_expert)^2."""
    return ((predicted - actions) ** 2).mean()


def bc_cross_entropy_loss(logits, actions):
    """Discrete actions: -mean log softmax(logits)[a_expert], the negative log-likelihood of the labels."""
    log_probs = torch.log_softmax(logits, -1)
    return -log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1).mean()


def greedy_actions(logits):
    """The deterministic discrete policy: the most likely action."""
    return logits.argmax(-1)


# ----------------------------------------------------------------------------- networks
def layer_init(layer):
    """torch's default weights, uniform in +-1/sqrt(fan_in); zero biases (the JAX twin does the same)."""
    nn.init.kaiming_uniform_(layer.weight, a=np.sqrt(5))
    nn.init.zeros_(layer.bias)
    return layer


class Policy(nn.Module):
    """The observation through two hidden ReLU layers to out_dim outputs: the logits (Discrete) or
    the pre-tanh action (Box, squashed by squash_actions)."""

    def __init__(self, obs_dim, out_dim, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, hidden_size)),
            nn.ReLU(),
            layer_init(nn.Linear(hidden_size, out_dim)),
        )

    def forward(self, obs):
        return self.net(obs)


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("iterations", args.iterations >= 1, ">= 1"),
        ("labels_per_iteration", args.labels_per_iteration >= 1, ">= 1"),
        ("beta_decay", 0 <= args.beta_decay <= 1, "in [0, 1] (beta_i = beta_decay ** i is a probability)"),
        ("gradient_steps", args.gradient_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("hidden_size", args.hidden_size >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.env_id not in offline_data.EXPERTS:
        raise ValueError(
            f"--env-id {args.env_id!r} has no scripted expert; "
            f"experts exist for {sorted(offline_data.EXPERTS)}"
        )


def policy_head(env_id):
    """(discrete, out_dim, action_scale, action_bias) of env_id's action space."""
    space = offline_data.make_env(env_id).action_space
    if hasattr(space, "n"):
        return True, int(space.n), np.zeros(1, np.float32), np.zeros(1, np.float32)
    return (
        False,
        int(np.prod(space.shape)),
        ((space.high - space.low) / 2.0).astype(np.float32),
        ((space.high + space.low) / 2.0).astype(np.float32),
    )


def rollout_and_label(env, learner, expert, beta, num_steps, rng, seed):
    """num_steps environment steps of the mixture policy (mixture_actions with one coin per step);
    the expert labels EVERY visited state, whoever acted. The k-th episode of the call starts at
    env.reset(seed=seed + k); the last one is cut when the budget runs out. Returns the visited
    observations, the expert's labels and the returns of the episodes that finished."""
    observations, labels, returns = [], [], []
    obs, _ = env.reset(seed=seed)
    episode, total = 0, 0.0
    for _ in range(num_steps):
        label = expert(obs[None])
        coin = rng.random(1)  # drawn at every step, whatever beta, so the random streams stay aligned
        learner_action = label if beta >= 1.0 else learner(obs[None])  # not asked when the expert always acts
        action = mixture_actions(label, learner_action, coin, beta)[0]
        observations.append(obs)
        labels.append(label[0])
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        if terminated or truncated:
            returns.append(total)
            episode, total = episode + 1, 0.0
            obs, _ = env.reset(seed=seed + episode)
    return np.asarray(observations, dtype=np.float32), np.asarray(labels), returns


def run_episodes(act, env_id, episodes, seed):
    """`episodes` environments stepped in lockstep, one batched policy call per step; episode i is
    seeded seed + i. `act` maps a batch of observations to a batch of actions. Returns the returns."""
    envs = [offline_data.make_env(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    totals, done = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    while not done.all():
        actions = act(obs)
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            done[i] = terminated or truncated
    for env in envs:
        env.close()
    return totals


def make_act(policy, discrete, action_scale, action_bias, device):
    """The deterministic policy as a numpy function: argmax of the logits, or the squashed action."""

    def act(obs):
        with torch.no_grad():
            out = policy(torch.as_tensor(obs, dtype=torch.float32, device=device))
            actions = greedy_actions(out) if discrete else squash_actions(out, action_scale, action_bias)
        return actions.cpu().numpy()

    return act


def evaluate(model_path, env_id, eval_episodes, seed, hidden_size):
    """Load the saved parameters into a fresh network; run the deterministic policy."""
    discrete, out_dim, action_scale, action_bias = policy_head(env_id)
    obs_dim = int(np.prod(offline_data.make_env(env_id).observation_space.shape))
    policy = Policy(obs_dim, out_dim, hidden_size)
    policy.load_state_dict(torch.load(model_path, map_location="cpu")["policy"])
    act = make_act(policy, discrete, torch.as_tensor(action_scale), torch.as_tensor(action_bias), "cpu")
    return run_episodes(act, env_id, eval_episodes, seed)


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, environment, expert, the two learners
    check_args(args)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, torch and the environments (rollout episode k of iteration i gets
    # seed + 20_000 + 1_000 i + k, evaluation episode j gets seed + 10_000 + j).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    # Intra-op threads: at most two for the 256-wide layers; a caller's OMP_NUM_THREADS=1 is kept.
    torch.set_num_threads(min(2, torch.get_num_threads()))
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    expert = offline_data.expert_policy(args.env_id)
    env = offline_data.make_env(args.env_id)
    obs_dim = int(np.prod(env.observation_space.shape))
    discrete, out_dim, action_scale, action_bias = policy_head(args.env_id)
    action_scale = torch.as_tensor(action_scale, device=device)
    action_bias = torch.as_tensor(action_bias, device=device)
    capacity = args.iterations * args.labels_per_iteration
    init_state = Policy(obs_dim, out_dim, args.hidden_size).state_dict()  # both learners start here

    def loss_fn(out, b_actions):
        if discrete:
            return bc_cross_entropy_loss(out, b_actions)
        return bc_mse_loss(squash_actions(out, action_scale, action_bias), b_actions)

    def new_learner(name):
        """A policy, its optimiser, its aggregate D (preallocated) and its own numpy generator."""
        policy = Policy(obs_dim, out_dim, args.hidden_size).to(device)
        policy.load_state_dict(init_state)
        learner = {
            "name": name,
            "policy": policy,
            "optimizer": torch.optim.Adam(policy.parameters(), lr=args.learning_rate),
            "obs": np.zeros((capacity, obs_dim), np.float32),
            "size": 0,
            "curve": [],
            "labels": np.zeros(
                (capacity,) if discrete else (capacity, out_dim), np.int64 if discrete else np.float32
            ),
            "rng": np.random.default_rng(args.seed),
        }
        learner["act"] = make_act(policy, discrete, action_scale, action_bias, device)
        return learner

    def retrain(learner):
        """gradient_steps minibatch steps on the learner's whole aggregate D."""
        if not args.warm_start:  # from scratch on all of D, as in the paper (warm starts saturate: docs)
            learner["policy"].load_state_dict(init_state)
            learner["optimizer"] = torch.optim.Adam(learner["policy"].parameters(), lr=args.learning_rate)
        observations = torch.as_tensor(learner["obs"][: learner["size"]], device=device)
        labels = torch.as_tensor(learner["labels"][: learner["size"]], device=device)
        indices = torch.as_tensor(
            learner["rng"].integers(0, learner["size"], size=(args.gradient_steps, args.batch_size)),
            device=device,
        )
        for idx in indices:
            loss = loss_fn(learner["policy"](observations[idx]), labels[idx])
            learner["optimizer"].zero_grad()
            loss.backward()
            learner["optimizer"].step()
        return loss.item()

    # DAgger executes the mixture (beta_i); the BC baseline the expert alone (beta = 1), same seeds.
    learners = [new_learner("dagger")] + ([new_learner("bc")] if args.bc_baseline else [])
    expert_return = float(run_episodes(expert, args.env_id, args.eval_episodes, args.seed + 10_000).mean())
    writer.add_scalar("eval/expert_return", expert_return, 0)
    episode_returns, dataset_sizes, losses, last_print = [], [], {}, 0.0
    start_time = time.time()
    for iteration in range(args.iterations):
        for learner in learners:
            beta = beta_schedule(iteration, args.beta_decay) if learner["name"] == "dagger" else 1.0
            # ---- 2. Rollout: the mixture acts (beta), the expert labels every visited state
            observations, labels, rollout_returns = rollout_and_label(
                env,
                learner["act"],
                expert,
                beta,
                args.labels_per_iteration,
                learner["rng"],
                args.seed + 20_000 + 1_000 * iteration,
            )
            # ---- 3. Aggregate and retrain: D <- D u {(s, expert(s))}, then the policy on all of D
            learner["size"] = aggregate(
                learner["obs"], learner["labels"], learner["size"], observations, labels
            )
            losses[f"{learner['name']}_loss"] = retrain(learner)

            # ---- 4. Evaluation: the deterministic learner in fresh environments
            returns = run_episodes(learner["act"], args.env_id, args.eval_episodes, args.seed + 10_000)
            labels_so_far = learner["size"]
            learner["curve"].append((labels_so_far, float(returns.mean())))
            writer.add_scalar(f"eval/{learner['name']}_return", returns.mean(), labels_so_far)
            writer.add_scalar(
                f"losses/{learner['name']}_loss", losses[f"{learner['name']}_loss"], labels_so_far
            )
            if learner["name"] == "dagger":
                dataset_sizes.append(learner["size"])
                writer.add_scalar("charts/beta", beta, labels_so_far)
                for r in rollout_returns:
                    writer.add_scalar("charts/episodic_return", r, labels_so_far)
                for r in returns:
                    episode_returns.append((labels_so_far, float(r)))
                    writer.add_scalar("eval/episodic_return", r, labels_so_far)
        sps = int(dataset_sizes[-1] / (time.time() - start_time))
        writer.add_scalar("charts/SPS", sps, dataset_sizes[-1])
        if args.progress and (time.time() - last_print > 0.5 or iteration == args.iterations - 1):
            last_print = time.time()
            curves = "  ".join(f"{learner['name']} {learner['curve'][-1][1]:8.1f}" for learner in learners)
            print(
                f"\riteration {iteration + 1}/{args.iterations}  labels {dataset_sizes[-1]:,d}  "
                f"return {curves}  "
                f"expert {expert_return:8.1f}  SPS {sps:5,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 5. Summary
    env.close()
    wall_time = time.time() - start_time
    dagger_return = learners[0]["curve"][-1][1]
    bc_return = learners[1]["curve"][-1][1] if args.bc_baseline else float("nan")
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": dagger_return,
        "dagger_return": dagger_return,
        "bc_return": bc_return,
        "dagger_minus_bc": dagger_return - bc_return,
        "expert_return": expert_return,
        "dagger_curve": learners[0]["curve"],
        "bc_curve": learners[1]["curve"] if args.bc_baseline else [],
        "dataset_sizes": dataset_sizes,
        "sps": dataset_sizes[-1] / wall_time,
        "wall_time": wall_time,
        "global_step": dataset_sizes[-1],
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save({"policy": learners[0]["policy"].state_dict()}, model_path)
        eval_returns = evaluate(
            model_path, args.env_id, args.eval_episodes, args.seed + 10_000, args.hidden_size
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
