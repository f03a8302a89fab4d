"""DAPO: decoupled clip and dynamic sampling policy optimisation -- the PyTorch twin.

GRPO with the paper's four changes, each behind its own flag: clip-higher (eps_low 0.2 < eps_high
0.28), dynamic sampling (only groups with both right and wrong answers), a token-level loss, and
overlong reward shaping; no KL term. Starts from the SFT checkpoint (llm/sft_torch.py), trained
first when it is missing.
Papers: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
        arXiv:2503.14476; Shao et al. 2024, "DeepSeekMath", arXiv:2402.03300 (GRPO).
Twin:   llm/dapo_jax.py (`diff llm/dapo_torch.py llm/dapo_jax.py`: only the framework).
Docs:   docs/algorithms/dapo.md
Run:    python llm/dapo_torch.py --seed 1
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
from tinylm_torch import load_checkpoint, sample, sequence_logps, token_logps


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
    total_steps: int = 30
    """DAPO steps (sample until the batch is full, score, update)"""
    prompts_per_step: int = 64
    """groups per training batch (with dynamic sampling: informative groups)"""
    group_size: int = 8
    """completions sampled per prompt (G >= 2)"""
    temperature: float = 1.0
    """sampling temperature; the old and reference log-probs use the same one"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    warmup_steps: int = 10
    """steps of linear learning-rate warm-up (the rate at step s is learning_rate * min(1, s / warmup))"""
    update_epochs: int = 2
    """gradient steps on each batch of groups (the first is on-policy, ratio 1)"""
    clip_low: float = 0.2
    """eps_low: the ratio is clipped below at 1 - eps_low"""
    clip_high: float = 0.28
    """eps_high: the ratio is clipped above at 1 + eps_high (clip-higher; 0.2 gives GRPO's symmetric clip)"""
    dynamic_sampling: bool = True
    """drop groups whose completions are all correct or all wrong and resample until the batch is full"""
    max_sampling_rounds: int = 8
    """at most this many rounds of prompts_per_step prompts a step; a short batch is topped up"""
    token_level_loss: bool = True
    """batch's token-loss sum over its token count (DAPO); off: mean of per-completion means (GRPO)"""
    soft_overlong: bool = True
    """add the soft overlong penalty to the reward"""
    max_completion_len: int = 6
    """L_max: tokens sampled per completion, truncated without <eos> (a well-formed answer: digits + 2)"""
    overlong_cache: int = 2
    """L_cache: the penalty falls linearly from 0 at L_max - L_cache tokens to -1 at L_max"""
    overlong_filter: bool = False
    """mask truncated completions (no <eos> within L_max) out of the loss"""
    kl_coef: float = 0.0
    """weight beta of the k3 KL penalty to the reference (SFT) policy (the paper drops it: 0)"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    eval_every: int = 5
    """steps between two greedy evaluations on the test prompts"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    sft_steps=4,
    num_test=16,
    total_steps=2,
    prompts_per_step=4,
    group_size=4,
    eval_every=1,
    max_sampling_rounds=2,
    overlong_filter=True,
    kl_coef=0.01,
)


# ----------------------------------------------------------------------------- pure math
def group_advantages(rewards, eps=1e-4):
    """(num_prompts, G) rewards -> (num_prompts, G) advantages: r minus the group mean, divided by the
    group's population std plus eps (GRPO's advantage, which DAPO keeps). A group whose completions
    all score the same gets zero advantage (no signal, no gradient)."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    return centred / (rewards.std(dim=1, unbiased=False, keepdim=True) + eps)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref) from a sample of pi: exp(d) - d - 1 with
    d = log pi_ref - log pi. Unbiased (E_pi[exp(d)] = 1) and never negative (e^d >= 1 + d)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def overlong_penalty(lengths, max_len, cache):
    """Soft overlong punishment of completion lengths (tokens up to and including <eos>; a truncated
    completion counts max_len): 0 up to max_len - cache, then (max_len - cache - length) / cache,
    which reaches -1 at max_len, and -1 beyond."""
    return torch.clamp((max_len - cache - lengths) / cache, min=-1.0, max=0.0)


def informative_groups(correct):
    """(num_prompts, G) numpy 0/1 verifier scores -> (num_prompts,) bool: True where the group is
    mixed (0 < correct < G). All-correct and all-wrong groups have zero advantage: DAPO drops them.
    numpy in both twins: it runs on the verifier's output, before any tensor is built."""
    return correct.min(axis=1) != correct.max(axis=1)


def dynamic_sample(sample_round, num_groups, max_rounds, filter_groups=True):
    """DAPO's dynamic sampling. sample_round() returns a dict of numpy arrays whose leading axis is
    the prompt, with "correct" (num_prompts, G) among them. Rounds are drawn, their uninformative
    groups set aside (when filter_groups), until num_groups informative groups are kept or max_rounds
    rounds are spent; the batch is the kept groups in sampling order, cut to num_groups. A batch still
    short at the cap is topped up with set-aside groups (zero advantage: no policy gradient), so the
    batch always has num_groups groups. Returns (batch dict, stats: rounds, prompts_sampled,
    groups_filtered, groups_topped_up)."""
    kept, set_aside, sampled, filtered = [], [], 0, 0
    for rounds in range(1, max_rounds + 1):
        groups = sample_round()
        n = len(groups["correct"])
        keep = informative_groups(groups["correct"]) if filter_groups else np.ones(n, dtype=bool)
        sampled, filtered = sampled + n, filtered + int((~keep).sum())
        kept.append({k: v[keep] for k, v in groups.items()})
        set_aside.append({k: v[~keep] for k, v in groups.items()})
        if sampled - filtered >= num_groups:
            break
    batch = {k: np.concatenate([g[k] for g in kept + set_aside])[:num_groups] for k in groups}
    return batch, {
        "rounds": rounds,
        "prompts_sampled": sampled,
        "groups_filtered": filtered,
        "groups_topped_up": max(0, num_groups - (sampled - filtered)),
    }


def aggregate_loss(per_token, mask, token_level=True):
    """(B, T) per-token losses and mask -> scalar. token_level (DAPO): sum over every completion token
    of the batch / number of those tokens, so each token weighs the same whatever its completion's
    length. Otherwise (GRPO): each completion's mean token loss, averaged over completions, so a
    token of a short completion weighs more. Rows with an empty mask (padding) count in neither."""
    if token_level:
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    lengths = mask.sum(-1)
    per_sequence = (per_token * mask).sum(-1) / lengths.clamp(min=1.0)
    return per_sequence.sum() / (lengths > 0).float().sum().clamp(min=1.0)


def dapo_loss(logp, old_logp, ref_logp, advantages, mask, clip_low, clip_high, kl_coef, token_level=True):
    """DAPO objective as a loss, on (B, T) per-token log-probs and a (B, T) completion mask;
    advantages (B,) are per completion and shared by its tokens.
        per token: -[min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) - beta * k3(pi, pi_ref)], r = pi / pi_old
    aggregated by aggregate_loss. Returns (loss, mean KL per token, fraction of tokens clipped at the
    low side (r < 1 - eps_low with A < 0), fraction clipped at the high side (r > 1 + eps_high with
    A > 0)): the tokens whose gradient the clip removes."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv)
    kl = k3_kl(logp, ref_logp)
    per_token = -(surrogate - kl_coef * kl)
    loss = aggregate_loss(per_token, mask, token_level)
    tokens = mask.sum().clamp(min=1.0)
    low = ((ratio < 1.0 - clip_low) & (adv < 0)).float()
    high = ((ratio > 1.0 + clip_high) & (adv > 0)).float()
    return loss, (kl * mask).sum() / tokens, (low * mask).sum() / tokens, (high * mask).sum() / tokens


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_torch_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def check_args(args):
    """Refuse bad flags before any run directory is written or any network is built (one-line ValueError)."""
    C = tasks.completion_len(args.digits)  # tokens of a well-formed answer: digits + 1 and <eos>
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("prompts_per_step", args.prompts_per_step >= 1, ">= 1"),
        ("group_size", args.group_size >= 2, ">= 2 (the group's baseline needs another completion)"),
        ("temperature", args.temperature > 0, "> 0"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("warmup_steps", args.warmup_steps >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("clip_low", 0 < args.clip_low < 1, "in (0, 1)"),
        ("clip_high", args.clip_high > 0, "> 0"),
        ("max_sampling_rounds", args.max_sampling_rounds >= 1, ">= 1"),
        ("max_completion_len", args.max_completion_len >= 1, ">= 1"),
        ("overlong_cache", args.overlong_cache >= 1, ">= 1"),
        ("kl_coef", args.kl_coef >= 0, ">= 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < 100**args.digits, "< 100 ** --digits, the number of problems"),
        ("max_completion_len", args.max_completion_len >= C, f">= {C}, a well-formed answer's tokens"),
        (
            "overlong_cache",
            not args.soft_overlong or args.overlong_cache <= args.max_completion_len - C,
            f"<= --max-completion-len - {C} with --soft-overlong: no penalty on a well-formed answer",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    need = tasks.prompt_len(args.digits) + args.max_completion_len
    path = args.sft_path or default_sft_path(args)
    if args.model:  # a Hugging Face model is the starting policy: no SFT checkpoint is read or trained
        hf_model.check_path(args.model, min_context=need)
    elif os.path.exists(path):
        load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=need)
    else:
        sft_torch.check_args(sft_torch.Args(digits=args.digits))
        if need > sft_torch.Args().block_size:
            raise ValueError(
                f"--max-completion-len {args.max_completion_len}: prompt + completion need {need} "
                f"positions; the SFT model's context is {sft_torch.Args().block_size}"
            )


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
    need = tasks.prompt_len(args.digits) + args.max_completion_len
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

    # ---- 1. Setup: the SFT start, seeding, the frozen reference, optimiser, the round sampler
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

    # Seeding: python, numpy (prompt draws) and torch (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    reference = copy.deepcopy(policy).requires_grad_(False)  # the frozen SFT policy of the KL term
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    P, L, G, N = (
        tasks.prompt_len(args.digits),
        args.max_completion_len,
        args.group_size,
        args.prompts_per_step,
    )
    # every sampled completion, filtered groups included: how often the length shaping fires at all
    counts = {"completions": 0, "tokens": 0, "penalised": 0, "truncated": 0}

    def sample_round():
        """N fresh training prompts, G completions each, the verifier's scores; counts what was sampled."""
        pairs = train_pairs[rng.integers(0, len(train_pairs), N)]
        prompts = torch.as_tensor(
            tasks.encode_prompts(np.repeat(pairs, G, axis=0), args.digits), device=device
        )
        completions = sample(policy, prompts, L, args.temperature).cpu().numpy()
        correct = tasks.verify(np.repeat(pairs, G, axis=0), completions, args.digits)
        lengths = tasks.completion_mask(completions).sum(-1)
        counts["completions"] += len(completions)
        counts["tokens"] += int(lengths.sum())
        counts["penalised"] += int((lengths > L - args.overlong_cache).sum())
        counts["truncated"] += int((~(completions == tasks.EOS).any(-1)).sum())
        return {"pairs": pairs, "completions": completions.reshape(N, G, L), "correct": correct.reshape(N, G)}

    with torch.no_grad():
        initial_acc = accuracy(policy, test_pairs, args.digits)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    prompts_sampled, groups_filtered, last_print = 0, 0, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        optimizer.param_groups[0]["lr"] = args.learning_rate * min(1.0, step / args.warmup_steps)
        # ---- 2. Rollout: dynamic sampling, rounds of N prompts x G completions until N informative groups
        groups, ds = dynamic_sample(
            sample_round, N, args.max_sampling_rounds if args.dynamic_sampling else 1, args.dynamic_sampling
        )
        prompts_sampled += ds["prompts_sampled"]
        groups_filtered += ds["groups_filtered"]
        pairs = np.repeat(groups["pairs"], G, axis=0)
        completions = groups["completions"].reshape(-1, L)

        # ---- 3. Advantages: shaped rewards (verifier + soft overlong penalty), standardised in the group
        comp_mask = tasks.completion_mask(completions)
        truncated = ~(completions == tasks.EOS).any(-1)
        correct = torch.as_tensor(groups["correct"].reshape(-1), device=device)
        lengths = torch.as_tensor(
            comp_mask.sum(-1), device=device
        )  # tokens up to and including <eos>; L when truncated
        penalty = (
            overlong_penalty(lengths, L, args.overlong_cache)
            if args.soft_overlong
            else torch.zeros(N * G, device=device)
        )
        rewards = correct + penalty
        advantages = group_advantages(rewards.reshape(N, G)).reshape(-1)
        if args.overlong_filter:  # overlong filtering: truncated completions do not enter the loss
            comp_mask = comp_mask * ~truncated[:, None]

        # ---- 4. Update: update_epochs clipped steps on the batch of groups
        # Inputs, labels and the mask, aligned: labels[:, t] is predicted by logits[:, t].
        full = torch.cat(
            [
                torch.as_tensor(tasks.encode_prompts(pairs, args.digits), device=device),
                torch.as_tensor(completions, device=device),
            ],
            dim=1,
        )
        inputs, labels = full[:, :-1], full[:, 1:]
        mask = torch.cat(
            [torch.zeros(len(full), P - 1, device=device), torch.as_tensor(comp_mask, device=device)], dim=1
        )
        with torch.no_grad():
            old_logp = token_logps(policy(inputs), labels, args.temperature)
            ref_logp = token_logps(reference(inputs), labels, args.temperature)

        for epoch in range(args.update_epochs):
            logits = policy(inputs)
            logp = token_logps(logits, labels, args.temperature)
            loss, kl, clip_low, clip_high = dapo_loss(
                logp,
                old_logp,
                ref_logp,
                advantages,
                mask,
                args.clip_low,
                args.clip_high,
                args.kl_coef,
                args.token_level_loss,
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            optimizer.step()
        with torch.no_grad():
            logp_all = torch.log_softmax(logits / args.temperature, dim=-1)
            entropy = (-(logp_all.exp() * logp_all).sum(-1) * mask).sum() / mask.sum().clamp(min=1.0)

        # ---- 5. Logging
        sps = int(counts["tokens"] / (time.time() - start_time))
        writer.add_scalar("reward", rewards.mean().item(), step)
        writer.add_scalar("reward_std", rewards.std(unbiased=False).item(), step)
        writer.add_scalar("accuracy", correct.mean().item(), step)
        writer.add_scalar("completions/mean_length", lengths.mean().item(), step)
        writer.add_scalar("completions/clipped_ratio", float(truncated.mean()), step)
        writer.add_scalar("overlong/penalised_fraction", (penalty < 0).float().mean().item(), step)
        writer.add_scalar("dynamic_sampling/rounds", ds["rounds"], step)
        writer.add_scalar("dynamic_sampling/prompts_sampled", ds["prompts_sampled"], step)
        writer.add_scalar("dynamic_sampling/groups_filtered", ds["groups_filtered"], step)
        writer.add_scalar("dynamic_sampling/groups_topped_up", ds["groups_topped_up"], step)
        writer.add_scalar("losses/dapo_loss", loss.item(), step)
        writer.add_scalar("kl", kl.item(), step)
        writer.add_scalar("entropy", entropy.item(), step)
        writer.add_scalar("clip_ratio/low_mean", clip_low.item(), step)
        writer.add_scalar("clip_ratio/high_mean", clip_high.item(), step)
        writer.add_scalar("clip_ratio/region_mean", (clip_low + clip_high).item(), step)
        writer.add_scalar("charts/SPS", sps, step)
        if step % args.eval_every == 0 or step == args.total_steps:
            with torch.no_grad():
                test_acc = accuracy(policy, test_pairs, args.digits)
            accuracy_curve.append((step, test_acc))
            gain_curve.append((step, test_acc - initial_acc))
            writer.add_scalar("charts/test_accuracy", test_acc, step)
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>4d}/{args.total_steps}  prompts {prompts_sampled:6d}  test acc "
                f"{accuracy_curve[-1][1]:.3f}  rounds {ds['rounds']}  tokens/s {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 6. Summary: the KL to the reference and the run's figures
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
        "sps": counts["tokens"] / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": {
            "dapo_loss": loss.item(),
            "kl": kl.item(),
            "entropy": entropy.item(),
            "clip_ratio/low_mean": clip_low.item(),
            "clip_ratio/high_mean": clip_high.item(),
        },
        "prompts_sampled": prompts_sampled,
        "groups_filtered": groups_filtered,
        "completions_sampled": counts["completions"],
        "overlong_penalised": counts["penalised"],
        "truncated": counts["truncated"],
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
