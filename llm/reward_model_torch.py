"""A Bradley-Terry reward model on preference pairs -- the PyTorch twin.

The SFT policy (llm/sft_torch.py) samples completions; pairs the verifier scores differently become
noisy preference pairs. The SFT transformer with a scalar head on the last completion token is
trained on them with the Bradley-Terry loss and saved for llm/ppo_rlhf_torch.py.
Papers: Bradley and Terry 1952, "Rank Analysis of Incomplete Block Designs"; Christiano et al. 2017,
        "Deep Reinforcement Learning from Human Preferences", arXiv:1706.03741; Ouyang et al. 2022,
        "Training language models to follow instructions with human feedback", arXiv:2203.02155.
Twin:   llm/reward_model_jax.py (`diff llm/reward_model_{torch,jax}.py` shows only the framework).
Docs:   docs/algorithms/reward_model.md
Run:    python llm/reward_model_torch.py --seed 1
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

import hf_model
import sft_torch
import tasks
from tinylm_torch import load_checkpoint, sample, save_checkpoint


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
    """held-out test prompts (a fixed split, disjoint from training); the held-out pairs come from them"""
    sft_path: str = ""
    """SFT checkpoint (.npz); empty: log_dir/sft_<framework>_<digits>d_<sft_steps>steps_seed<seed>.npz"""
    sft_steps: int = 1500
    """steps of the SFT run made when the checkpoint is missing"""
    num_prompts: int = 8000
    """training prompts whose SFT samples are turned into preference pairs"""
    samples_per_prompt: int = 4
    """completions sampled per prompt (temperature 1); a pair needs two the verifier scores differently"""
    label_noise: float = 0.1
    """probability that a pair's preference is flipped (Bradley-Terry on the gold reward)"""
    epochs: int = 20
    """passes over the preference pairs"""
    batch_size: int = 64
    """pairs per gradient step"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    eval_every: int = 50
    """steps between two evaluations on the held-out pairs"""
    save_path: str = ""
    """where the reward model is saved (.npz; a folder with --model); empty: default_save_path(args)"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(sft_steps=4, num_test=32, num_prompts=32, epochs=1, batch_size=8, eval_every=2)


# ----------------------------------------------------------------------------- pure math
def bradley_terry_loss(chosen_scores, rejected_scores):
    """Negative log-likelihood of the preferences under Bradley-Terry, P(chosen > rejected) =
    sigmoid(r_chosen - r_rejected): -mean log sigmoid(r_c - r_r). Returns (loss, pairwise accuracy)."""
    margin = chosen_scores - rejected_scores
    return -F.logsigmoid(margin).mean(), (margin > 0).float().mean()


# ----------------------------------------------------------------------------- network
class RewardModel(nn.Module):
    """The SFT transformer with a scalar head on the final hidden state of the completion's last
    token (<eos>, or the last position when there is none). The head starts at zero: every score 0.
    With --model the transformer is the Hugging Face model (llm/hf_model.py) and the head a new
    nn.Linear(hidden size, 1) on its last hidden state, trained with it."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.head = nn.Linear(lm.config["d_model"], 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens, last_index):
        h = self.lm.features(tokens)
        return self.head(h[torch.arange(len(tokens), device=tokens.device), last_index]).squeeze(-1)


def save_reward_model(model, path):
    """The transformer as a tinylm checkpoint plus the head as "head.w" (d_model, 1) and "head.b" (1,).
    A Hugging Face transformer (--model) goes to the folder path instead (hf_model.save) and the head
    to path/value_head.npz."""
    if isinstance(model.lm, hf_model.HFCausalLM):
        hf_model.save(model.lm, path)
        np.savez(
            os.path.join(path, "value_head.npz"),
            **{
                "head.w": model.head.weight.detach().cpu().numpy().T.astype(np.float32),
                "head.b": model.head.bias.detach().cpu().numpy().astype(np.float32),
            },
        )
        return
    save_checkpoint(model.lm, path)
    arrays = dict(np.load(path))
    arrays["head.w"] = model.head.weight.detach().cpu().numpy().T.astype(np.float32)
    arrays["head.b"] = model.head.bias.detach().cpu().numpy().astype(np.float32)
    np.savez(path, **arrays)


def load_reward_model(path, min_context=None):
    """A RewardModel with the weights saved by save_reward_model; a checkpoint without a head, of
    another vocabulary or of a shorter context raises ValueError. A folder is a Hugging Face reward
    model (--model): the transformer from the folder, the head from its value_head.npz."""
    hf = os.path.isdir(path)
    data = np.load(os.path.join(path, "value_head.npz") if hf else path)
    if "head.w" not in data.files or "head.b" not in data.files:
        raise ValueError(f"{path} is not a reward-model checkpoint (no head.w / head.b)")
    lm = (
        hf_model.load(path, min_context=min_context)
        if hf
        else load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=min_context)
    )
    model = RewardModel(lm)
    with torch.no_grad():
        model.head.weight.copy_(torch.as_tensor(data["head.w"].T))
        model.head.bias.copy_(torch.as_tensor(data["head.b"]))
    return model


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_torch_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def default_save_path(args):
    if args.model:  # a folder named after the Hugging Face model
        return os.path.join(
            args.log_dir,
            f"reward_model_torch_{os.path.basename(os.path.normpath(args.model))}_"
            f"{args.digits}d_{args.num_prompts}prompts_{args.epochs}epochs_seed{args.seed}",
        )
    return os.path.join(
        args.log_dir,
        f"reward_model_torch_{args.digits}d_{args.num_prompts}prompts_{args.epochs}epochs_seed{args.seed}.npz",
    )


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("num_prompts", args.num_prompts >= 1, ">= 1"),
        ("samples_per_prompt", args.samples_per_prompt >= 2, ">= 2, a pair needs two completions"),
        ("label_noise", 0 <= args.label_noise < 0.5, "in [0, 0.5)"),
        ("epochs", args.epochs >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < problems, f"< {problems}, the {args.digits}-digit problems"),
        (
            "num_prompts",
            args.num_prompts <= problems - args.num_test,
            f"<= {problems - args.num_test}, the training prompts",
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


def sampled_pairs(policy, operands, args, rng):
    """K samples per prompt from the policy, gold-scored; returns (the preference pairs, all samples
    as a flat (prompt + completion) token batch with their gold rewards)."""
    device = next(policy.parameters()).device  # batches go where the model is
    K, C = args.samples_per_prompt, tasks.completion_len(args.digits)
    prompts = tasks.encode_prompts(operands, args.digits)
    with torch.no_grad():
        samples = (
            sample(policy, torch.as_tensor(prompts, device=device).repeat_interleave(K, dim=0), C, 1.0)
            .cpu()
            .numpy()
        )
    gold = tasks.verify(np.repeat(operands, K, axis=0), samples, args.digits)
    graded = tasks.graded_score(np.repeat(operands, K, axis=0), samples, args.digits)
    pairs = tasks.build_preference_pairs(
        prompts, samples.reshape(-1, K, C), graded.reshape(-1, K), args.label_noise, rng
    )
    return pairs, (np.concatenate([prompts.repeat(K, axis=0), samples], axis=1), samples, gold)


def last_index(prompt_len, completions):
    """Position of each completion's last token (its <eos>) in the prompt + completion sequence."""
    return prompt_len + tasks.completion_mask(completions).sum(-1).astype(np.int64) - 1


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: the SFT policy, run directory, seeding
    torch.set_num_threads(1)  # a 0.4M-parameter model: thread hand-offs cost more than they save
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")
    policy, sft_path = load_or_train_sft(args)
    # Sampling and every update run on the device; the task's numpy bookkeeping stays on the host.
    policy = policy.to(device)
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

    # ---- 2. Preference data: K samples of the SFT policy per prompt, gold-scored, noisy labels
    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    P = tasks.prompt_len(args.digits)
    operands = train_pairs[rng.choice(len(train_pairs), args.num_prompts, replace=False)]
    data, _ = sampled_pairs(policy, operands, args, rng)
    test_data, (test_tokens, test_completions, test_gold) = sampled_pairs(policy, test_pairs, args, rng)

    def pair_batch(d, idx):
        """(chosen tokens, chosen last index, rejected tokens, rejected last index) for pairs idx."""
        out = []
        for k in ("chosen", "rejected"):
            out += [
                torch.as_tensor(np.concatenate([d["prompts"][idx], d[k][idx]], axis=1), device=device),
                torch.as_tensor(last_index(P, d[k][idx]), device=device),
            ]
        return out

    # ---- 3. Reward model: the SFT transformer plus a zero-initialised scalar head
    model = RewardModel(policy).to(device)  # the head joins the transformer on the device
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    test_idx = np.arange(len(test_data["chosen"]))
    test_batch = pair_batch(test_data, test_idx)
    # Held-out pairwise accuracy against the *gold* preference: flip back the noisy labels.
    gold_sign = torch.as_tensor(2.0 * test_data["gold_correct"] - 1.0, dtype=torch.float32, device=device)

    def evaluate():
        with torch.no_grad():
            c, ci, r, ri = test_batch
            margin = (model(c, ci) - model(r, ri)) * gold_sign
            scores = (
                model(
                    torch.as_tensor(test_tokens, device=device),
                    torch.as_tensor(last_index(P, test_completions), device=device),
                )
                .cpu()
                .numpy()
            )
        corr = (
            float(np.corrcoef(scores, test_gold)[0, 1]) if scores.std() > 0 and test_gold.std() > 0 else 0.0
        )
        return float((margin > 0).float().mean()), corr

    # ---- 4. Training: Bradley-Terry steps over the pairs, held-out evaluations
    num_pairs = len(data["chosen"])
    steps_per_epoch = -(-num_pairs // args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    accuracy_curve, step, pairs_seen, last_print = [], 0, 0, 0.0
    start_time = time.time()
    for epoch in range(args.epochs):
        perm = rng.permutation(num_pairs)
        for start in range(0, num_pairs, args.batch_size):
            step += 1
            c, ci, r, ri = pair_batch(data, perm[start : start + args.batch_size])
            loss, train_acc = bradley_terry_loss(model(c, ci), model(r, ri))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            pairs_seen += len(c)

            sps = int(pairs_seen / (time.time() - start_time))
            writer.add_scalar("losses/bt_loss", loss.item(), step)
            writer.add_scalar("charts/train_pair_accuracy", train_acc.item(), step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == total_steps:
                test_acc, corr = evaluate()
                accuracy_curve.append((step, test_acc))
                writer.add_scalar("charts/test_pair_accuracy", test_acc, step)
                writer.add_scalar("charts/gold_proxy_correlation", corr, step)
            if args.progress and (time.time() - last_print > 0.5 or step == total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{total_steps}  loss {loss.item():.4f}  held-out pair acc "
                    f"{accuracy_curve[-1][1] if accuracy_curve else float('nan'):.3f}  pairs/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)

    # ---- 5. Summary: the final evaluation and the saved reward model
    wall_time = time.time() - start_time
    test_acc, corr = evaluate()
    model_path = args.save_path or default_save_path(args)
    save_reward_model(model, model_path)
    writer.close()
    return {
        "accuracy_curve": accuracy_curve,
        "test_pair_accuracy": test_acc,
        "gold_proxy_correlation": corr,
        "num_pairs": num_pairs,
        "num_test_pairs": len(test_idx),
        "sps": pairs_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "model_path": model_path,
        "losses": {"bt_loss": loss.item()},
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
