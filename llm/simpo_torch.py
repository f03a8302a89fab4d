"""SimPO: simple preference optimisation with a reference-free, length-normalised reward -- the PyTorch twin.

The reward of a completion is (beta / |y|) log pi(y|x), its mean per-token log-likelihood; the loss
is -log sigmoid(reward(y_w) - reward(y_l) - gamma), with a target margin gamma, on DPO's preference
pairs; no reference model. Starts from the SFT checkpoint (llm/sft_torch.py), trained first when missing.
Paper:  Meng, Xia and Chen 2024, "SimPO: Simple Preference Optimization with a Reference-Free
        Reward", arXiv:2405.14734.
Twin:   llm/simpo_jax.py (`diff llm/simpo_torch.py llm/simpo_jax.py`: only the framework).
Docs:   docs/algorithms/simpo.md
Run:    python llm/simpo_torch.py --seed 1
"""

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

import hf_model
import sft_torch
import tasks
from tinylm_torch import load_checkpoint, sample, sequence_logps


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
    """held-out test prompts (a fixed split, disjoint from the training prompts)"""
    sft_path: str = ""
    """SFT checkpoint (.npz); empty: default_sft_path(args) in log_dir, trained first when missing"""
    sft_steps: int = 1500
    """steps of the SFT run made when the checkpoint is missing"""
    num_prompts: int = 2000
    """training prompts whose SFT samples are turned into preference pairs"""
    samples_per_prompt: int = 4
    """completions sampled per prompt (temperature 1); a pair needs two the verifier scores differently"""
    label_noise: float = 0.1
    """probability that a pair's preference is flipped (Bradley-Terry on the gold reward)"""
    beta: float = 2.0
    """SimPO reward scale: the reward is beta times the mean per-token log-prob of the completion"""
    gamma: float = 1.0
    """target reward margin (reward units, TRL's simpo_gamma): chosen must beat rejected by gamma"""
    epochs: int = 4
    """passes over the preference pairs"""
    batch_size: int = 64
    """pairs per gradient step"""
    learning_rate: float = 1e-5
    """Adam learning rate"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    eval_every: int = 5
    """steps between two greedy evaluations on the test prompts"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(sft_steps=4, num_test=16, num_prompts=32, epochs=1, batch_size=8, eval_every=2)


# ----------------------------------------------------------------------------- pure math
def simpo_loss(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, beta, gamma):
    """SimPO loss on (B,) sequence log-probs (sums over the completion tokens) and (B,) completion
    lengths |y| (tokens up to and including <eos>, the mask's sum): -mean log sigmoid(r_w - r_l - gamma)
    with the reference-free reward r = (beta / |y|) log pi(y|x). Returns (loss, chosen_rewards,
    rejected_rewards), the rewards of each completion, detached (for logging)."""
    chosen_rewards = beta * policy_chosen_logps / chosen_lengths
    rejected_rewards = beta * policy_rejected_logps / rejected_lengths
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma).mean()
    return loss, chosen_rewards.detach(), rejected_rewards.detach()


def completion_lengths(comp_mask):
    """|y| of each completion: the number of completion tokens up to and including <eos> (the sum of
    tasks.completion_mask's row), the divisor of SimPO's length normalisation."""
    return comp_mask.sum(-1)


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_torch_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def check_args(args):
    """Refuse bad flags before any run directory is written or any network is built (one-line ValueError)."""
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("num_prompts", args.num_prompts >= 1, ">= 1"),
        ("samples_per_prompt", args.samples_per_prompt >= 2, ">= 2 (a pair needs two completions)"),
        ("label_noise", 0 <= args.label_noise < 0.5, "in [0, 0.5)"),
        ("beta", args.beta > 0, "> 0"),
        ("gamma", args.gamma >= 0, ">= 0 (a target margin)"),
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
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
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


def pair_logps(model, prompts, completions, comp_mask):
    """Sequence log-probs of the completions (B, C) given the prompts (B, P): completion tokens up to
    <eos> only (comp_mask, from tasks.completion_mask); labels[:, t] is predicted by logits[:, t]."""
    device = next(model.parameters()).device  # batches go where the model is
    full = torch.cat([prompts, completions], dim=1)
    mask = torch.cat([torch.zeros(len(full), prompts.shape[1] - 1, device=device), comp_mask], dim=1)
    return sequence_logps(model(full[:, :-1]), full[:, 1:], mask)


def kl_to_reference(policy, reference, pairs, digits):
    """Sequence-level KL(pi || pi_ref) in nats on the given prompts, by Monte Carlo: one completion per
    prompt sampled from the policy at temperature 1, the sum over its completion tokens (up to <eos>)
    of log pi - log pi_ref, averaged over the prompts. The KL column of the LLM comparison table
    (docs/algorithms/llm.md); every llm/ script measures it the same way on the test prompts."""
    device = next(policy.parameters()).device  # batches go where the model is
    prompts = torch.as_tensor(tasks.encode_prompts(pairs, digits), device=device)
    completions = sample(policy, prompts, tasks.completion_len(digits), 1.0)
    full = torch.cat([prompts, completions], dim=1)
    mask = torch.cat(
        [
            torch.zeros(len(full), prompts.shape[1] - 1, device=device),
            torch.as_tensor(tasks.completion_mask(completions.cpu().numpy()), device=device),
        ],
        dim=1,
    )
    logp = sequence_logps(policy(full[:, :-1]), full[:, 1:], mask)
    ref_logp = sequence_logps(reference(full[:, :-1]), full[:, 1:], mask)
    return float((logp - ref_logp).mean())


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: the SFT start, seeding
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

    # Seeding: python, numpy (prompt draws, label noise, shuffling) and torch (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    K, C = args.samples_per_prompt, tasks.completion_len(args.digits)

    # ---- 2. Preference data: K samples of the SFT policy per prompt, gold-scored, Bradley-Terry labels
    operands = train_pairs[rng.choice(len(train_pairs), args.num_prompts, replace=False)]
    prompts = tasks.encode_prompts(operands, args.digits)
    with torch.no_grad():
        samples = (
            sample(policy, torch.as_tensor(prompts, device=device).repeat_interleave(K, dim=0), C, 1.0)
            .cpu()
            .numpy()
        )
    gold = tasks.graded_score(np.repeat(operands, K, axis=0), samples, args.digits).reshape(-1, K)
    data = tasks.build_preference_pairs(prompts, samples.reshape(-1, K, C), gold, args.label_noise, rng)
    data["chosen_mask"], data["rejected_mask"] = (
        tasks.completion_mask(data[k]) for k in ("chosen", "rejected")
    )
    data = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
    num_pairs = len(data["chosen"])
    chosen_lengths = completion_lengths(data["chosen_mask"])
    rejected_lengths = completion_lengths(data["rejected_mask"])

    # ---- 3. Reference: the SFT policy, frozen, never in the loss (SimPO is reference-free); kept
    # only to measure kl_to_ref and the log-prob changes at the end
    reference = copy.deepcopy(policy).requires_grad_(False)
    with torch.no_grad():
        ref_chosen = pair_logps(reference, data["prompts"], data["chosen"], data["chosen_mask"])
        ref_rejected = pair_logps(reference, data["prompts"], data["rejected"], data["rejected_mask"])

    # ---- 4. Update: epochs of minibatch steps over the pairs
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    with torch.no_grad():
        initial_acc = accuracy(policy, test_pairs, args.digits)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    chosen_logps_curve, margin_curve = [], []
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    steps_per_epoch = -(-num_pairs // args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    step, pairs_seen, last_print = 0, 0, 0.0
    start_time = time.time()
    for epoch in range(args.epochs):
        perm = torch.as_tensor(rng.permutation(num_pairs), device=device)
        for start in range(0, num_pairs, args.batch_size):
            step += 1
            mb = perm[start : start + args.batch_size]
            policy_chosen = pair_logps(
                policy, data["prompts"][mb], data["chosen"][mb], data["chosen_mask"][mb]
            )
            policy_rejected = pair_logps(
                policy, data["prompts"][mb], data["rejected"][mb], data["rejected_mask"][mb]
            )
            loss, chosen_rewards, rejected_rewards = simpo_loss(
                policy_chosen,
                policy_rejected,
                chosen_lengths[mb],
                rejected_lengths[mb],
                args.beta,
                args.gamma,
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
            pairs_seen += len(mb)

            # ---- 5. Logging
            margin = (chosen_rewards - rejected_rewards).mean().item()
            chosen_logps_curve.append((step, policy_chosen.mean().item()))
            margin_curve.append((step, margin))
            sps = int(pairs_seen / (time.time() - start_time))
            writer.add_scalar("losses/simpo_loss", loss.item(), step)
            writer.add_scalar("rewards/chosen", chosen_rewards.mean().item(), step)
            writer.add_scalar("rewards/rejected", rejected_rewards.mean().item(), step)
            writer.add_scalar("rewards/margins", margin, step)
            writer.add_scalar(
                "rewards/accuracies", (chosen_rewards > rejected_rewards).float().mean().item(), step
            )
            # logps/*: mean per-token log-probs (rewards / beta), as TRL logs them for SimPO
            writer.add_scalar("logps/chosen", chosen_rewards.mean().item() / args.beta, step)
            writer.add_scalar("logps/rejected", rejected_rewards.mean().item() / args.beta, step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == total_steps:
                with torch.no_grad():
                    test_acc = accuracy(policy, test_pairs, args.digits)
                accuracy_curve.append((step, test_acc))
                gain_curve.append((step, test_acc - initial_acc))
                writer.add_scalar("charts/test_accuracy", test_acc, step)
            if args.progress and (time.time() - last_print > 0.5 or step == total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{total_steps}  loss {loss.item():.4f}  margin {margin:.3f}  "
                    f"test acc {accuracy_curve[-1][1]:.3f}  pairs/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 6. Summary: the change on the pair set, the KL to the reference, the run's figures
    if args.progress:
        print(file=sys.stderr)

    # Measured on the whole pair set, before (the SFT policy) / after: the change of the chosen
    # completions' summed log-prob and of the SimPO reward margin (as DPO reports its symptom).
    with torch.no_grad():
        final_chosen = pair_logps(policy, data["prompts"], data["chosen"], data["chosen_mask"])
        final_rejected = pair_logps(policy, data["prompts"], data["rejected"], data["rejected_mask"])
    chosen_change = (final_chosen - ref_chosen).mean().item()
    margin_change = (
        args.beta
        * ((final_chosen - ref_chosen) / chosen_lengths - (final_rejected - ref_rejected) / rejected_lengths)
        .mean()
        .item()
    )

    wall_time = time.time() - start_time
    with torch.no_grad():
        kl_to_ref = kl_to_reference(policy, reference, test_pairs, args.digits)
    writer.close()
    final_acc = accuracy_curve[-1][1]
    return {
        "accuracy_curve": accuracy_curve,
        "accuracy_gain_curve": gain_curve,
        "chosen_logps_curve": chosen_logps_curve,
        "margin_curve": margin_curve,
        "initial_test_accuracy": initial_acc,
        "test_accuracy": final_acc,
        "accuracy_gain": final_acc - initial_acc,
        "num_pairs": num_pairs,
        "pair_label_accuracy": float(data["gold_correct"].float().mean()),
        "chosen_logps_change": chosen_change,
        "margin_change": margin_change,
        "kl_to_ref": kl_to_ref,
        "sps": pairs_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {"simpo_loss": loss.item(), "margin": margin},
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
