"""GRPO, data parallel over torchrun processes with DistributedDataParallel -- the PyTorch twin.

llm/grpo_torch.py with the step's prompts split over the ranks in whole groups: each rank samples,
scores and standardises its own groups (no communication), DDP averages the gradients, and every
rank takes the same Adam step. Only rank 0 trains a missing SFT checkpoint, evaluates and logs.
Paper:  Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
        Language Models", arXiv:2402.03300.
Twin:   llm/grpo_ddp_jax.py; `diff llm/grpo_torch.py llm/grpo_ddp_torch.py` shows the distribution.
Docs:   docs/algorithms/grpo_ddp.md
Run:    torchrun --nproc_per_node=2 llm/grpo_ddp_torch.py --seed 1   (plain python: one process)
"""

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist
import tyro
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

import hf_model
import sft_torch
import tasks
from tinylm_torch import load_checkpoint, sample, sequence_logps, token_logps


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy and the framework (also of the SFT run when one is trained first)"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    model: str = ""
    """local Hugging Face causal LM folder (local files only), the start instead of --sft-path"""
    digits: int = 2
    """digits of each operand"""
    num_test: int = 500
    """held-out test prompts (a fixed split, disjoint from the training prompts)"""
    sft_path: str = ""
    """SFT checkpoint (.npz); empty: log_dir/sft_<framework>_<digits>d_<sft_steps>steps_seed<seed>.npz"""
    sft_steps: int = 1500
    """steps of the SFT run made when the checkpoint is missing"""
    total_steps: int = 30
    """GRPO steps (sample, score, update)"""
    prompts_per_step: int = 64
    """training prompts per step over all workers (torchrun ranks or JAX devices), split in whole groups"""
    group_size: int = 8
    """completions sampled per prompt (G >= 2)"""
    temperature: float = 1.0
    """sampling temperature; the old and reference log-probs use the same one"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    warmup_steps: int = 10
    """linear learning-rate warm-up: Adam's first steps move every weight by about the full learning rate"""
    update_epochs: int = 2
    """gradient steps on each batch of groups (the first is on-policy, ratio 1)"""
    clip_coef: float = 0.2
    """clipping coefficient epsilon of the per-token ratio"""
    kl_coef: float = 0.04
    """weight beta of the k3 KL penalty to the reference (SFT) policy"""
    scale_rewards: bool = True
    """divide advantages by the group's std (GRPO); --no-scale-rewards: mean baseline only (Dr. GRPO)"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    eval_every: int = 5
    """steps between two greedy evaluations on the test prompts"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(sft_steps=4, num_test=16, total_steps=2, prompts_per_step=4, group_size=4, eval_every=1)


# ----------------------------------------------------------------------------- pure math
def group_advantages(rewards, eps=1e-4, scale=True):
    """(num_prompts, G) rewards -> (num_prompts, G) advantages: r minus the group mean, divided by the
    group's population std plus eps when scale. The group mean is the baseline a critic would give;
    a group whose completions all score the same gets zero advantage (no signal, no gradient)."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale:
        return centred
    return centred / (rewards.std(dim=1, unbiased=False, keepdim=True) + eps)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref) from a sample of pi: exp(d) - d - 1 with
    d = log pi_ref - log pi. Unbiased (E_pi[exp(d)] = 1) and never negative (e^d >= 1 + d)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_coef, kl_coef):
    """GRPO objective as a loss, on (B, T) per-token log-probs and a (B, T) completion mask;
    advantages (B,) are per completion and shared by its tokens.
        per token: -[min(r A, clip(r, 1 - eps, 1 + eps) A) - beta * k3(pi, pi_ref)], r = pi / pi_old
    averaged over each completion's tokens, then over completions (the GRPO paper's aggregation).
    Returns (loss, mean KL per token, fraction of tokens whose ratio was clipped)."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * adv)
    kl = k3_kl(logp, ref_logp)
    per_token = -(surrogate - kl_coef * kl)
    lengths = mask.sum(-1).clamp(min=1.0)
    loss = ((per_token * mask).sum(-1) / lengths).mean()
    clipped = ((ratio - 1.0).abs() > clip_coef).float()
    return loss, (kl * mask).sum() / mask.sum(), (clipped * mask).sum() / mask.sum()


# ----------------------------------------------------------------------------- distribution
def all_reduce_sum(x):
    """Sum of x over the ranks (x itself when there is no process group: world size 1)."""
    if dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)  # SUM by default
    return x


def grpo_update(model, optimizer, batch, args):
    """update_epochs gradient steps on this rank's share of the groups (a dict of tensors). model is
    the DistributedDataParallel-wrapped policy (or the plain policy at world size 1): backward
    all-reduces (averages) the gradients, and as every rank holds as many completions, the average of
    the ranks' per-completion means is the mean over all completions, the 1-process loss. Returns the
    last epoch's (loss, mean KL per token, clip ratio, logits) on this rank."""
    for epoch in range(args.update_epochs):
        logits = model(batch["inputs"])
        logp = token_logps(logits, batch["labels"], args.temperature)
        loss, kl, clip_ratio = grpo_loss(
            logp,
            batch["old_logp"],
            batch["ref_logp"],
            batch["advantages"],
            batch["mask"],
            args.clip_coef,
            args.kl_coef,
        )
        optimizer.zero_grad()
        loss.backward()  # DDP: the gradient all-reduce runs here
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
    return loss, kl, clip_ratio, logits


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_torch_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    workers = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun ranks; 1 without torchrun
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("prompts_per_step", args.prompts_per_step >= 1, ">= 1"),
        ("group_size", args.group_size >= 2, ">= 2, a group baseline needs at least 2 completions"),
        ("temperature", args.temperature > 0, "> 0"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("warmup_steps", args.warmup_steps >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("kl_coef", args.kl_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < problems, f"< {problems}, the {args.digits}-digit problems"),
        (
            "prompts_per_step",
            args.prompts_per_step % workers == 0,
            f"a multiple of the worker count, {workers} (each worker samples whole groups)",
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

    # ---- 1. Setup: workers, SFT start, run directory, seeding, reference, optimiser
    rank, world_size, device = setup_distributed(args)
    torch.set_num_threads(1)  # a 0.4M-parameter model: thread hand-offs cost more than they save
    # Rank 0 trains the SFT checkpoint when it is missing; the other ranks wait for it, then load it.
    # With --model nothing is trained first: every rank loads the same local folder at once.
    if rank != 0 and not args.model:
        dist.barrier()
    policy, sft_path = load_or_train_sft(args)
    if rank == 0 and dist.is_initialized() and not args.model:
        dist.barrier()
    # Sampling and every update run on the device; the task's numpy bookkeeping stays on the host.
    policy = policy.to(device)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = None
    if rank == 0:  # only rank 0 logs: one run directory, one curve, no N copies of every scalar
        writer = SummaryWriter(run_dir)
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
            + f"\n|world_size|{world_size}|",
        )

    # Seeding: python, numpy and torch (sampling) offset per rank, so that the ranks sample different
    # completions; the prompt draws (rng) are seeded alike on every rank: all draw the same prompts
    # and each takes its own share.
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    rng = np.random.default_rng(args.seed)

    reference = copy.deepcopy(policy).requires_grad_(False)  # the frozen SFT policy of the KL term
    # DDP broadcasts rank 0's parameters to every rank, then all-reduces gradients in backward (the
    # tiny LM or, with --model, the Hugging Face model: the same wrapper, the same all-reduce).
    model = (
        DistributedDataParallel(policy, device_ids=[device.index] if device.type == "cuda" else None)
        if dist.is_initialized()
        else policy
    )
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    P, C, G = tasks.prompt_len(args.digits), tasks.completion_len(args.digits), args.group_size
    share = args.prompts_per_step // world_size * G  # this rank's completions per step

    initial_acc = float("nan")
    if rank == 0:  # evaluation on rank 0 only; the others wait at the next all-reduce
        with torch.no_grad():
            initial_acc = accuracy(policy, test_pairs, args.digits)
        writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    tokens_sampled, last_print = 0, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        optimizer.param_groups[0]["lr"] = args.learning_rate * min(1.0, step / args.warmup_steps)
        # ---- 2. Rollout: G completions per prompt, each worker for its own whole groups
        pairs = np.repeat(train_pairs[rng.integers(0, len(train_pairs), args.prompts_per_step)], G, axis=0)
        pairs = pairs[rank * share : (rank + 1) * share]  # whole groups: rank r's block of prompts
        prompts = torch.as_tensor(tasks.encode_prompts(pairs, args.digits), device=device)
        completions = sample(policy, prompts, C, args.temperature)
        rewards = torch.as_tensor(tasks.verify(pairs, completions.cpu().numpy(), args.digits), device=device)
        advantages = group_advantages(rewards.reshape(-1, G), scale=args.scale_rewards).reshape(-1)
        comp_mask = torch.as_tensor(tasks.completion_mask(completions.cpu().numpy()), device=device)

        # ---- 3. Log-probs: of the sampling and the reference policy
        # inputs, labels and the mask, aligned: labels[:, t] is predicted by logits[:, t]
        full = torch.cat([prompts, completions], dim=1)
        inputs, labels = full[:, :-1], full[:, 1:]
        mask = torch.cat([torch.zeros(len(full), P - 1, device=device), comp_mask], dim=1)
        with torch.no_grad():
            old_logp = token_logps(policy(inputs), labels, args.temperature)
            ref_logp = token_logps(reference(inputs), labels, args.temperature)

        # ---- 4. Update: the gradient averaged over the workers
        # (DDP all-reduces the gradients in backward)
        batch = dict(
            inputs=inputs,
            labels=labels,
            mask=mask,
            advantages=advantages,
            old_logp=old_logp,
            ref_logp=ref_logp,
        )
        loss, kl, clip_ratio, logits = grpo_update(model, optimizer, batch, args)
        with torch.no_grad():
            logp_all = torch.log_softmax(logits / args.temperature, dim=-1)
            entropy = (-(logp_all.exp() * logp_all).sum(-1) * mask).sum() / mask.sum()

        # ---- 5. Logging and evaluation
        group_rewards = rewards.reshape(-1, G)
        # The logged figures, over all ranks in one all-reduce: sums of the per-completion and
        # per-group counts, and the ranks' mean of the per-rank losses.
        totals = all_reduce_sum(
            torch.stack(
                [
                    rewards.sum(),
                    (rewards == 1).float().sum(),
                    comp_mask.sum(-1).float().sum(),
                    (group_rewards.std(dim=1, unbiased=False) == 0).float().sum(),
                    comp_mask.sum().float(),
                    loss.detach(),
                    kl,
                    entropy,
                    clip_ratio,
                ]
            ).double()
        ).tolist()
        n_all = share * world_size
        reward_mean, accuracy_mean, length_mean = totals[0] / n_all, totals[1] / n_all, totals[2] / n_all
        zero_std = totals[3] / args.prompts_per_step
        tokens_sampled += int(totals[4])
        loss_mean, kl_mean, entropy_mean, clip_mean = (x / world_size for x in totals[5:])
        sps = int(tokens_sampled / (time.time() - start_time))
        if rank == 0:
            writer.add_scalar("reward", reward_mean, step)
            writer.add_scalar("accuracy", accuracy_mean, step)
            writer.add_scalar("completions/mean_length", length_mean, step)
            writer.add_scalar("frac_reward_zero_std", zero_std, step)
            writer.add_scalar("losses/grpo_loss", loss_mean, step)
            writer.add_scalar("kl", kl_mean, step)
            writer.add_scalar("entropy", entropy_mean, step)
            writer.add_scalar("clip_ratio", clip_mean, step)
            writer.add_scalar("charts/SPS", sps, step)
        if rank == 0 and (step % args.eval_every == 0 or step == args.total_steps):
            with torch.no_grad():
                test_acc = accuracy(policy, test_pairs, args.digits)
            accuracy_curve.append((step, test_acc))
            gain_curve.append((step, test_acc - initial_acc))
            writer.add_scalar("charts/test_accuracy", test_acc, step)
        if rank == 0 and args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>4d}/{args.total_steps}  reward {reward_mean:.3f}  "
                f"test acc {accuracy_curve[-1][1]:.3f}  kl {kl_mean:.4f}  tokens/s {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if rank == 0 and args.progress:
        print(file=sys.stderr)

    # ---- 6. Summary: the sequence KL to the reference on the test prompts
    wall_time = time.time() - start_time
    if dist.is_initialized():
        dist.barrier()  # every rank is done with collectives before the group goes
        dist.destroy_process_group()
    kl_to_ref = float("nan")
    if rank == 0:
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
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": {
            "grpo_loss": loss_mean,
            "kl": kl_mean,
            "entropy": entropy_mean,
            "clip_ratio": clip_mean,
            "frac_reward_zero_std": zero_std,
        },
        "world_size": world_size,
        "rank": rank,
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
