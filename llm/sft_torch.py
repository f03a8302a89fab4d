"""Supervised fine-tuning (here: training from scratch) on imperfect demonstrations -- the PyTorch twin.

The base policy of the LLM track: a tiny causal transformer (llm/tinylm_torch.py) trained by
next-token cross-entropy on the completion tokens of demonstrations of multi-digit addition, from a
demonstrator that forgets carries. Every other llm/ script starts from the checkpoint it writes.
Paper:  Ouyang et al. 2022, "Training language models to follow instructions with human feedback",
        arXiv:2203.02155 (SFT as the first stage of RLHF).
Twin:   llm/sft_jax.py (`diff llm/sft_torch.py llm/sft_jax.py` shows only the framework).
Docs:   docs/algorithms/sft.md
Run:    python llm/sft_torch.py --seed 1
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

import hf_model
import tasks
from tinylm_torch import TinyLM, sample, save_checkpoint, sequence_logps


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy and the framework (the train/test split is fixed and does not depend on it)"""
    cuda: bool = True
    """use the GPU when one is present (CleanRL's convention; False pins the CPU)"""
    model: str = ""
    """local Hugging Face causal LM folder (local files only); empty: the tiny LM of llm/tinylm_*.py"""
    digits: int = 2
    """digits of each operand"""
    num_test: int = 500
    """held-out test prompts (a fixed split, disjoint from the training prompts)"""
    drop_carry: float = 0.7
    """probability that the demonstrator forgets a carry between two columns"""
    total_steps: int = 1500
    """gradient steps"""
    batch_size: int = 64
    """demonstrations per step"""
    learning_rate: float = 1e-3
    """AdamW peak learning rate (linear warm-up over 50 steps, then linear decay to 0)"""
    weight_decay: float = 0.01
    """AdamW weight decay"""
    d_model: int = 128
    """transformer width"""
    n_layer: int = 2
    """transformer blocks"""
    n_head: int = 4
    """attention heads"""
    block_size: int = 16
    """context length of the model (positions)"""
    eval_every: int = 100
    """steps between two greedy evaluations on the test prompts"""
    save_path: str = ""
    """checkpoint (.npz; with --model a Hugging Face folder); empty: sft.npz (sft_hf) in the run directory"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(total_steps=4, batch_size=16, num_test=32, eval_every=2, d_model=32, n_head=2)


# ----------------------------------------------------------------------------- pure math
def sft_loss(logits, labels, completion_mask):
    """Mean next-token cross-entropy over completion tokens only: prompt tokens are given, not
    imitated. logits (B, T, V) are aligned with labels (B, T)."""
    return -sequence_logps(logits, labels, completion_mask).sum() / completion_mask.sum()


# ----------------------------------------------------------------------------- checks and evaluation
def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("drop_carry", 0 <= args.drop_carry <= 1, "in [0, 1]"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("weight_decay", args.weight_decay >= 0, ">= 0"),
        ("d_model", args.d_model >= 1, ">= 1"),
        ("n_layer", args.n_layer >= 1, ">= 1"),
        ("n_head", args.n_head >= 1, ">= 1"),
        ("block_size", args.block_size >= 1, ">= 1"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < problems, f"< {problems}, the {args.digits}-digit problems"),
        (
            "n_head",
            args.n_head >= 1 and args.d_model % args.n_head == 0,
            f"a divisor of --d-model = {args.d_model}",
        ),
        (
            "digits",
            need <= args.block_size,
            f"at most what --block-size {args.block_size} holds: a prompt and its answer need {need} "
            "positions of context",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    # The Hugging Face model replaces the tiny LM (d_model, n_layer, n_head, block_size unused).
    if args.model:
        hf_model.check_path(args.model, min_context=need)


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


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: run directory, seeding, model, optimiser
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy (the demonstrations) and torch (initialisation, sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # a 0.4M-parameter model: thread hand-offs cost more than they save
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(args.seed)

    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    if args.model:  # a pretrained Hugging Face model, fine-tuned (llm/hf_model.py)
        model = hf_model.load(
            args.model, min_context=tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
        )
    else:
        model = TinyLM(tasks.VOCAB_SIZE, args.block_size, args.d_model, args.n_layer, args.n_head)
    # The model and every batch on the device; the demonstrations are made on the host.
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    warmup = min(50, args.total_steps)
    lr_at = lambda step: (
        args.learning_rate
        * min(step / warmup, (args.total_steps - step + 1) / (args.total_steps - warmup + 1))
    )

    # ---- 2. Training: cross-entropy on fresh demonstrations, greedy evaluations
    accuracy_curve, tokens_seen, last_print = [], 0, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        optimizer.param_groups[0]["lr"] = lr_at(step)
        batch = train_pairs[rng.integers(0, len(train_pairs), args.batch_size)]
        tokens, mask = tasks.sft_batch(batch, args.digits, args.drop_carry, rng)
        tokens, mask = torch.as_tensor(tokens, device=device), torch.as_tensor(mask, device=device)
        logits = model(tokens[:, :-1])
        loss = sft_loss(logits, tokens[:, 1:], mask[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens_seen += tokens.numel()

        if step % args.eval_every == 0 or step == args.total_steps:
            with torch.no_grad():
                test_acc = accuracy(model, test_pairs, args.digits)
            accuracy_curve.append((step, test_acc))
            sps = int(tokens_seen / (time.time() - start_time))
            writer.add_scalar("charts/test_accuracy", test_acc, step)
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], step)
            writer.add_scalar("losses/sft_loss", loss.item(), step)
            writer.add_scalar("charts/SPS", sps, step)
            if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>6d}/{args.total_steps}  loss {loss.item():.4f}  test acc {test_acc:.3f}  "
                    f"tokens/s {sps:7,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)

    # ---- 3. Save: the checkpoint, then the sampled accuracies
    wall_time = time.time() - start_time
    if args.model:  # a Hugging Face folder, what --model of the other llm/ torch scripts takes
        model_path = args.save_path or os.path.join(run_dir, "sft_hf")
        hf_model.save(model, model_path)
    else:
        model_path = args.save_path or os.path.join(run_dir, "sft.npz")
        os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
        save_checkpoint(model, model_path)
    with torch.no_grad():
        sampled_acc = accuracy(model, test_pairs, args.digits, temperature=1.0)
        # the quantity the RL scripts live on: how often a sample gets a carry problem right
        carry_pairs = test_pairs[tasks.inner_carry(test_pairs, args.digits)]
        sampled_carry_acc = accuracy(model, carry_pairs, args.digits, temperature=1.0)
    writer.add_scalar("charts/test_accuracy_sampled", sampled_acc, args.total_steps)
    writer.add_scalar("charts/test_accuracy_sampled_carry", sampled_carry_acc, args.total_steps)
    writer.close()

    # ---- 4. Summary
    return {
        "accuracy_curve": accuracy_curve,
        "test_accuracy": accuracy_curve[-1][1],
        "test_accuracy_sampled": sampled_acc,
        "test_accuracy_sampled_carry": sampled_carry_acc,
        "sps": tokens_seen / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "model_path": model_path,
        "losses": {"sft_loss": loss.item()},
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
