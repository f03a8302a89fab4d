"""RLHF with PPO: optimise a learned reward model's score under a KL penalty -- the JAX twin.

The policy (from llm/sft_jax.py) is rewarded per token by -beta (log pi - log pi_ref), plus the
normalised score of the reward model (llm/reward_model_jax.py) at <eos>; a critic initialised from
the reward model gives GAE advantages for minibatch PPO. beta is fixed or adapted (--adaptive-kl).
Papers: Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences", arXiv:1909.08593;
        Ouyang et al. 2022, "Training language models to follow instructions with human feedback",
        arXiv:2203.02155.
Twin:   llm/ppo_rlhf_torch.py (`diff llm/ppo_rlhf_{torch,jax}.py` shows only the framework).
Docs:   docs/algorithms/ppo_rlhf.md
Run:    python llm/ppo_rlhf_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from tensorboardX import SummaryWriter

import reward_model_jax
import sft_jax
import tasks
from tinylm_jax import TinyLM, load_checkpoint, sample, sequence_logps, token_logps


@dataclass
class Args:
    seed: int = 1
    """seed of python, numpy and the framework (also of the SFT and reward-model runs trained first)"""
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
    rm_path: str = ""
    """reward-model checkpoint (.npz; a folder with --model); empty: a default in --log-dir, trained first"""
    rm_prompts: int = 8000
    """training prompts of the reward-model run made when the checkpoint is missing (fewer: a weaker proxy)"""
    rm_epochs: int = 4
    """epochs of the reward-model run made when the checkpoint is missing (fewer: a weaker proxy)"""
    total_steps: int = 20
    """PPO iterations (sample a rollout batch, score it, several epochs of minibatch updates)"""
    prompts_per_step: int = 256
    """training prompts per rollout batch, one completion each"""
    temperature: float = 1.0
    """sampling temperature; the old, reference and new log-probs use the same one"""
    learning_rate: float = 3e-5
    """Adam learning rate of the policy and of the critic"""
    warmup_steps: int = 5
    """linear learning-rate warm-up over the first PPO iterations"""
    update_epochs: int = 4
    """passes over each rollout batch"""
    num_minibatches: int = 4
    """minibatches per pass"""
    clip_coef: float = 0.2
    """clipping coefficient epsilon of the per-token ratio"""
    vf_clip_coef: float = 0.2
    """clipping range of the value prediction around the rollout's values"""
    gamma: float = 1.0
    """discount over completion tokens (1: the episode is one completion)"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    kl_coef: float = 0.5
    """weight beta of the per-token KL penalty, its start value with --adaptive-kl (InstructGPT: 0.02)"""
    adaptive_kl: bool = False
    """adapt beta toward target_kl (Ziegler et al. 2019) instead of keeping it fixed"""
    target_kl: float = 1.0
    """target sequence KL(pi || pi_SFT) in nats of the adaptive controller (TRL's port: 6)"""
    kl_horizon: int = 10000
    """horizon (in completions) of the adaptive controller"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip (policy and critic each)"""
    eval_every: int = 5
    """steps between two evaluations on the test prompts (greedy accuracy; proxy, gold and KL of samples)"""
    log_dir: str = "runs"
    """parent folder of the TensorBoard run directory"""
    progress: bool = True
    """show a live progress line on the terminal"""


# Smallest run that exercises every code path; tests/smoke uses it.
SMOKE_ARGS = dict(
    sft_steps=4,
    rm_prompts=32,
    rm_epochs=1,
    num_test=16,
    total_steps=2,
    prompts_per_step=8,
    update_epochs=2,
    num_minibatches=2,
    adaptive_kl=True,
    eval_every=1,
)


# ----------------------------------------------------------------------------- pure math
def per_token_rewards(logp, ref_logp, scores, mask, kl_coef):
    """(B, T) completion-token log-probs of the sampling and reference policies, (B,) reward-model
    scores and the (B, T) completion mask -> (B, T) rewards and (B, T) per-token KL estimates.
        r_t = -beta (log pi - log pi_ref)_t on every completion token, + score at the last one (<eos>)
    Both are zero after <eos>: padding earns nothing. The KL term is the plain log-ratio (k1) of the
    sampled token: its sum over a completion is the unbiased estimate of the sequence KL."""
    kl = (logp - ref_logp) * mask
    last = mask.sum(-1).astype(jnp.int32) - 1  # position of <eos> (or of the last token when there is none)
    at_last = (jnp.arange(mask.shape[1])[None, :] == last[:, None]).astype(jnp.float32)
    return -kl_coef * kl + at_last * scores[:, None], kl


def compute_gae(rewards, values, mask, gamma, lam):
    """Generalised advantage estimates over the completion tokens. (B, T) rewards, values V(s_t) (the
    state before token t is emitted) and completion mask -> (advantages, returns = advantages +
    values). The value after the last completion token is 0 (the episode ends at <eos>), so
        delta_t = r_t + gamma V(s_{t+1}) m_{t+1} - V(s_t),   A_t = delta_t + gamma lam m_{t+1} A_{t+1}.
    Advantages after <eos> are zero."""
    B, T = rewards.shape
    zeros = jnp.zeros((B, 1))
    next_mask = jnp.concatenate([mask[:, 1:], zeros], axis=1)
    next_values = jnp.concatenate([values[:, 1:], zeros], axis=1) * next_mask
    deltas = rewards + gamma * next_values - values
    last, out = jnp.zeros(B), []
    for t in reversed(range(T)):
        last = deltas[:, t] + gamma * lam * next_mask[:, t] * last
        out.append(last)
    advantages = jnp.stack(out[::-1], axis=1) * mask
    return advantages, advantages + values


def whiten_masked(x, mask, eps=1e-8):
    """Advantage whitening over the batch: (x - mean) / sqrt(var + eps) with the mean and the
    (population) variance taken over the masked-in tokens only; zero outside the mask."""
    n = mask.sum()
    mean = (x * mask).sum() / n
    var = (((x - mean) * mask) ** 2).sum() / n
    return (x - mean) * jax.lax.rsqrt(var + eps) * mask


def ppo_policy_loss(logp, old_logp, advantages, mask, clip_coef):
    """PPO's clipped surrogate per token, as a loss averaged over the batch's completion tokens:
        -masked_mean(min(r A, clip(r, 1 - eps, 1 + eps) A)),  r = pi / pi_old.
    Returns (loss, fraction of tokens whose ratio was clipped, approximate KL(pi_old || pi) per token)."""
    ratio = jnp.exp(logp - old_logp)
    surrogate = jnp.minimum(
        ratio * advantages, jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    )
    n = mask.sum()
    clipped = (jnp.abs(ratio - 1.0) > clip_coef).astype(jnp.float32)
    approx_kl = (((ratio - 1.0) - (logp - old_logp)) * mask).sum() / n
    return -(surrogate * mask).sum() / n, (clipped * mask).sum() / n, approx_kl


def clipped_value_loss(values, old_values, returns, mask, clip_coef):
    """0.5 masked_mean(max((V - R)^2, (V_clip - R)^2)), V_clip = V_old + clip(V - V_old, -c, c): the
    pessimistic value loss of PPO. Returns (loss, fraction of tokens where the clipped error was larger)."""
    values_clipped = old_values + jnp.clip(values - old_values, -clip_coef, clip_coef)
    unclipped, clipped = (values - returns) ** 2, (values_clipped - returns) ** 2
    n = mask.sum()
    return 0.5 * (jnp.maximum(unclipped, clipped) * mask).sum() / n, (
        (clipped > unclipped).astype(jnp.float32) * mask
    ).sum() / n


def adaptive_kl_update(kl_coef, kl, target, horizon, n_steps):
    """Ziegler et al.'s proportional controller: e = clip(KL / target - 1, -0.2, 0.2),
    beta <- beta (1 + e n_steps / horizon), n_steps the completions since the last update."""
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return kl_coef * (1.0 + error * n_steps / horizon)


# ----------------------------------------------------------------------------- networks
class Critic(nn.Module):
    """The value network: the reward model's transformer and scalar head, applied at every position
    (V(s_t) is read on the hidden state of the token before completion token t). Initialised from
    the reward model (InstructGPT); trained apart from the policy, which it shares nothing with.
    params = {"params": {"lm": ..., "head": ...}}: the reward model's own pytree."""

    config: dict

    @nn.compact
    def __call__(self, tokens):
        h = TinyLM(**self.config, name="lm").features(tokens)
        return nn.Dense(1, name="head")(h).squeeze(-1)


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_jax_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def rm_args(args):
    """The reward-model run this PPO run reads (or makes, when its checkpoint is missing). With --model
    it is a reward model on the same Hugging Face model (a folder; reward_model_jax.default_save_path)."""
    return reward_model_jax.Args(
        seed=args.seed,
        cuda=args.cuda,
        model=args.model,
        digits=args.digits,
        num_test=args.num_test,
        sft_path=args.sft_path or default_sft_path(args),
        sft_steps=args.sft_steps,
        num_prompts=args.rm_prompts,
        epochs=args.rm_epochs,
        save_path=args.rm_path,
        log_dir=args.log_dir,
        progress=args.progress,
    )


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("rm_prompts", args.rm_prompts >= 1, ">= 1"),
        ("rm_epochs", args.rm_epochs >= 1, ">= 1"),
        ("total_steps", args.total_steps >= 1, ">= 1"),
        ("prompts_per_step", args.prompts_per_step >= 1, ">= 1"),
        ("temperature", args.temperature > 0, "> 0"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("warmup_steps", args.warmup_steps >= 1, ">= 1"),
        ("update_epochs", args.update_epochs >= 1, ">= 1"),
        ("num_minibatches", args.num_minibatches >= 1, ">= 1"),
        ("clip_coef", args.clip_coef > 0, "> 0"),
        ("vf_clip_coef", args.vf_clip_coef > 0, "> 0"),
        ("gamma", 0 <= args.gamma <= 1, "in [0, 1]"),
        ("gae_lambda", 0 <= args.gae_lambda <= 1, "in [0, 1]"),
        ("kl_coef", args.kl_coef >= 0, ">= 0"),
        ("target_kl", args.target_kl > 0, "> 0"),
        ("kl_horizon", args.kl_horizon >= 1, ">= 1"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < problems, f"< {problems}, the {args.digits}-digit problems"),
        (
            "rm_prompts",
            args.rm_prompts <= problems - args.num_test,
            f"<= {problems - args.num_test}, the training prompts",
        ),
        (
            "num_minibatches",
            args.num_minibatches >= 1 and args.prompts_per_step % args.num_minibatches == 0,
            f"a divisor of --prompts-per-step = {args.prompts_per_step}",
        ),
        (
            "kl_coef",
            args.kl_coef > 0 or not args.adaptive_kl,
            "> 0 with --adaptive-kl (the controller scales it)",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.model:
        raise ValueError(
            f"--model {args.model}: a Hugging Face model runs in the PyTorch twin only "
            "(llm/ppo_rlhf_torch.py; docs/algorithms/llm.md, 'Real models'): transformers 5 removed its "
            "Flax models (FlaxAutoModelForCausalLM), so there is no Flax version of an arbitrary "
            "checkpoint to load"
        )
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    path = args.sft_path or default_sft_path(args)
    if os.path.exists(path):
        load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=need)
    else:
        sft_jax.check_args(sft_jax.Args(digits=args.digits))
    rm_path = args.rm_path or reward_model_jax.default_save_path(rm_args(args))
    if os.path.exists(rm_path):
        reward_model_jax.load_reward_model(rm_path, min_context=need)
    else:
        reward_model_jax.check_args(rm_args(args))


def load_or_train_sft(args):
    path = args.sft_path or default_sft_path(args)
    if not os.path.exists(path):
        print(
            f"no SFT checkpoint at {path}: training one first (llm/sft_jax.py, {args.sft_steps} steps)",
            file=sys.stderr,
        )
        sft_jax.train(
            sft_jax.Args(
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


def load_or_train_reward_model(args):
    path = args.rm_path or reward_model_jax.default_save_path(rm_args(args))
    if not os.path.exists(path):
        print(
            f"no reward model at {path}: training one first (llm/reward_model_jax.py, {args.rm_prompts} "
            f"prompts, {args.rm_epochs} epochs)",
            file=sys.stderr,
        )
        reward_model_jax.train(rm_args(args))
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    return reward_model_jax.load_reward_model(path, min_context=need), path


def accuracy(model, params, pairs, digits, key, temperature=0.0):
    """Mean gold reward of the model's completions of the given operand pairs (greedy by default)."""
    completions, key = sample(
        model,
        params,
        jnp.asarray(tasks.encode_prompts(pairs, digits)),
        key,
        tasks.completion_len(digits),
        temperature,
    )
    return float(tasks.verify(pairs, np.asarray(completions), digits).mean()), key


def kl_to_reference(model, params, ref_params, pairs, digits, key):
    """Sequence-level KL(pi || pi_ref) in nats on the given prompts, by Monte Carlo: one completion per
    prompt sampled from the policy at temperature 1, the sum over its completion tokens (up to <eos>)
    of log pi - log pi_ref, averaged over the prompts. The KL column of the LLM comparison table
    (docs/algorithms/llm.md); every llm/ script measures it the same way on the test prompts."""
    prompts = jnp.asarray(tasks.encode_prompts(pairs, digits))
    completions, key = sample(model, params, prompts, key, tasks.completion_len(digits), 1.0)
    full = jnp.concatenate([prompts, completions], axis=1)
    mask = jnp.concatenate(
        [
            jnp.zeros((len(full), prompts.shape[1] - 1)),
            jnp.asarray(tasks.completion_mask(np.asarray(completions))),
        ],
        axis=1,
    )
    logp = sequence_logps(model.apply(params, full[:, :-1]), full[:, 1:], mask)
    ref_logp = sequence_logps(model.apply(ref_params, full[:, :-1]), full[:, 1:], mask)
    return float((logp - ref_logp).mean()), key


def sampled_scores(model, params, score, rm_params, pairs, digits, temperature, key):
    """One completion per prompt from the policy: (prompts, completions, full token rows, raw
    reward-model scores at each completion's <eos>); score is the reward model's jitted apply."""
    prompts = jnp.asarray(tasks.encode_prompts(pairs, digits))
    completions, key = sample(model, params, prompts, key, tasks.completion_len(digits), temperature)
    full = jnp.concatenate([prompts, completions], axis=1)
    last = jnp.asarray(reward_model_jax.last_index(prompts.shape[1], np.asarray(completions)))
    return (prompts, completions, full, score(rm_params, full, last)), key


@partial(jax.jit, static_argnames="model")
def sequence_kl(model, params, ref_params, full, mask):
    """Per sequence: sum over its completion tokens of log pi - log pi_ref (mask over full[:, 1:])."""
    return sequence_logps(model.apply(params, full[:, :-1]), full[:, 1:], mask) - sequence_logps(
        model.apply(ref_params, full[:, :-1]), full[:, 1:], mask
    )


def proxy_and_gold(model, params, ref_params, score, rm_params, score_stats, pairs, digits, key):
    """On one temperature-1 sample per test prompt: the mean normalised proxy score, the mean gold
    reward (verifier) and the sequence KL(pi || pi_ref): the three axes of the over-optimisation plot."""
    (prompts, completions, full, scores), key = sampled_scores(
        model, params, score, rm_params, pairs, digits, 1.0, key
    )
    mask = jnp.concatenate(
        [
            jnp.zeros((len(full), prompts.shape[1] - 1)),
            jnp.asarray(tasks.completion_mask(np.asarray(completions))),
        ],
        axis=1,
    )
    kl = sequence_kl(model, params, ref_params, full, mask)
    gold = tasks.verify(pairs, np.asarray(completions), digits)
    return (
        float(((scores - score_stats[0]) / score_stats[1]).mean()),
        float(gold.mean()),
        float(kl.mean()),
    ), key


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: SFT policy, reward model, run directory, seeding, reference, critic, optimisers
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    (model, params), sft_path = load_or_train_sft(args)
    (rm, rm_params), rm_path = load_or_train_reward_model(args)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy (prompt draws, minibatches) and jax (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)

    ref_params = params  # the frozen SFT policy of the KL term (arrays are immutable: no copy needed)
    score = jax.jit(rm.apply)  # the frozen proxy
    critic = Critic(rm.config)
    critic_params = rm_params  # starts as the reward model; the proxy's own rm_params are never updated
    optimizer = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.adam(
            lambda count: (
                args.learning_rate
                * jnp.minimum(
                    1.0, (count // (args.update_epochs * args.num_minibatches) + 1) / args.warmup_steps
                )
            )
        ),
    )
    opt_state, critic_opt_state = optimizer.init(params), optimizer.init(critic_params)
    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    P, B = tasks.prompt_len(args.digits), args.prompts_per_step
    mb_size = B // args.num_minibatches

    @jax.jit
    def rollout_stats(params, critic_params, inputs, labels):
        """Old and reference log-probs and the critic's values on the completion positions."""
        old_logp = token_logps(model.apply(params, inputs), labels, args.temperature)[:, P - 1 :]
        ref_logp = token_logps(model.apply(ref_params, inputs), labels, args.temperature)[:, P - 1 :]
        return old_logp, ref_logp, critic.apply(critic_params, inputs)[:, P - 1 :]

    def loss_fn(both, mb):
        params, critic_params = both
        logits = model.apply(params, mb["inputs"])[:, P - 1 :]
        logp = token_logps(logits, mb["labels"][:, P - 1 :], args.temperature)
        pg_loss, clip_ratio, approx_kl = ppo_policy_loss(
            logp, mb["old_logp"], mb["advantages"], mb["mask"], args.clip_coef
        )
        v_loss, v_clip_ratio = clipped_value_loss(
            critic.apply(critic_params, mb["inputs"])[:, P - 1 :],
            mb["old_values"],
            mb["returns"],
            mb["mask"],
            args.vf_clip_coef,
        )
        logp_all = jax.nn.log_softmax(logits / args.temperature, axis=-1)
        entropy = (-(jnp.exp(logp_all) * logp_all).sum(-1) * mb["mask"]).sum() / mb["mask"].sum()
        return pg_loss + v_loss, {
            "ppo_rlhf_loss": pg_loss,
            "value_loss": v_loss,
            "clip_ratio": clip_ratio,
            "value_clip_ratio": v_clip_ratio,
            "approx_kl": approx_kl,
            "entropy": entropy,
        }

    @jax.jit
    def update(params, critic_params, opt_state, critic_opt_state, mb):
        """One minibatch step; separate networks: each loss reaches its own weights only."""
        (grads, critic_grads), stats = jax.grad(loss_fn, has_aux=True)((params, critic_params), mb)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        critic_updates, critic_opt_state = optimizer.update(critic_grads, critic_opt_state, critic_params)
        return (
            optax.apply_updates(params, updates),
            optax.apply_updates(critic_params, critic_updates),
            opt_state,
            critic_opt_state,
            stats,
        )

    # ---- 2. Normalisation: the proxy's statistics on SFT samples, the starting evaluation
    # Reward normalisation (Ziegler et al.): the proxy score has mean 0 and std 1 on SFT samples.
    stats_pairs = train_pairs[rng.integers(0, len(train_pairs), B)]
    (_, _, _, scores), key = sampled_scores(
        model, params, score, rm_params, stats_pairs, args.digits, args.temperature, key
    )
    score_stats = (float(scores.mean()), float(scores.std(ddof=1)) + 1e-8)
    initial_acc, key = accuracy(model, params, test_pairs, args.digits, key)
    (proxy, gold, kl_seq), key = proxy_and_gold(
        model, params, ref_params, score, rm_params, score_stats, test_pairs, args.digits, key
    )
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    proxy_curve, gold_curve, kl_curve = [(0, proxy)], [(0, gold)], [(0, kl_seq)]
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    kl_coef, tokens_sampled, last_print = args.kl_coef, 0, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        # ---- 3. Rollout: one completion per prompt, scored by the reward model (the proxy)
        pairs = train_pairs[rng.integers(0, len(train_pairs), B)]
        (prompts, completions, full, raw_scores), key = sampled_scores(
            model, params, score, rm_params, pairs, args.digits, args.temperature, key
        )
        scores = (raw_scores - score_stats[0]) / score_stats[1]
        # inputs[:, P - 1:] predict the completion tokens labels[:, P - 1:] (= completions)
        inputs, labels = full[:, :-1], full[:, 1:]
        mask = jnp.asarray(tasks.completion_mask(np.asarray(completions)))
        old_logp, ref_logp, old_values = rollout_stats(params, critic_params, inputs, labels)
        rewards, kl = per_token_rewards(old_logp, ref_logp, scores, mask, kl_coef)
        advantages, returns = compute_gae(rewards, old_values, mask, args.gamma, args.gae_lambda)
        advantages = whiten_masked(advantages, mask)
        gold_rewards = tasks.verify(pairs, np.asarray(completions), args.digits)
        tokens_sampled += int(mask.sum())

        # ---- 4. Update: update_epochs passes of num_minibatches minibatches over the rollout batch
        batch = dict(
            inputs=inputs,
            labels=labels,
            mask=mask,
            old_logp=old_logp,
            old_values=old_values,
            advantages=advantages,
            returns=returns,
        )
        mb_stats = []  # every minibatch's figures, averaged for the log (TRL's *_avg)
        for epoch in range(args.update_epochs):
            perm = rng.permutation(B)
            for start in range(0, B, mb_size):
                mb = {k: v[perm[start : start + mb_size]] for k, v in batch.items()}
                params, critic_params, opt_state, critic_opt_state, stats = update(
                    params, critic_params, opt_state, critic_opt_state, mb
                )
                mb_stats.append(stats)
        pg_loss, v_loss, clip_ratio, v_clip_ratio, approx_kl, entropy = (
            jnp.stack([s[k] for s in mb_stats]).mean(0)
            for k in ("ppo_rlhf_loss", "value_loss", "clip_ratio", "value_clip_ratio", "approx_kl", "entropy")
        )

        # ---- 5. KL coefficient: fixed, or moved toward target_kl (Ziegler et al.)
        batch_kl = float(kl.sum(-1).mean())
        non_score_reward = -kl_coef * batch_kl  # the KL penalty of this rollout, at the beta it used
        if args.adaptive_kl:
            kl_coef = adaptive_kl_update(kl_coef, batch_kl, args.target_kl, args.kl_horizon, B)

        # ---- 6. Logging and evaluation
        sps = int(tokens_sampled / (time.time() - start_time))
        writer.add_scalar("objective/scores", float(scores.mean()), step)
        writer.add_scalar("objective/scores_std", float(scores.std(ddof=1)), step)
        writer.add_scalar("objective/kl", batch_kl, step)
        writer.add_scalar("objective/entropy", float(-(old_logp * mask).sum(-1).mean()), step)
        writer.add_scalar("objective/non_score_reward", non_score_reward, step)
        writer.add_scalar("objective/rlhf_reward", float(scores.mean()) + non_score_reward, step)
        writer.add_scalar("charts/gold_reward", float(gold_rewards.mean()), step)
        writer.add_scalar("completions/mean_length", float(mask.sum(-1).mean()), step)
        writer.add_scalar("charts/kl_coef", kl_coef, step)
        writer.add_scalar("loss/policy_avg", float(pg_loss), step)
        writer.add_scalar("loss/value_avg", float(v_loss), step)
        writer.add_scalar("policy/entropy_avg", float(entropy), step)
        writer.add_scalar("policy/clipfrac_avg", float(clip_ratio), step)
        writer.add_scalar("policy/approxkl_avg", float(approx_kl), step)
        writer.add_scalar("val/clipfrac_avg", float(v_clip_ratio), step)
        writer.add_scalar("charts/SPS", sps, step)
        if step % args.eval_every == 0 or step == args.total_steps:
            test_acc, key = accuracy(model, params, test_pairs, args.digits, key)
            (proxy, gold, kl_seq), key = proxy_and_gold(
                model, params, ref_params, score, rm_params, score_stats, test_pairs, args.digits, key
            )
            accuracy_curve.append((step, test_acc))
            gain_curve.append((step, test_acc - initial_acc))
            proxy_curve.append((step, proxy))
            gold_curve.append((step, gold))
            kl_curve.append((step, kl_seq))
            writer.add_scalar("charts/test_accuracy", test_acc, step)
            writer.add_scalar("charts/test_proxy_reward", proxy, step)
            writer.add_scalar("charts/test_gold_reward", gold, step)
            writer.add_scalar("charts/test_kl", kl_seq, step)
        if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
            last_print = time.time()
            print(
                f"\rstep {step:>4d}/{args.total_steps}  proxy {float(scores.mean()):+.3f}  gold "
                f"{float(gold_rewards.mean()):.3f}  test acc {accuracy_curve[-1][1]:.3f}  kl {batch_kl:.3f}  "
                f"beta {kl_coef:.4f}  tokens/s {sps:6,d}",
                end="",
                file=sys.stderr,
                flush=True,
            )
    if args.progress:
        print(file=sys.stderr)

    # ---- 7. Summary: the sequence KL to the reference, the over-optimisation figures
    wall_time = time.time() - start_time
    kl_to_ref, key = kl_to_reference(model, params, ref_params, test_pairs, args.digits, key)
    writer.close()
    final_acc = accuracy_curve[-1][1]
    return {
        "accuracy_curve": accuracy_curve,
        "accuracy_gain_curve": gain_curve,
        "initial_test_accuracy": initial_acc,
        "test_accuracy": final_acc,
        "accuracy_gain": final_acc - initial_acc,
        "kl_to_ref": kl_to_ref,
        "proxy_reward_curve": proxy_curve,
        "gold_reward_curve": gold_curve,
        "kl_curve": kl_curve,
        "proxy_reward": proxy_curve[-1][1],
        "gold_reward": gold_curve[-1][1],
        "kl_coef": kl_coef,
        # over-optimisation: how far the greedy gold accuracy fell from its best evaluation by the end
        "accuracy_drop_from_peak": max(a for _, a in accuracy_curve) - final_acc,
        "sps": tokens_sampled / wall_time,
        "wall_time": wall_time,
        "global_step": args.total_steps,
        "run_dir": run_dir,
        "losses": {
            "ppo_rlhf_loss": float(pg_loss),
            "value_loss": float(v_loss),
            "kl": batch_kl,
            "entropy": float(entropy),
            "clip_ratio": float(clip_ratio),
            "approx_kl": float(approx_kl),
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
