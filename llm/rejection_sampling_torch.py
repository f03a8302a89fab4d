"""Rejection sampling fine-tuning (STaR / ReST-EM / expert iteration) with a verifier -- the PyTorch twin.

Each iteration samples k completions per training prompt, keeps those the verifier scores correct
and fine-tunes on them with the SFT loss; by default from the SFT checkpoint afresh (ReST-EM), with
--no-restart-from-sft from the last policy (expert iteration). Starts from llm/sft_torch.py's checkpoint.
Papers: Zelikman et al. 2022, "STaR", arXiv:2203.14465; Singh et al. 2023, "Beyond Human Data:
        Scaling Self-Training for Problem-Solving with Language Models", arXiv:2312.06585 (ReST-EM);
        Gulcehre et al. 2023, "ReST", arXiv:2308.08998; Dong et al. 2023, "RAFT", arXiv:2304.06767.
Twin:   llm/rejection_sampling_jax.py (`diff` of the two twins: only the framework).
Docs:   docs/algorithms/rejection_sampling.md
Run:    python llm/rejection_sampling_torch.py --seed 1
"""

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
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
    iterations: int = 3
    """rounds of sample, filter, fine-tune"""
    prompts_per_iteration: int = 640
    """training prompts sampled (without replacement) in each iteration"""
    samples_per_prompt: int = 8
    """completions k sampled per prompt"""
    temperature: float = 1.0
    """sampling temperature of the completions"""
    max_per_prompt: int = 0
    """keep at most this many correct completions per prompt (1: STaR's one per prompt); 0: no cap"""
    dedup: bool = False
    """drop a kept completion identical to an earlier kept completion of the same prompt"""
    restart_from_sft: bool = True
    """start each iteration from the SFT checkpoint (ReST-EM); off: from the last policy (expert iteration)"""
    epochs: int = 2
    """passes over each iteration's kept completions"""
    batch_size: int = 64
    """kept completions per gradient step"""
    learning_rate: float = 3e-4
    """Adam learning rate (a fresh optimiser each iteration)"""
    warmup_steps: int = 10
    """linear learning-rate warm-up at the start of each iteration's fine-tuning"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it. 100 SFT steps: the least after which a
# few of the 128 samples are correct, so that the fine-tuning runs too.
SMOKE_ARGS = dict(
    sft_steps=100,
    num_test=16,
    iterations=2,
    prompts_per_iteration=32,
    samples_per_prompt=4,
    batch_size=16,
    max_per_prompt=2,
    dedup=True,
    restart_from_sft=False,
)


# ----------------------------------------------------------------------------- pure math
def filter_samples(rewards, completions, max_per_prompt=0, dedup=False):
    """Which samples to fine-tune on: rewards (N, K) from the verifier, completions (N, K, L) tokens
    (numpy, the same code in both twins: selecting data is not differentiated). A sample is kept when
    its reward is 1 (correct); with dedup, a correct completion equal, token for token up to <eos>, to
    an earlier kept one of the same prompt is dropped; then at most max_per_prompt of a prompt's
    remaining samples are kept, the first ones in sampling order (0: no cap). Returns (N, K) bool."""
    rewards, completions = np.asarray(rewards), np.asarray(completions)
    body = completions * tasks.completion_mask(completions.reshape(-1, completions.shape[-1])).reshape(
        completions.shape
    )
    keep = np.zeros(rewards.shape, dtype=bool)
    for i in range(rewards.shape[0]):
        seen = set()
        for j in range(rewards.shape[1]):
            if rewards[i, j] != 1.0:
                continue
            text = tuple(int(t) for t in body[i, j])
            if dedup and text in seen:
                continue
            if max_per_prompt and keep[i].sum() >= max_per_prompt:
                break
            seen.add(text)
            keep[i, j] = True
    return keep


def training_batch(prompts, completions):
    """(M, P) prompts and (M, C) completions -> next-token inputs (M, P + C - 1), labels (same shape)
    and the loss mask (float32, same shape): 0 on the labels that are prompt tokens, 1 on the
    completion up to and including its first <eos>, 0 on the padding after it. labels[:, t] is
    predicted by the logits at position t, so the completion starts at label index P - 1."""
    prompts, completions = np.asarray(prompts), np.asarray(completions)
    full = np.concatenate([prompts, completions], axis=1)
    mask = np.concatenate(
        [np.zeros((len(full), prompts.shape[1] - 1), dtype=np.float32), tasks.completion_mask(completions)],
        axis=1,
    )
    return full[:, :-1], full[:, 1:], mask


def rejection_sampling_loss(logits, labels, mask):
    """The SFT loss (llm/sft_torch.py's sft_loss) on the kept completions: the mean next-token
    cross-entropy over the tokens where mask is 1 (completion tokens up to <eos>), summed over the
    batch and divided by their count. Prompt tokens and padding neither add to it nor get gradient."""
    return -sequence_logps(logits, labels, mask).sum() / mask.sum()


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
        ("iterations", args.iterations >= 1, ">= 1"),
        ("prompts_per_iteration", args.prompts_per_iteration >= 1, ">= 1"),
        ("samples_per_prompt", args.samples_per_prompt >= 1, ">= 1"),
        ("temperature", args.temperature > 0, "> 0"),
        ("max_per_prompt", args.max_per_prompt >= 0, ">= 0 (0: no cap)"),
        ("epochs", args.epochs >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("warmup_steps", args.warmup_steps >= 1, ">= 1"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("num_test", args.num_test < 100**args.digits, "< 100 ** --digits, the number of problems"),
        (
            "prompts_per_iteration",
            args.prompts_per_iteration <= 100**args.digits - args.num_test,
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

    # ---- 1. Setup: the SFT start, seeding, the frozen SFT copy
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

    # Seeding: python, numpy (prompt draws, batch order) and torch (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    reference = copy.deepcopy(policy).requires_grad_(False)  # the SFT start: restart point and KL reference
    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    C, K = tasks.completion_len(args.digits), args.samples_per_prompt

    with torch.no_grad():
        initial_acc = accuracy(policy, test_pairs, args.digits)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    keep_rate_curve, prompts_solved_curve = [], []
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    tokens_sampled, completions_sampled, grad_steps, loss = 0, 0, 0, torch.tensor(0.0, device=device)
    start_time = time.time()
    for it in range(1, args.iterations + 1):
        # ---- 2. Rollout: k completions of each prompt from the current policy, scored
        pairs = train_pairs[rng.choice(len(train_pairs), args.prompts_per_iteration, replace=False)]
        pairs = np.repeat(pairs, K, axis=0)
        prompts = tasks.encode_prompts(pairs, args.digits)
        with torch.no_grad():
            completions = (
                sample(policy, torch.as_tensor(prompts, device=device), C, args.temperature).cpu().numpy()
            )
        rewards = tasks.verify(pairs, completions, args.digits)
        tokens_sampled += int(tasks.completion_mask(completions).sum())
        completions_sampled += len(completions)

        # ---- 3. Filter: keep the correct ones (cap and dedup per prompt)
        keep = filter_samples(
            rewards.reshape(-1, K), completions.reshape(-1, K, C), args.max_per_prompt, args.dedup
        ).reshape(-1)
        keep_rate = float(keep.mean())
        prompts_solved = float((rewards.reshape(-1, K) == 1.0).any(axis=1).mean())
        keep_rate_curve.append((it, keep_rate))
        prompts_solved_curve.append((it, prompts_solved))

        # ---- 4. Update: fine-tune on the kept pairs with the SFT loss (prompt and padding masked out)
        if args.restart_from_sft:
            policy = copy.deepcopy(reference).requires_grad_(True)  # ReST-EM: from the SFT start
        optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
        inputs, labels, mask = (
            torch.as_tensor(x, device=device) for x in training_batch(prompts[keep], completions[keep])
        )
        M = int(keep.sum())
        num_steps = -(-args.epochs * M // args.batch_size)  # ceil: every kept sample seen epochs times
        order = (
            np.concatenate([rng.permutation(M) for _ in range(-(-num_steps * args.batch_size // max(M, 1)))])
            if M
            else np.zeros(0, dtype=np.int64)
        )
        for step in range(num_steps):
            optimizer.param_groups[0]["lr"] = args.learning_rate * min(1.0, (step + 1) / args.warmup_steps)
            idx = torch.as_tensor(order[step * args.batch_size : (step + 1) * args.batch_size], device=device)
            loss = rejection_sampling_loss(policy(inputs[idx]), labels[idx], mask[idx])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
        grad_steps += num_steps

        # ---- 5. Evaluation and logging
        with torch.no_grad():
            test_acc = accuracy(policy, test_pairs, args.digits)
        accuracy_curve.append((it, test_acc))
        gain_curve.append((it, test_acc - initial_acc))
        sps = int(tokens_sampled / (time.time() - start_time))
        writer.add_scalar("reward", float(rewards.mean()), it)
        writer.add_scalar("charts/keep_rate", keep_rate, it)
        writer.add_scalar("charts/prompts_solved", prompts_solved, it)
        writer.add_scalar("charts/kept_samples", M, it)
        writer.add_scalar(
            "completions/mean_length", float(tasks.completion_mask(completions).sum(-1).mean()), it
        )
        writer.add_scalar("charts/gradient_steps", grad_steps, it)
        writer.add_scalar("losses/rejection_sampling_loss", loss.item(), it)
        writer.add_scalar("charts/test_accuracy", test_acc, it)
        writer.add_scalar("charts/SPS", sps, it)
        if args.progress:
            print(
                f"\riteration {it:>3d}/{args.iterations}  reward {float(rewards.mean()):.3f}  "
                f"keep {keep_rate:.3f}  solved {prompts_solved:.3f}  test acc {test_acc:.3f}  "
                f"tokens/s {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 6. Summary: the KL to the SFT start and the run's figures
    wall_time = time.time() - start_time
    with torch.no_grad():
        kl_to_ref = kl_to_reference(policy, reference, test_pairs, args.digits)
    writer.close()
    final_acc = accuracy_curve[-1][1]
    return {
        "accuracy_curve": accuracy_curve,
        "accuracy_gain_curve": gain_curve,
        "initial_test_accuracy": initial_acc,
        "test_accuracy": final_acc,
        "accuracy_gain": final_acc - initial_acc,
        "kl_to_ref": kl_to_ref,
        "sps": tokens_sampled / wall_time,
        "wall_time": wall_time,
        "global_step": args.iterations,
        "run_dir": run_dir,
        "losses": {
            "rejection_sampling_loss": loss.item(),
            "keep_rate": keep_rate,
            "prompts_solved": prompts_solved,
        },
        "keep_rate_curve": keep_rate_curve,
        "prompts_solved_curve": prompts_solved_curve,
        "completions_sampled": completions_sampled,
        "gradient_steps": grad_steps,
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
