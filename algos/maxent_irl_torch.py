"""Maximum-entropy inverse reinforcement learning on a tabular gridworld -- the PyTorch twin.

Fits r_theta(s) = theta . f(s) to demonstrations, knowing P and the state features but not the reward,
by Adam ascent on the max-ent log-likelihood: its gradient, the expert's discounted feature counts minus
the learner's, takes soft value iteration (backward pass) and the soft policy's visitation (forward).
Papers: Ziebart, Maas, Bagnell & Dey 2008, "Maximum Entropy Inverse Reinforcement Learning" (AAAI, no
        arXiv id); soft backups as in Ziebart 2010 (PhD thesis, CMU) and Levine 2018, "Reinforcement
        Learning and Control as Probabilistic Inference: Tutorial and Review", arXiv:1805.00909.
Twin:   algos/maxent_irl_jax.py (`diff algos/maxent_irl_torch.py algos/maxent_irl_jax.py`: the framework).
Docs:   docs/algorithms/maxent_irl.md
Run:    python algos/maxent_irl_torch.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy, the framework and the demonstration sampling"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    grid: str = "puddle7x7"
    """the gridworld (see GRIDS): puddle7x7 or open5x5"""
    features: str = "cell_type"
    """state features f(s): cell_type (indicators of free, goal, puddle) or onehot (one per cell)"""
    slip: float = 0.1
    """probability that a move is replaced by an action drawn uniformly from the five"""
    gamma: float = 0.9
    """discount factor of the soft values and of the visitation frequencies"""
    horizon: int = 30
    """steps per demonstration and per evaluation episode (the forward pass's horizon)"""
    num_demos: int = 100
    """demonstrations sampled from the expert's soft-optimal policy"""
    total_steps: int = 300
    """IRL gradient steps (each: soft value iteration, the forward pass, one Adam step on theta)"""
    learning_rate: float = 0.1
    """Adam learning rate of the reward weights theta"""
    soft_vi_sweeps: int = 150
    """sweeps of soft value iteration per gradient step, from V = 0 (error <= gamma^sweeps * |V|)"""
    eval_every: int = 20
    """gradient steps between evaluations of the recovered policy"""
    save_model: bool = False
    """save theta to the run directory and evaluate the saved reward's greedy policy"""
    eval_episodes: int = 10
    """episodes per evaluation and for the saved-model evaluation"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    grid="open5x5",
    num_demos=5,
    horizon=10,
    total_steps=6,
    soft_vi_sweeps=20,
    eval_every=3,
    save_model=True,
    eval_episodes=2,
)

# Gridworlds, top row first: "S" start, "G" goal, "~" puddle, "." free. No walls: a move off the
# grid leaves the agent where it is.
GRIDS = {
    "puddle7x7": (
        "S......",
        ".~~~...",
        ".~~....",
        ".......",
        "...~~G.",
        ".......",
        ".......",
    ),
    "open5x5": (
        "S....",
        ".....",
        ".....",
        ".....",
        "....G",
    ),
}
CELL_TYPES = (".S", "G", "~")  # the cell_type features: free (start included), goal, puddle
TRUE_THETA = (0.0, 5.0, -5.0)  # the true reward of each cell type; the learner never sees it
# Moves (d_row, d_col) of the actions 0-4: up, down, left, right, stay.
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1), (0, 0))
TIE_TOL = 1e-4  # actions within this of the best Q count as greedy (ties in symmetric cells)


# ----------------------------------------------------------------------------- pure math
def soft_value_iteration(r, P, gamma, num_sweeps):
    """Backward pass: num_sweeps soft Bellman backups from V = 0,
    Q(s, a) = r(s) + gamma * sum_s' P(s' | s, a) V(s'),  V(s) = log sum_a exp Q(s, a),
    a gamma-contraction like the hard one. Returns (Q, V, pi) of the last backup, pi = exp(Q - V).
    Shapes: r (S,), P (S, A, S) -> Q (S, A), V (S,), pi (S, A)."""
    V = torch.zeros(P.shape[0], dtype=P.dtype, device=P.device)
    for _ in range(num_sweeps):
        V = torch.logsumexp(r[:, None] + gamma * P @ V, -1)
    Q = r[:, None] + gamma * P @ V
    V = torch.logsumexp(Q, -1)
    return Q, V, torch.exp(Q - V[:, None])


def state_visitation(pi, P, start, gamma, horizon):
    """Forward pass: expected discounted state visitation D(s) = sum_{t < horizon} gamma^t d_t(s), with
    d_0 = start and d_{t+1}(s') = sum_{s, a} d_t(s) pi(a | s) P(s' | s, a). With stochastic rows of P
    it sums to (1 - gamma^horizon) / (1 - gamma), or to horizon when gamma = 1."""
    d, D, discount = start, torch.zeros_like(start), 1.0
    for _ in range(horizon):
        D = D + discount * d
        d = torch.einsum("s,sa,sat->t", d, pi, P)
        discount = discount * gamma
    return D


def expert_feature_expectations(states, features, gamma):
    """Empirical E_expert[sum_t gamma^t f(s_t)]: the mean over demonstrations of the discounted sum
    of features along each. states (N, T) int64, features (S, K) -> (K,)."""
    discounts = gamma ** torch.arange(states.shape[1], dtype=features.dtype, device=features.device)
    return (discounts[None, :, None] * features[states]).sum(1).mean(0)


def maxent_gradient(mu_expert, visitation, features):
    """Gradient of the demonstrations' max-ent log-likelihood in theta (reward = features @ theta):
    the expert's feature expectations minus the learner's, mu_E - F^T D. Zero when they match."""
    return mu_expert - features.T @ visitation


def greedy_actions(Q):
    """argmax_a Q(s, a) per state; ties go to the lowest action index."""
    return Q.argmax(-1)


def policy_match(Q_learner, Q_expert, tol, mask):
    """Fraction of the states with mask 1 where the learner's greedy action is one of the expert's
    greedy actions (those within tol of the expert's best Q: exact ties occur in symmetric cells)."""
    chosen = Q_expert.gather(-1, greedy_actions(Q_learner)[:, None])[:, 0]
    match = (chosen >= Q_expert.max(-1).values - tol).to(Q_expert.dtype)
    return (match * mask).sum() / mask.sum()


def policy_return(pi, P, start, r, horizon):
    """Exact expected undiscounted return of pi over horizon steps under reward r: the forward pass
    with gamma = 1, dotted with r."""
    return state_visitation(pi, P, start, 1.0, horizon) @ r


# ----------------------------------------------------------------------------- the gridworld (numpy)
def make_gridworld(grid, slip, features):
    """(P, r_true, F, start) as float32 numpy arrays of a layout in GRIDS: P (S, 5, S), r_true (S,),
    F (S, K) the state features, start (S,) one-hot on the start cell."""
    layout = GRIDS[grid]
    rows, cols = len(layout), len(layout[0])
    cells = "".join(layout)
    num_states, num_actions = rows * cols, len(MOVES)
    P = np.zeros((num_states, num_actions, num_states), dtype=np.float32)
    for s in range(num_states):
        row, col = divmod(s, cols)
        for a, (d_row, d_col) in enumerate(MOVES):
            r2, c2 = row + d_row, col + d_col
            if not (0 <= r2 < rows and 0 <= c2 < cols):
                r2, c2 = row, col  # the edge stops the move
            P[s, a, r2 * cols + c2] = 1.0
    # slip: with probability slip the executed action is drawn uniformly from all five
    P = ((1.0 - slip) * P + slip * P.mean(1, keepdims=True)).astype(np.float32)
    cell_type = np.array([[c in kinds for kinds in CELL_TYPES] for c in cells], dtype=np.float32)
    r_true = (cell_type @ np.asarray(TRUE_THETA, dtype=np.float32)).astype(np.float32)
    F = cell_type if features == "cell_type" else np.eye(num_states, dtype=np.float32)
    start = np.array([c == "S" for c in cells], dtype=np.float32)
    return P, r_true, F, start


def sample_episodes(pi, P, start, horizon, num_episodes, rng):
    """Roll out a tabular policy pi (S, A) numpy for horizon steps from the start distribution:
    states and actions (num_episodes, horizon) int64, drawn with the numpy generator rng."""
    num_states, num_actions = pi.shape
    states = np.zeros((num_episodes, horizon), dtype=np.int64)
    actions = np.zeros((num_episodes, horizon), dtype=np.int64)
    cum_pi, cum_P, cum_start = np.cumsum(pi, -1), np.cumsum(P, -1), np.cumsum(start)
    for i in range(num_episodes):
        s = min(int(np.searchsorted(cum_start, rng.random() * cum_start[-1])), num_states - 1)
        for t in range(horizon):
            a = min(int(np.searchsorted(cum_pi[s], rng.random() * cum_pi[s, -1])), num_actions - 1)
            states[i, t], actions[i, t] = s, a
            s = min(int(np.searchsorted(cum_P[s, a], rng.random() * cum_P[s, a, -1])), num_states - 1)
    return states, actions


def run_greedy_episodes(policy, P, start, r_true, horizon, episodes, seed):
    """Undiscounted true-reward returns of a deterministic policy (an int per state); episode i runs
    with a fresh generator seeded seed + i."""
    pi = np.eye(P.shape[1], dtype=np.float32)[policy]
    returns = []
    for i in range(episodes):
        states, _ = sample_episodes(pi, P, start, horizon, 1, np.random.default_rng(seed + i))
        returns.append(float(r_true[states[0]].sum()))
    return returns


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("slip", 0 <= args.slip <= 1, "in [0, 1] (a probability)"),
        ("gamma", 0 <= args.gamma < 1, "in [0, 1) (soft value iteration must contract)"),
        ("horizon", args.horizon >= 1, ">= 1"),
        ("num_demos", args.num_demos >= 1, ">= 1"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("soft_vi_sweeps", args.soft_vi_sweeps >= 1, ">= 1"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("eval_episodes", args.eval_episodes >= 1, ">= 1"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.grid not in GRIDS:
        raise ValueError(f"--grid {args.grid!r} is unknown; valid: {', '.join(GRIDS)}")
    if args.features not in ("cell_type", "onehot"):
        raise ValueError(f"--features {args.features!r} is unknown; valid: cell_type, onehot")


def evaluate(model_path, grid, features, slip, gamma, horizon, soft_vi_sweeps, eval_episodes, seed):
    """Load the saved theta; run the greedy policy of its soft-optimal Q under the true reward."""
    P_np, r_np, F_np, start_np = make_gridworld(grid, slip, features)
    theta = torch.load(model_path, map_location="cpu")["theta"]
    Q, _, _ = soft_value_iteration(
        torch.as_tensor(F_np) @ theta, torch.as_tensor(P_np), gamma, soft_vi_sweeps
    )
    return run_greedy_episodes(greedy_actions(Q).numpy(), P_np, start_np, r_np, horizon, eval_episodes, seed)


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    # ---- 1. Setup: run directory, seeding, the model, the expert and its demonstrations
    check_args(args)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"{args.grid}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy, torch; the demonstrations come from a numpy generator seeded with seed.
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    # One intra-op thread: the arrays are tiny, a second thread costs more than it saves, and a
    # fixed count keeps float reductions (so seeded runs) the same on any machine and in any process.
    torch.set_num_threads(1)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    # The model, the expert and its demonstrations
    P_np, r_np, F_np, start_np = make_gridworld(args.grid, args.slip, args.features)
    P, r_true, F, start = (torch.as_tensor(x, device=device) for x in (P_np, r_np, F_np, start_np))
    Q_expert, _, pi_expert = soft_value_iteration(r_true, P, args.gamma, args.soft_vi_sweeps)
    rng = np.random.default_rng(args.seed)
    demo_states, _ = sample_episodes(
        pi_expert.cpu().numpy(), P_np, start_np, args.horizon, args.num_demos, rng
    )
    mu_expert = expert_feature_expectations(torch.as_tensor(demo_states, device=device), F, args.gamma)
    demo_mean_return = float(r_np[demo_states].sum(1).mean())
    visited = torch.as_tensor(
        np.bincount(demo_states.reshape(-1), minlength=len(r_np)) > 0, dtype=P.dtype, device=device
    )
    num_actions = P.shape[1]
    expert_greedy = torch.nn.functional.one_hot(greedy_actions(Q_expert), num_actions).to(P.dtype)
    expert_return = float(policy_return(expert_greedy, P, start, r_true, args.horizon))

    # The reward weights and their optimiser (gradient ascent: Adam minimises -log-likelihood)
    theta = torch.zeros(F.shape[1], device=device, requires_grad=True)
    optimizer = torch.optim.Adam([theta], lr=args.learning_rate)

    def irl_update(num_steps):
        """num_steps IRL gradient steps, each: the backward pass (soft value iteration on r_theta), the
        forward pass (the learner's visitation), one Adam step on theta. Returns ||grad|| per step."""
        gaps = []
        for _ in range(num_steps):
            with torch.no_grad():
                _, _, pi = soft_value_iteration(F @ theta, P, args.gamma, args.soft_vi_sweeps)
                D = state_visitation(pi, P, start, args.gamma, args.horizon)
                grad = maxent_gradient(mu_expert, D, F)
            theta.grad = -grad  # ascent on the log-likelihood
            optimizer.step()
            gaps.append(torch.linalg.norm(grad))
        return torch.stack(gaps)

    def scores(theta):
        """The recovered reward's soft-optimal Q against the expert's: policy_match over all cells and
        over the demonstrated ones, the exact true return of its greedy policy, and that policy."""
        with torch.no_grad():
            Q, _, _ = soft_value_iteration(F @ theta, P, args.gamma, args.soft_vi_sweeps)
            greedy = torch.nn.functional.one_hot(greedy_actions(Q), num_actions).to(P.dtype)
            return (
                policy_match(Q, Q_expert, TIE_TOL, torch.ones_like(visited)),
                policy_match(Q, Q_expert, TIE_TOL, visited),
                policy_return(greedy, P, start, r_true, args.horizon),
                greedy_actions(Q),
            )

    start_time = time.time()
    episodic_returns, feature_gap_curve, eval_returns = [], [], []
    step, last_print = 0, 0.0
    while step < args.total_steps:
        # ---- 2. Update: eval_every IRL steps, each a backward pass, a forward pass and one Adam step
        gaps = irl_update(min(args.eval_every, args.total_steps - step))
        for gap in gaps.tolist():
            step += 1
            feature_gap_curve.append((step, gap))
            writer.add_scalar("losses/feature_gap", gap, step)
        # ---- 3. Evaluation: the recovered reward's greedy policy against the expert's
        match, match_visited, recovered_return, policy = scores(theta)
        match, match_visited, recovered_return = float(match), float(match_visited), float(recovered_return)
        eval_returns = run_greedy_episodes(
            policy.cpu().numpy(), P_np, start_np, r_np, args.horizon, args.eval_episodes, args.seed + 10_000
        )
        for ret in eval_returns:
            episodic_returns.append((step, ret))
            writer.add_scalar("eval/episodic_return", ret, step)
        writer.add_scalar("charts/policy_match", match, step)
        writer.add_scalar("charts/true_return_of_recovered_policy", recovered_return, step)
        writer.add_scalar("charts/SPS", int(step / (time.time() - start_time)), step)
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step}/{args.total_steps}  feature gap {gap:.4f}  policy match {match:.3f}  "
                f"true return {recovered_return:.2f} (expert {expert_return:.2f})",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 4. Summary
    wall_time = time.time() - start_time
    writer.add_scalar("charts/expert_return", expert_return, step)

    summary = {
        "episodic_returns": episodic_returns,
        "final_mean_return": float(np.mean(eval_returns)),
        "policy_match": match,
        "policy_match_visited": match_visited,
        "true_return_of_recovered_policy": recovered_return,
        "expert_return": expert_return,
        "demo_mean_return": demo_mean_return,
        "feature_gap_curve": feature_gap_curve,
        "theta": theta.tolist(),
        "sps": step / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {"feature_gap": gap},
    }
    if args.save_model:
        model_path = os.path.join(run_dir, "model.pt")
        torch.save({"theta": theta.detach().cpu()}, model_path)
        saved_returns = evaluate(
            model_path,
            args.grid,
            args.features,
            args.slip,
            args.gamma,
            args.horizon,
            args.soft_vi_sweeps,
            args.eval_episodes,
            seed=args.seed + 10_000,
        )
        for i, r in enumerate(saved_returns):
            writer.add_scalar("eval/saved_model_return", r, i)
        summary.update(model_path=model_path, eval_mean_return=float(np.mean(saved_returns)))
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
