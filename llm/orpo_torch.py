"""ORPO: odds-ratio preference optimisation, SFT and preference in one loss, no reference -- the PyTorch twin.

The chosen completion's NLL plus lambda times the odds-ratio loss -log sigmoid(log odds(y_w|x) -
log odds(y_l|x)), odds = P / (1 - P) with P the length-normalised likelihood, on DPO's preference
pairs. Starts from the SFT checkpoint (llm/sft_torch.py; trained first when missing), not a base model.
Paper:  Hong, Lee and Thorne 2024, "ORPO: Monolithic Preference Optimization without Reference
        Model", arXiv:2403.07691.
Twin:   llm/orpo_jax.py (`diff llm/orpo_torch.py llm/orpo_jax.py`: only the framework).
Docs:   docs/algorithms/orpo.md
Run:    python llm/orpo_torch.py --seed 1
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
    lam: float = 0.1
    """lambda, the weight of the odds-ratio loss next to the chosen completions' NLL (TRL's beta)"""
    epochs: int = 2
    """passes over the preference pairs"""
    batch_size: int = 64
    """pairs per gradient step"""
    learning_rate: float = 1e-4
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

# The largest mean per-token log-prob log_odds accepts: P <= 1 - 1e-6, log odds <= 13.8. A float32
# softmax can put probability exactly 1 on a token, so a completion's mean log-prob can be exactly 0,
# where the odds are infinite; the clamp keeps the loss and its gradient finite there.
MAX_MEAN_LOGP = -1e-6


# ----------------------------------------------------------------------------- pure math
def log_odds(mean_logps):
    """log odds(y|x) = log P - log(1 - P), P = exp(mean_logps) the length-normalised likelihood.
    Written as mean_logps - log(-expm1(mean_logps)): the naive log(1 - exp(x)) rounds exp(x) to 1 when
    x -> 0 (in float32 already for |x| < 3e-8) and returns -inf, and loses all relative precision of
    1 - P well before that; expm1(x) = exp(x) - 1 is accurate for small |x|. TRL writes
    log1p(-exp(x)), the same value, which is as accurate as this where P is not close to 1."""
    mean_logps = mean_logps.clamp(max=MAX_MEAN_LOGP)
    return mean_logps - torch.log(-torch.expm1(mean_logps))


def orpo_loss(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, lam):
    """ORPO loss on (B,) summed completion log-probs and (B,) completion lengths (tokens up to and
    including <eos>). NLL: the SFT loss on the chosen completions, -sum(chosen_logps) / sum(lengths)
    (mean over the batch's chosen completion tokens, as llm/sft_torch.py's sft_loss). Odds-ratio loss:
    mean over pairs of -log sigmoid(log odds(y_w) - log odds(y_l)) on the mean per-token log-probs.
    Returns (loss, nll, or_loss, log_odds_ratio), all but loss detached (for logging)."""
    nll = -chosen_logps.sum() / chosen_lengths.sum()
    log_odds_ratio = log_odds(chosen_logps / chosen_lengths) - log_odds(rejected_logps / rejected_lengths)
    or_loss = -F.logsigmoid(log_odds_ratio).mean()
    loss = nll + lam * or_loss
    return loss, nll.detach(), or_loss.detach(), log_odds_ratio.detach()


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
        ("lam", args.lam >= 0, ">= 0 (0: SFT on the chosen completions alone)"),
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
    comp_mask = torch.as_tensor(tasks.completion_mask(completions.cpu().numpy()), device=device)
    return float(
        (
            pair_logps(policy, prompts, completions, comp_mask)
            - pair_logps(reference, prompts, completions, comp_mask)
        ).mean()
    )


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
    # Completion lengths |y|, tokens up to and including <eos>: the length normalisation of P(y|x).
    data["chosen_len"], data["rejected_len"] = data["chosen_mask"].sum(-1), data["rejected_mask"].sum(-1)

    # ---- 3. Reference: the SFT start, kept without gradient to measure kl_to_ref; not in the loss
    reference = copy.deepcopy(policy).requires_grad_(False)
    with torch.no_grad():
        start_chosen = pair_logps(policy, data["prompts"], data["chosen"], data["chosen_mask"])

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
            loss, nll, or_loss, log_odds_ratio = orpo_loss(
                policy_chosen, policy_rejected, data["chosen_len"][mb], data["rejected_len"][mb], args.lam
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
            pairs_seen += len(mb)

            # ---- 5. Logging, as TRL logs ORPO: rewards are lambda x the mean per-token log-probs,
            # the margin is the log-odds ratio.
            chosen_mean = (policy_chosen / data["chosen_len"][mb]).detach()
            rejected_mean = (policy_rejected / data["rejected_len"][mb]).detach()
            margin = log_odds_ratio.mean().item()
            chosen_logps_curve.append((step, chosen_mean.mean().item()))
            margin_curve.append((step, margin))
            sps = int(pairs_seen / (time.time() - start_time))
            writer.add_scalar("losses/orpo_loss", loss.item(), step)
            writer.add_scalar("losses/nll_loss", nll.item(), step)
            writer.add_scalar("losses/or_loss", or_loss.item(), step)
            writer.add_scalar("rewards/chosen", args.lam * chosen_mean.mean().item(), step)
            writer.add_scalar("rewards/rejected", args.lam * rejected_mean.mean().item(), step)
            writer.add_scalar("rewards/margins", args.lam * (chosen_mean - rejected_mean).mean().item(), step)
            writer.add_scalar("rewards/accuracies", (chosen_mean > rejected_mean).float().mean().item(), step)
            writer.add_scalar("logps/chosen", chosen_mean.mean().item(), step)
            writer.add_scalar("logps/rejected", rejected_mean.mean().item(), step)
            writer.add_scalar("log_odds_ratio", margin, step)
            writer.add_scalar("log_odds_chosen", log_odds(chosen_mean).mean().item(), step)
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
                    f"\rstep {step:>4d}/{total_steps}  loss {loss.item():.4f}  log-odds ratio {margin:.3f}  "
                    f"test acc {accuracy_curve[-1][1]:.3f}  pairs/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 6. Summary: the change on the pair set, the KL to the reference, the run's figures
    if args.progress:
        print(file=sys.stderr)

    # Unlike DPO, the NLL term keeps the chosen completions likely: their mean log-prob should rise.
    with torch.no_grad():
        final_chosen = pair_logps(policy, data["prompts"], data["chosen"], data["chosen_mask"])
    chosen_change = ((final_chosen - start_chosen) / data["chosen_len"]).mean().item()

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
        "kl_to_ref": kl_to_ref,
        "sps": pairs_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {
            "orpo_loss": loss.item(),
            "nll_loss": nll.item(),
            "or_loss": or_loss.item(),
            "log_odds_ratio": margin,
        },
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
