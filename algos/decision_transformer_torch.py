"""Decision Transformer: offline RL as return-conditioned sequence modelling -- the PyTorch twin.

A small causal transformer (its own GPT) reads the last K timesteps as 3K tokens (R_1, s_1, a_1, ...),
R_t the undiscounted return-to-go divided by return_scale, and predicts each a_t from the output at its
state token (MSE; tanh into the action bounds). At test time it is given a target return, which falls
by every reward received; several targets are evaluated, and the score follows primary_target.
Paper:  Chen et al. 2021, "Decision Transformer: Reinforcement Learning via Sequence Modeling",
        arXiv:2106.01345.
Twin:   algos/decision_transformer_jax.py (`diff` the two files: only the framework differs).
Docs:   docs/algorithms/decision_transformer.md
Run:    python algos/decision_transformer_torch.py --seed 1
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
    """seed of python, numpy, the framework and the environments"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    dataset: str = "pendulum-replay"
    """offline dataset (algos/offline_data.py); Box actions only"""
    total_steps: int = 5_000
    """gradient steps (paper: 100k)"""
    batch_size: int = 32
    """windows of context_len timesteps per gradient step (paper: 64)"""
    learning_rate: float = 1e-3
    """AdamW learning rate after the linear warm-up (paper: 1e-4)"""
    weight_decay: float = 1e-4
    """AdamW weight decay"""
    warmup_steps: int = 100
    """the learning rate rises linearly from learning_rate / warmup_steps to it (paper's code: 10k)"""
    max_grad_norm: float = 0.25
    """gradients are clipped to this global norm"""
    context_len: int = 10
    """K: timesteps in the context, 3K tokens (paper: 20)"""
    embed_dim: int = 64
    """width of the token embeddings and of the transformer (paper: 128)"""
    n_layer: int = 2
    """transformer blocks (paper: 3)"""
    n_head: int = 1
    """attention heads per block (must divide embed_dim)"""
    return_scale: float = 0.0
    """returns-to-go are divided by this; 0 picks the environment's (RETURN_SCALE)"""
    embed_layernorm: bool = False
    """LayerNorm on the token embeddings, as in the paper's code (it erases the return token's scale)"""
    target_returns: tuple[float, ...] = ()
    """returns to condition the evaluation on; () picks TARGET_RETURNS; the score follows primary_target"""
    eval_every: int = 500
    """gradient steps between evaluations"""
    eval_episodes: int = 10
    """episodes per target return per evaluation (and for the saved-model evaluation)"""
    save_model: bool = False
    """save the trained parameters to the run directory and evaluate the saved policy"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    dataset="pointmaze-stitch",
    total_steps=20,
    batch_size=8,
    warmup_steps=5,
    context_len=4,
    embed_dim=16,
    eval_every=10,
    eval_episodes=1,
    save_model=True,
)

# Returns-to-go are divided by a constant of the order of the returns, so that the return token is O(1).
RETURN_SCALE = {"Pendulum-v1": 1000.0, "PointMazeStitch-v0": 1.0}
# Targets per environment, highest first: Pendulum's expert scores about -150 and the datasets' best
# trajectories -250 (medium) / -380 (replay, learner); the stitch maze pays 1 at the goal, 0.5 at the
# decoy. The score follows primary_target: -150 on expert and medium-expert data, -400 on medium, replay
# and learner (no trajectory there reached -150), 1 on the stitch maze (the waypoint -> goal legs did).
TARGET_RETURNS = {"Pendulum-v1": (-150.0, -400.0, -800.0), "PointMazeStitch-v0": (1.0, 0.5, 0.0)}


# ----------------------------------------------------------------------------- pure math
def primary_target(targets, best_return):
    """The target the score and the curve follow: the highest of `targets` that some trajectory of the
    data reached (<= its best return), so that the return token asks for a return the data has seen;
    the lowest target when the data reached none. Every target is still evaluated and logged."""
    reached = [t for t in targets if t <= best_return]
    return max(reached) if reached else min(targets)


def returns_to_go(rewards, bounds):
    """R_t = sum_{t' >= t} r_t' inside each trajectory [start, end) (undiscounted; numpy, the data's)."""
    rtg = np.zeros(len(rewards), dtype=np.float64)
    for start, end in bounds:
        rtg[start:end] = np.cumsum(rewards[start:end][::-1])[::-1]
    return rtg.astype(np.float32)


def gather_windows(arrays, starts, ends, firsts, context_len):
    """Windows [first, min(first + K, end)) of each row's trajectory [start, end), LEFT-padded to K.

    Returns each array of `arrays` gathered to (B, K, ...) with zeros at the padding, the mask (B, K)
    (1 = a real timestep) and the timesteps (B, K) counted from the trajectory's start (0 at padding).
    A short window (near a trajectory's end, or early in an evaluation episode) has its real steps on
    the right, so the last position is always the latest real step."""
    lengths = np.minimum(firsts + context_len, ends) - firsts
    offsets = np.arange(context_len)[None, :] - (context_len - lengths)[:, None]
    mask = offsets >= 0
    index = firsts[:, None] + np.maximum(offsets, 0)
    out = {}
    for name, array in arrays.items():
        window = array[index]
        out[name] = np.where(mask.reshape(mask.shape + (1,) * (window.ndim - 2)), window, 0).astype(
            np.float32
        )
    out["timesteps"] = np.where(mask, index - starts[:, None], 0).astype(np.int64)
    out["mask"] = mask.astype(np.float32)
    return out


def interleave_tokens(return_tokens, state_tokens, action_tokens):
    """(B, K, D) x 3 -> (B, 3K, D) in the order R_1, s_1, a_1, R_2, s_2, a_2, ..."""
    B, K, D = state_tokens.shape
    return torch.stack([return_tokens, state_tokens, action_tokens], dim=2).reshape(B, 3 * K, D)


def attention_allowed(mask):
    """(B, K) timestep mask -> (B, 1, 3K, 3K) booleans: token i may attend to token j when j <= i
    (causal) and j is a real token (not left padding)."""
    token_mask = mask.repeat_interleave(3, dim=1) > 0
    T = token_mask.shape[1]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=mask.device))
    return causal[None, None] & token_mask[:, None, None, :]


def dt_action_loss(predicted, actions, mask):
    """Mean squared error of the predicted actions over the real timesteps only (padding masked)."""
    per_step = ((predicted - actions) ** 2).mean(-1)
    return (per_step * mask).sum() / mask.sum()


# ----------------------------------------------------------------------------- networks
class Block(nn.Module):
    """Pre-LN transformer block: LN -> masked self-attention -> residual, LN -> ReLU MLP -> residual."""

    def __init__(self, embed_dim, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(embed_dim)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.fc = nn.Linear(embed_dim, 4 * embed_dim)
        self.fc_proj = nn.Linear(4 * embed_dim, embed_dim)

    def forward(self, x, allowed):
        B, T, D = x.shape
        hd = D // self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.reshape(B, T, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / np.sqrt(hd)
        # -1e9, not -inf: a padding query sees only padding keys, and its (unused) row stays finite
        att = torch.softmax(att.masked_fill(~allowed, -1e9), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.fc_proj(F.relu(self.fc(self.ln2(x))))


class DecisionTransformer(nn.Module):
    """Per-modality linear embeddings plus a learned timestep embedding, a causal transformer over
    the interleaved (R, s, a) tokens, and an action head on each state token's output:
    a_t = scale * tanh(W h(s_t)) + bias, inside the Box.

    The return token is a linear map of ONE number, w R + b, plus the timestep's embedding e_t. A
    LayerNorm on it (embed_layernorm, the paper code's embed_ln) divides out its scale: LN(w R) =
    sign(R) LN(w) whatever |R| is, so only b and e_t keep "how much return" in the token, squashed.
    Off by default: the residual stream then carries w R + b + e_t itself (each block still normalises
    its own input). The three modality embeddings start as in the paper's code (torch's default
    nn.Linear init, weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))), the rest as GPT-2 does
    (N(0, 0.02^2), zero biases). GPT-2's init everywhere plus the LayerNorm, measured against this:
    docs/algorithms/decision_transformer.md."""

    def __init__(
        self,
        obs_dim,
        action_dim,
        embed_dim,
        n_layer,
        n_head,
        max_timestep,
        action_scale,
        action_bias,
        embed_layernorm=False,
    ):
        super().__init__()
        self.embed_timestep = nn.Embedding(max_timestep, embed_dim)
        self.embed_return = nn.Linear(1, embed_dim)
        self.embed_state = nn.Linear(obs_dim, embed_dim)
        self.embed_action = nn.Linear(action_dim, embed_dim)
        self.embed_ln = nn.LayerNorm(embed_dim) if embed_layernorm else nn.Identity()
        self.h = nn.ModuleList(Block(embed_dim, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(embed_dim)
        self.predict_action = nn.Linear(embed_dim, action_dim)
        self.register_buffer("action_scale", torch.as_tensor(action_scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.as_tensor(action_bias, dtype=torch.float32))
        modality = ("embed_return", "embed_state", "embed_action")
        for name, p in self.named_parameters():
            if name.startswith(modality):  # weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
                fan_in = getattr(self, name.split(".")[0]).in_features
                nn.init.uniform_(p, -1.0 / np.sqrt(fan_in), 1.0 / np.sqrt(fan_in))
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:  # the timestep embedding and the transformer's weights; LayerNorm gains stay 1
                nn.init.normal_(p, std=0.02)

    def forward(self, returns_to_go, states, actions, timesteps, mask):
        """(B, K, 1), (B, K, obs), (B, K, act), (B, K) int, (B, K) -> (B, K, act) predicted actions."""
        time_emb = self.embed_timestep(timesteps)
        x = interleave_tokens(
            self.embed_return(returns_to_go) + time_emb,
            self.embed_state(states) + time_emb,
            self.embed_action(actions) + time_emb,
        )
        x = self.embed_ln(x)
        allowed = attention_allowed(mask)
        for block in self.h:
            x = block(x, allowed)
        x = self.ln_f(x)
        B, T, D = x.shape
        state_out = x.reshape(B, T // 3, 3, D)[:, :, 1]  # the output at s_t has seen R_<=t, s_<=t, a_<t
        return torch.tanh(self.predict_action(state_out)) * self.action_scale + self.action_bias


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError). Returns the
    dataset's info."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("weight_decay", args.weight_decay >= 0, ">= 0"),
        ("warmup_steps", args.warmup_steps >= 1, ">= 1"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("context_len", args.context_len >= 1, ">= 1"),
        ("embed_dim", args.embed_dim >= 1, ">= 1"),
        ("n_layer", args.n_layer >= 1, ">= 1"),
        ("n_head", args.n_head >= 1, ">= 1"),
        ("return_scale", args.return_scale >= 0, ">= 0 (0: the environment's)"),
        ("target_returns", all(abs(t) < float("inf") for t in args.target_returns), "finite numbers"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
        ("embed_dim", args.n_head >= 1 and args.embed_dim % args.n_head == 0, "divisible by --n-head"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.dataset not in offline_data.DATASETS:
        raise ValueError(f"--dataset {args.dataset!r} is unknown; valid: {', '.join(offline_data.DATASETS)}")
    info = offline_data.dataset_info(args.dataset)
    if info["discrete"]:
        raise ValueError(
            f"--dataset {args.dataset} has discrete actions; this script is for Box actions. For "
            f"discrete offline data use algos/bc_torch.py or algos/cql_torch.py"
        )
    return info


def run_episodes(policy, env_id, targets, episodes, seed, context_len, return_scale, state_mean, state_std):
    """Every (target, episode) pair at once, one environment each, stepped in lockstep so that each
    step is ONE batched forward pass. Episode i is seeded seed + i for every target. The return-to-go
    starts at the target and falls by each reward received; the model sees the last K steps.
    Returns the undiscounted returns, shape (len(targets), episodes)."""
    envs = [offline_data.make_env(env_id) for _ in targets for _ in range(episodes)]
    E, T = len(envs), envs[0].spec.max_episode_steps
    obs = np.stack([env.reset(seed=seed + i % episodes)[0] for i, env in enumerate(envs)])
    history = {
        "returns_to_go": np.zeros((E * T, 1), np.float32),
        "states": np.zeros((E * T, obs.shape[1]), np.float32),
        "actions": np.zeros((E * T, envs[0].action_space.shape[0]), np.float32),
    }
    rtg = np.repeat(np.asarray(targets, dtype=np.float64), episodes)
    totals, done = np.zeros(E), np.zeros(E, dtype=bool)
    starts = np.arange(E) * T
    for t in range(T):
        history["returns_to_go"][starts + t, 0] = rtg / return_scale
        history["states"][starts + t] = (obs - state_mean) / state_std
        batch = gather_windows(
            history, starts, starts + t + 1, np.maximum(starts, starts + t + 1 - context_len), context_len
        )
        actions = policy(batch)
        history["actions"][starts + t] = actions
        for i in np.flatnonzero(~done):
            obs[i], reward, terminated, truncated, _ = envs[i].step(actions[i])
            totals[i] += reward
            rtg[i] -= reward
            done[i] = terminated or truncated
        if done.all():
            break
    for env in envs:
        env.close()
    return totals.reshape(len(targets), episodes)


def evaluate(
    model_path,
    env_id,
    eval_episodes,
    seed,
    target_returns,
    context_len,
    return_scale,
    embed_dim,
    n_layer,
    n_head,
    embed_layernorm=False,
):
    """Load the saved parameters into a fresh network; run it at every target return (deterministic)."""
    saved = torch.load(model_path, map_location="cpu")
    space = offline_data.make_env(env_id).action_space
    model = DecisionTransformer(
        len(saved["state_mean"]),
        space.shape[0],
        embed_dim,
        n_layer,
        n_head,
        saved["embed_timestep.weight"].shape[0],
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
        embed_layernorm,
    )
    model.load_state_dict({k: v for k, v in saved.items() if k not in ("state_mean", "state_std")})

    def policy(batch):
        with torch.no_grad():
            b = {k: torch.as_tensor(v) for k, v in batch.items()}
            return model(b["returns_to_go"], b["states"], b["actions"], b["timesteps"], b["mask"])[
                :, -1
            ].numpy()

    return run_episodes(
        policy,
        env_id,
        target_returns,
        eval_episodes,
        seed,
        context_len,
        return_scale,
        saved["state_mean"].numpy(),
        saved["state_std"].numpy(),
    )


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, data, transformer, optimiser
    info = check_args(args)
    env_id = info["env_id"]
    return_scale = args.return_scale or RETURN_SCALE[env_id]
    targets = tuple(args.target_returns) or TARGET_RETURNS[env_id]
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
    torch.set_num_threads(1)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)

    # The data: normalised states, scaled returns-to-go, trajectory bounds of every step
    data = offline_data.load_dataset(args.dataset)
    bounds = offline_data.episode_bounds(data)
    primary = primary_target(targets, offline_data.episode_returns(data).max())
    scored = targets.index(primary)
    state_mean = data["observations"].mean(0)
    state_std = data["observations"].std(0) + 1e-6
    arrays = {
        "returns_to_go": returns_to_go(data["rewards"], bounds)[:, None] / return_scale,
        "states": (data["observations"] - state_mean) / state_std,
        "actions": data["actions"].astype(np.float32),
    }
    traj_start = np.concatenate([np.full(e - s, s) for s, e in bounds])
    traj_end = np.concatenate([np.full(e - s, e) for s, e in bounds])
    env = offline_data.make_env(env_id)
    space, time_limit = env.action_space, env.spec.max_episode_steps
    env.close()
    obs_dim, action_dim = data["observations"].shape[1], space.shape[0]
    max_timestep = max(time_limit, max(e - s for s, e in bounds))  # rows of the timestep embedding

    model = DecisionTransformer(
        obs_dim,
        action_dim,
        args.embed_dim,
        args.n_layer,
        args.n_head,
        max_timestep,
        (space.high - space.low) / 2.0,
        (space.high + space.low) / 2.0,
        args.embed_layernorm,
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / args.warmup_steps)
    )

    def policy(batch):
        with torch.no_grad():
            b = {k: torch.as_tensor(v, device=device) for k, v in batch.items()}
            return (
                model(b["returns_to_go"], b["states"], b["actions"], b["timesteps"], b["mask"])[:, -1]
                .cpu()
                .numpy()
            )

    episode_returns, returns_by_target, losses, last_print = [], {}, {}, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        # ---- 2. Update: a batch of K-step windows, each started at a uniform random step of the data (so
        # a trajectory is drawn in proportion to its length); windows running past its end are left-padded
        firsts = rng.integers(0, len(data["rewards"]), size=args.batch_size)
        batch = gather_windows(arrays, traj_start[firsts], traj_end[firsts], firsts, args.context_len)
        b = {k: torch.as_tensor(v, device=device) for k, v in batch.items()}
        predicted = model(b["returns_to_go"], b["states"], b["actions"], b["timesteps"], b["mask"])
        loss = dt_action_loss(predicted, b["actions"], b["mask"])
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()

        if step % 100 == 0 or step == args.total_steps:
            losses = {"action_loss": loss.item(), "grad_norm": grad_norm.item()}
            sps = int(step / (time.time() - start_time))
            for name, value in losses.items():
                writer.add_scalar(f"losses/{name}", value, step)
            writer.add_scalar(
                "charts/learning_rate", args.learning_rate * min(1.0, step / args.warmup_steps), step
            )
            writer.add_scalar("charts/SPS", sps, step)

        # ---- 3. Evaluation at every target return; the curve and the score follow the primary target
        if step % args.eval_every == 0 or step == args.total_steps:
            returns = run_episodes(
                policy,
                env_id,
                targets,
                args.eval_episodes,
                args.seed + 10_000,
                args.context_len,
                return_scale,
                state_mean,
                state_std,
            )
            for r in returns[scored]:
                episode_returns.append((step, float(r)))
                writer.add_scalar("eval/episodic_return", r, step)
            writer.add_scalar(
                "eval/normalized_score",
                float(offline_data.normalized_score(args.dataset, returns[scored].mean())),
                step,
            )
            returns_by_target = {f"{target:g}": float(r.mean()) for target, r in zip(targets, returns)}
            for target, value in returns_by_target.items():
                writer.add_scalar(f"eval/return_at_target_{target}", value, step)
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>7,d}/{args.total_steps:,d}  loss {loss.item():.4f}  "
                f"returns by target "
                f"{returns_by_target}  SPS {int(step / (time.time() - start_time)):5,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 4. Summary
    wall_time = time.time() - start_time
    final_mean_return = float(np.mean([r for s, r in episode_returns if s == args.total_steps]))
    summary = {
        "episodic_returns": episode_returns,
        "final_mean_return": final_mean_return,
        "normalized_score": float(offline_data.normalized_score(args.dataset, final_mean_return)),
        "returns_by_target": returns_by_target,
        "target_return": primary,
        "sps": args.total_steps / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": losses,
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        state = {k: v.cpu() for k, v in model.state_dict().items()}
        torch.save(
            {**state, "state_mean": torch.as_tensor(state_mean), "state_std": torch.as_tensor(state_std)},
            model_path,
        )
        eval_returns = evaluate(
            model_path,
            env_id,
            args.eval_episodes,
            args.seed + 10_000,
            (primary,),
            args.context_len,
            return_scale,
            args.embed_dim,
            args.n_layer,
            args.n_head,
            args.embed_layernorm,
        )[0]
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
