"""A process reward model (PRM) with Monte Carlo step labels against an outcome reward model (ORM),
for best-of-n selection -- the PyTorch twin.

Each answer digit of an SFT sample is labelled by rollouts from its prefix (Math-Shepherd); a PRM
(step labels) and an ORM (final correctness), both the SFT transformer with a scalar head, then pick
the best of n SFT samples per held-out prompt. The SFT policy (llm/sft_torch.py) is never trained.
Papers: Lightman et al. 2023, "Let's Verify Step by Step", arXiv:2305.20050; Wang et al. 2024,
        "Math-Shepherd", arXiv:2312.08935 (Monte Carlo step labels).
Twin:   llm/prm_jax.py (`diff llm/prm_torch.py llm/prm_jax.py`: only the framework).
Docs:   docs/algorithms/prm.md
Run:    python llm/prm_torch.py --seed 1
"""

import copy
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

import hf_model
import sft_torch
import tasks
from tinylm_torch import load_checkpoint, sample


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy and the framework (also of the SFT run when one is trained first)"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    model: str = ""
    """a local Hugging Face causal LM folder (local files only); empty: the tiny LM of llm/tinylm_*.py"""
    digits: int = 2
    """digits of each operand"""
    num_test: int = 500
    """held-out test prompts (a fixed split, disjoint from the training ones), where best-of-n is measured"""
    sft_path: str = ""
    """SFT checkpoint (.npz); empty: default_sft_path(args) in log_dir, trained first when missing"""
    sft_steps: int = 1500
    """steps of the SFT run made when the checkpoint is missing"""
    num_prompts: int = 2000
    """training prompts whose SFT samples are labelled and trained on"""
    samples_per_prompt: int = 2
    """solutions sampled per training prompt (temperature 1)"""
    num_rollouts: int = 4
    """Monte Carlo completions rolled out from each step's prefix (N of Math-Shepherd)"""
    soft_labels: bool = False
    """label a step by the fraction of its rollouts that reach the gold answer (soft); off: 1 if any (hard)"""
    aggregation: str = "min"
    """how the PRM's step probabilities make one score per solution: min or product"""
    best_of_n: int = 8
    """n of the best-of-n result in accuracy_gain and of the analytic KL bound kl_to_ref"""
    max_n: int = 16
    """samples per held-out prompt for the best-of-n table (n = 1, 2, 4, ... up to max_n)"""
    epochs: int = 4
    """passes over the labelled solutions (PRM and ORM alike)"""
    batch_size: int = 64
    """solutions per gradient step"""
    learning_rate: float = 1e-3
    """Adam learning rate (PRM and ORM alike)"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    eval_every: int = 50
    """steps between two best-of-n evaluations on the held-out prompts"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    sft_steps=4,
    num_test=16,
    num_prompts=16,
    num_rollouts=2,
    best_of_n=2,
    max_n=4,
    epochs=1,
    batch_size=8,
    eval_every=2,
)
AGGREGATIONS = ("min", "product")


# ----------------------------------------------------------------------------- pure math
def step_mask(completions):
    """(M, C) completion tokens -> (M, C) float mask of the steps: the answer characters before the
    first <eos> (the <eos> itself and the padding after it are not steps; a completion that never
    stops has C steps). Framework-neutral (numpy)."""
    completions = np.asarray(completions)
    return tasks.completion_mask(completions) * (completions != tasks.EOS)


def mc_step_labels(pairs, completions, rollout, num_rollouts, digits, soft=False):
    """Math-Shepherd's Monte Carlo step labels. For every step j of every completion, the prefix
    prompt + completion[:j + 1] is completed num_rollouts times by rollout(prefixes, max_new_tokens)
    -> (B, max_new_tokens) tokens (the policy at temperature 1); each rollout is gold-verified.
    Label: 1.0 if any rollout is right (hard estimate), or the fraction that are (soft). After the
    last position there is nothing left to roll out: the completion itself is verified.
    Returns (labels, steps), both (M, C) float numpy, labels 0 off the steps."""
    completions = np.asarray(completions)
    M, C = completions.shape
    P, N = tasks.prompt_len(digits), num_rollouts
    steps = step_mask(completions)
    labels = np.zeros((M, C), dtype=np.float32)
    prompts = tasks.encode_prompts(pairs, digits)
    for j in range(C):
        rows = np.flatnonzero(steps[:, j])
        if len(rows) == 0:
            continue
        prefixes = np.concatenate([prompts[rows], completions[rows, : j + 1]], axis=1).repeat(N, axis=0)
        rest = C - j - 1
        tails = (
            np.asarray(rollout(prefixes, rest)) if rest > 0 else np.zeros((len(prefixes), 0), dtype=np.int64)
        )
        rolled = np.concatenate([prefixes[:, P:], tails], axis=1)
        correct = tasks.verify(np.repeat(pairs[rows], N, axis=0), rolled, digits).reshape(-1, N)
        labels[rows, j] = correct.mean(1) if soft else correct.max(1)
    return labels, steps.astype(np.float32)


def masked_bce_loss(logits, labels, mask):
    """Binary cross-entropy with logits, averaged over the positions where mask is 1 (the steps for
    the PRM, the last token for the ORM); every other position contributes nothing, not even to the
    count. Per position: softplus(z) - y z = -[y log sigmoid(z) + (1 - y) log sigmoid(-z)] (soft
    labels y in [0, 1] allowed). Returns (loss, accuracy of sign(z) against y > 0.5 on the mask)."""
    per_position = F.softplus(logits) - labels * logits
    count = mask.sum().clamp(min=1.0)
    right = ((logits > 0) == (labels > 0.5)).float()
    return (per_position * mask).sum() / count, (right * mask).sum() / count


def aggregate_step_scores(step_logits, steps, how="min"):
    """(B, T) per-position logits and step mask -> (B,) solution scores: the min ("min") or the
    product ("product") of the step probabilities sigmoid(z) over the steps. A solution without a
    single step (an empty answer) scores 0."""
    p = torch.sigmoid(step_logits)
    filled = torch.where(steps > 0, p, torch.ones_like(p))  # non-steps are neutral for min and product
    agg = filled.min(-1).values if how == "min" else filled.prod(-1)
    return torch.where(steps.sum(-1) > 0, agg, torch.zeros_like(agg))


def best_of_n_select(scores):
    """(..., n) scores of n candidates -> (...,) index of the best; ties go to the first candidate."""
    return scores.argmax(-1)


def best_of_n_kl(n):
    """Analytic KL(best-of-n policy || base policy) = log n - (n - 1) / n (Stiennon et al. 2020;
    Beirami et al. 2024, arXiv:2401.01879, show it is an upper bound, exact when no two samples tie).
    0 at n = 1."""
    return math.log(n) - (n - 1) / n


# ----------------------------------------------------------------------------- network
class StepRewardModel(nn.Module):
    """The SFT transformer with a scalar head on the final hidden state of every position: one
    logit per token, read at the step positions (PRM) or at the last token (ORM). The head starts at
    zero: every probability 0.5."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.head = nn.Linear(lm.config["d_model"], 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens):
        return self.head(self.lm.features(tokens)).squeeze(-1)


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_torch_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def n_grid(args):
    """The n of the best-of-n table: the powers of two that divide max_n, and best_of_n."""
    return sorted(
        {2**k for k in range(int(math.log2(args.max_n)) + 1) if args.max_n % 2**k == 0} | {args.best_of_n}
    )


def check_args(args):
    """Refuse bad flags before any run directory is written or any network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("num_prompts", args.num_prompts >= 1, ">= 1"),
        ("samples_per_prompt", args.samples_per_prompt >= 1, ">= 1"),
        ("num_rollouts", args.num_rollouts >= 1, ">= 1 (a step label needs a rollout)"),
        ("best_of_n", args.best_of_n >= 1, ">= 1"),
        ("max_n", args.max_n >= 1, ">= 1"),
        ("epochs", args.epochs >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < 100**args.digits, "< 100 ** --digits, the number of problems"),
        (
            "num_prompts",
            args.num_prompts <= 100**args.digits - args.num_test,
            f"<= {100**args.digits - args.num_test}, the training prompts (drawn without replacement)",
        ),
        ("best_of_n", args.max_n % max(args.best_of_n, 1) == 0, "a divisor of --max-n"),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.aggregation not in AGGREGATIONS:
        raise ValueError(f"--aggregation {args.aggregation!r}: choose one of {AGGREGATIONS}")
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    path = args.sft_path or default_sft_path(args)
    if args.model:  # a Hugging Face model is the starting policy: no SFT checkpoint is read or trained
        hf_model.check_path(args.model, min_context=need)
    elif os.path.exists(path):
        load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=need)
    else:
        sft_torch.check_args(sft_torch.Args(digits=args.digits))


def load_or_train_sft(args):
    if args.model:  # the Hugging Face model is the starting policy (llm/hf_model.py)
        return hf_model.load(
            args.model, min_context=tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
        ), args.model
    path = args.sft_path or default_sft_path(args)
    if not os.path.exists(path):
        print(
            f"no SFT checkpoint at {path}: training one first (llm/sft_torch.py, {args.sft_steps} steps)",
            file=sys.stderr,
        )
        sft_torch.train(
            sft_torch.Args(
                seed=args.seed,
                cuda=args.cuda,
                digits=args.digits,
                num_test=args.num_test,
                total_steps=args.sft_steps,
                save_path=path,
                log_dir=args.log_dir,
                progress=args.progress,
            )
        )
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    return load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=need), path


def accuracy(model, pairs, digits, temperature=0.0):
    """Mean gold reward of the model's completions of the given operand pairs (greedy by default)."""
    device = next(model.parameters()).device  # batches go where the model is
    completions = sample(
        model,
        torch.as_tensor(tasks.encode_prompts(pairs, digits), device=device),
        tasks.completion_len(digits),
        temperature,
    )
    return float(tasks.verify(pairs, completions.cpu().numpy(), digits).mean())


def last_index(prompt_len, completions):
    """Position of each completion's last token (its <eos>) in the prompt + completion sequence."""
    return prompt_len + tasks.completion_mask(completions).sum(-1).astype(np.int64) - 1


def majority_vote(answers, gold):
    """(num_prompts, n) decoded answers and their gold rewards -> (num_prompts,) gold reward of the
    most frequent answer (ties: the one that appears first)."""
    out = np.zeros(len(answers), dtype=np.float32)
    for i, row in enumerate(answers):
        top = Counter(row).most_common(1)[0][0]
        out[i] = gold[i, list(row).index(top)]
    return out


def best_of_n_table(scores, gold, answers, grid):
    """Gold accuracy of best-of-n for each n in grid, from (num_prompts, max_n) candidate scores
    ({"prm": ..., "orm": ...}), gold rewards and decoded answers. The max_n samples of a prompt are
    split into max_n / n disjoint groups of n and the accuracy is averaged over all groups (a lower-
    variance estimate than one group per prompt). Also majority vote and the oracle (pass@n: some
    candidate is right)."""
    num_prompts, max_n = gold.shape
    table = {name: [] for name in (*scores, "majority", "oracle")}
    for n in grid:
        g = gold.reshape(num_prompts, max_n // n, n)
        for name, s in scores.items():
            pick = best_of_n_select(torch.as_tensor(s.reshape(num_prompts, max_n // n, n))).cpu().numpy()
            table[name].append(float(np.take_along_axis(g, pick[..., None], -1).mean()))
        table["majority"].append(float(majority_vote(answers.reshape(-1, n), g.reshape(-1, n)).mean()))
        table["oracle"].append(float(g.max(-1).mean()))
    return table


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: the SFT sampler, seeding
    torch.set_num_threads(1)  # a 0.4M-parameter model: thread hand-offs cost more than they save
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    policy, sft_path = load_or_train_sft(args)
    policy = policy.to(device)  # sampling and updates run there; numpy bookkeeping stays on the host
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy (prompt draws, shuffling) and torch (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    P, C, K = tasks.prompt_len(args.digits), tasks.completion_len(args.digits), args.samples_per_prompt
    policy.requires_grad_(False)  # the SFT policy only samples: it is never trained
    with torch.no_grad():
        initial_acc = accuracy(policy, test_pairs, args.digits)
    start_time = time.time()

    def rollout(prefixes, max_new_tokens):
        """The policy's continuations of the prefixes at temperature 1 (the Monte Carlo rollouts)."""
        return sample(policy, torch.as_tensor(prefixes, device=device), max_new_tokens, 1.0).cpu().numpy()

    # ---- 2. Labels: training solutions, their Monte Carlo step labels (PRM) and outcome labels (ORM)
    operands = np.repeat(
        train_pairs[rng.choice(len(train_pairs), args.num_prompts, replace=False)], K, axis=0
    )
    prompts = tasks.encode_prompts(operands, args.digits)
    completions = rollout(prompts, C)
    outcome = tasks.verify(operands, completions, args.digits)
    step_labels, steps = mc_step_labels(
        operands, completions, rollout, args.num_rollouts, args.digits, args.soft_labels
    )
    tokens = np.concatenate([prompts, completions], axis=1)
    zeros = np.zeros((len(tokens), P), dtype=np.float32)
    prm_labels = np.concatenate([zeros, step_labels], axis=1)  # labels and masks over prompt + completion
    prm_mask = np.concatenate([zeros, steps], axis=1)
    orm_mask = np.zeros_like(prm_mask)
    orm_mask[np.arange(len(tokens)), last_index(P, completions)] = 1.0  # the last token: <eos>
    orm_labels = orm_mask * outcome[:, None]

    # ---- 3. Candidates: max_n SFT samples per held-out prompt, gold-verified
    test_operands = np.repeat(test_pairs, args.max_n, axis=0)
    test_completions = rollout(tasks.encode_prompts(test_operands, args.digits), C)
    test_tokens = torch.as_tensor(
        np.concatenate([tasks.encode_prompts(test_operands, args.digits), test_completions], axis=1),
        device=device,
    )
    test_steps = torch.as_tensor(
        np.concatenate(
            [
                np.zeros((len(test_operands), P), dtype=np.float32),
                step_mask(test_completions).astype(np.float32),
            ],
            axis=1,
        ),
        device=device,
    )
    test_last = torch.as_tensor(last_index(P, test_completions), device=device)
    test_gold = tasks.verify(test_operands, test_completions, args.digits).reshape(-1, args.max_n)
    test_answers = np.array([tasks.decode(c) for c in test_completions]).reshape(-1, args.max_n)

    # ---- 4. Reward models: two copies of the SFT transformer, same head, same data, same steps
    prm, orm = (
        StepRewardModel(copy.deepcopy(policy).requires_grad_(True)),
        StepRewardModel(copy.deepcopy(policy).requires_grad_(True)),
    )
    prm, orm = prm.to(device), orm.to(device)  # the heads join the transformers on the device
    prm_opt = torch.optim.Adam(prm.parameters(), lr=args.learning_rate)
    orm_opt = torch.optim.Adam(orm.parameters(), lr=args.learning_rate)

    def candidate_scores():
        """(num_test, max_n) scores of the held-out candidates: the PRM's aggregate over the steps,
        the ORM's logit at the last token."""
        with torch.no_grad():
            prm_scores = aggregate_step_scores(prm(test_tokens), test_steps, args.aggregation)
            orm_scores = orm(test_tokens)[torch.arange(len(test_tokens), device=device), test_last]
        return {
            "prm": prm_scores.cpu().numpy().reshape(-1, args.max_n),
            "orm": orm_scores.cpu().numpy().reshape(-1, args.max_n),
        }

    def evaluate(grid):
        return best_of_n_table(candidate_scores(), test_gold, test_answers, grid)

    # ---- 5. Update: epochs over the labelled solutions, PRM and ORM alike
    num_solutions = len(tokens)
    steps_per_epoch = -(-num_solutions // args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    bon = evaluate([args.best_of_n])["prm"][0]  # head at zero: every score ties, the first sample is picked
    accuracy_curve, gain_curve = [(0, bon)], [(0, bon - initial_acc)]
    writer.add_scalar("charts/test_accuracy", bon, 0)
    step, solutions_seen, last_print = 0, 0, 0.0
    for epoch in range(args.epochs):
        perm = rng.permutation(num_solutions)
        for start in range(0, num_solutions, args.batch_size):
            step += 1
            idx = perm[start : start + args.batch_size]
            x = torch.as_tensor(tokens[idx], device=device)
            prm_loss, prm_acc = masked_bce_loss(
                prm(x),
                torch.as_tensor(prm_labels[idx], device=device),
                torch.as_tensor(prm_mask[idx], device=device),
            )
            orm_loss, orm_acc = masked_bce_loss(
                orm(x),
                torch.as_tensor(orm_labels[idx], device=device),
                torch.as_tensor(orm_mask[idx], device=device),
            )
            for model, optimizer, loss in ((prm, prm_opt, prm_loss), (orm, orm_opt, orm_loss)):
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
            solutions_seen += len(idx)

            # ---- 6. Logging
            sps = int(solutions_seen / (time.time() - start_time))
            writer.add_scalar("losses/prm_loss", prm_loss.item(), step)
            writer.add_scalar("losses/orm_loss", orm_loss.item(), step)
            writer.add_scalar("charts/prm_step_accuracy", prm_acc.item(), step)
            writer.add_scalar("charts/orm_accuracy", orm_acc.item(), step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == total_steps:
                bon = evaluate([args.best_of_n])["prm"][0]
                accuracy_curve.append((step, bon))
                gain_curve.append((step, bon - initial_acc))
                writer.add_scalar("charts/test_accuracy", bon, step)
            if args.progress and (time.time() - last_print > 0.5 or step == total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{total_steps}  prm loss {prm_loss.item():.4f}  orm loss "
                    f"{orm_loss.item():.4f}  PRM best-of-{args.best_of_n} {accuracy_curve[-1][1]:.3f}  "
                    f"solutions/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 7. Summary: the best-of-n table for PRM, ORM, majority vote and pass@n
    if args.progress:
        print(file=sys.stderr)

    grid = n_grid(args)
    table = evaluate(grid)
    for name, accs in table.items():
        for n, acc in zip(grid, accs):
            writer.add_scalar(f"best_of_n/{name}", acc, n)  # x axis: n
    wall_time = time.time() - start_time
    kl_to_ref = best_of_n_kl(args.best_of_n)  # analytic: best-of-n has no log-probs to sample
    writer.close()
    final_acc = table["prm"][grid.index(args.best_of_n)]
    return {
        "accuracy_curve": accuracy_curve,
        "accuracy_gain_curve": gain_curve,
        "initial_test_accuracy": initial_acc,
        "test_accuracy": final_acc,
        "accuracy_gain": final_acc - initial_acc,
        "orm_test_accuracy": table["orm"][grid.index(args.best_of_n)],
        "prm_minus_orm": final_acc - table["orm"][grid.index(args.best_of_n)],
        "best_of_n_table": {"n": grid, **table},
        # flat copies, so that tests/evaluation.py's JSON keeps them (it keeps scalars only)
        **{f"bon_{name}_n{n}": acc for name, accs in table.items() for n, acc in zip(grid, accs)},
        "step_label_mean": float(step_labels[steps > 0].mean()),
        "outcome_label_mean": float(outcome.mean()),
        "kl_to_ref": kl_to_ref,
        "sps": solutions_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {"prm_loss": prm_loss.item(), "orm_loss": orm_loss.item()},
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
