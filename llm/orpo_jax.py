"""ORPO: odds-ratio preference optimisation, SFT and preference in one loss, no reference -- the JAX twin.

The chosen completion's NLL plus lambda times the odds-ratio loss -log sigmoid(log odds(y_w|x) -
log odds(y_l|x)), odds = P / (1 - P) with P the length-normalised likelihood, on DPO's preference
pairs. Starts from the SFT checkpoint (llm/sft_jax.py; trained first when missing), not a base model.
Paper:  Hong, Lee and Thorne 2024, "ORPO: Monolithic Preference Optimization without Reference
        Model", arXiv:2403.07691.
Twin:   llm/orpo_torch.py (`diff llm/orpo_torch.py llm/orpo_jax.py`: only the framework).
Docs:   docs/algorithms/orpo.md
Run:    python llm/orpo_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from tensorboardX import SummaryWriter

import sft_jax
import tasks
from tinylm_jax import load_checkpoint, sample, sequence_logps


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
    mean_logps = jnp.where(
        mean_logps > MAX_MEAN_LOGP, MAX_MEAN_LOGP, mean_logps
    )  # torch's clamp: gradient 1 at the bound
    return mean_logps - jnp.log(-jnp.expm1(mean_logps))


def orpo_loss(chosen_logps, rejected_logps, chosen_lengths, rejected_lengths, lam):
    """ORPO loss on (B,) summed completion log-probs and (B,) completion lengths (tokens up to and
    including <eos>). NLL: the SFT loss on the chosen completions, -sum(chosen_logps) / sum(lengths)
    (mean over the batch's chosen completion tokens, as llm/sft_jax.py's sft_loss). Odds-ratio loss:
    mean over pairs of -log sigmoid(log odds(y_w) - log odds(y_l)) on the mean per-token log-probs.
    Returns (loss, nll, or_loss, log_odds_ratio), all but loss detached (for logging)."""
    nll = -chosen_logps.sum() / chosen_lengths.sum()
    log_odds_ratio = log_odds(chosen_logps / chosen_lengths) - log_odds(rejected_logps / rejected_lengths)
    or_loss = -jax.nn.log_sigmoid(log_odds_ratio).mean()
    loss = nll + lam * or_loss
    return (
        loss,
        jax.lax.stop_gradient(nll),
        jax.lax.stop_gradient(or_loss),
        jax.lax.stop_gradient(log_odds_ratio),
    )


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_jax_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


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
    if args.model:
        raise ValueError(
            f"--model {args.model}: a Hugging Face model runs in the PyTorch twin only (llm/orpo_torch.py; "
            "docs/algorithms/llm.md, 'Real models'): transformers 5 removed its Flax models "
            "(FlaxAutoModelForCausalLM), so there is no Flax version of an arbitrary checkpoint to load"
        )
    need = tasks.prompt_len(args.digits) + tasks.completion_len(args.digits)
    path = args.sft_path or default_sft_path(args)
    if os.path.exists(path):
        load_checkpoint(path, vocab_size=tasks.VOCAB_SIZE, min_context=need)
    else:
        sft_jax.check_args(sft_jax.Args(digits=args.digits))


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


def pair_logps(model, params, prompts, completions, comp_mask):
    """Sequence log-probs of the completions (B, C) given the prompts (B, P): completion tokens up to
    <eos> only (comp_mask, from tasks.completion_mask); labels[:, t] is predicted by logits[:, t]."""
    full = jnp.concatenate([prompts, completions], axis=1)
    mask = jnp.concatenate([jnp.zeros((len(full), prompts.shape[1] - 1)), comp_mask], axis=1)
    return sequence_logps(model.apply(params, full[:, :-1]), full[:, 1:], mask)


def kl_to_reference(model, params, ref_params, pairs, digits, key):
    """Sequence-level KL(pi || pi_ref) in nats on the given prompts, by Monte Carlo: one completion per
    prompt sampled from the policy at temperature 1, the sum over its completion tokens (up to <eos>)
    of log pi - log pi_ref, averaged over the prompts. The KL column of the LLM comparison table
    (docs/algorithms/llm.md); every llm/ script measures it the same way on the test prompts."""
    prompts = jnp.asarray(tasks.encode_prompts(pairs, digits))
    completions, key = sample(model, params, prompts, key, tasks.completion_len(digits), 1.0)
    comp_mask = jnp.asarray(tasks.completion_mask(np.asarray(completions)))
    return float(
        (
            pair_logps(model, params, prompts, completions, comp_mask)
            - pair_logps(model, ref_params, prompts, completions, comp_mask)
        ).mean()
    ), key


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: the SFT start, seeding
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    (model, params), sft_path = load_or_train_sft(args)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy (prompt draws, label noise, shuffling) and jax (sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)

    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    K, C = args.samples_per_prompt, tasks.completion_len(args.digits)

    # ---- 2. Preference data: K samples of the SFT policy per prompt, gold-scored, Bradley-Terry labels
    operands = train_pairs[rng.choice(len(train_pairs), args.num_prompts, replace=False)]
    prompts = tasks.encode_prompts(operands, args.digits)
    samples, key = sample(model, params, jnp.asarray(prompts).repeat(K, axis=0), key, C, 1.0)
    samples = np.asarray(samples)
    gold = tasks.graded_score(np.repeat(operands, K, axis=0), samples, args.digits).reshape(-1, K)
    data = tasks.build_preference_pairs(prompts, samples.reshape(-1, K, C), gold, args.label_noise, rng)
    data["chosen_mask"], data["rejected_mask"] = (
        tasks.completion_mask(data[k]) for k in ("chosen", "rejected")
    )
    data = {k: jnp.asarray(v) for k, v in data.items()}
    num_pairs = len(data["chosen"])
    # Completion lengths |y|, tokens up to and including <eos>: the length normalisation of P(y|x).
    data["chosen_len"], data["rejected_len"] = data["chosen_mask"].sum(-1), data["rejected_mask"].sum(-1)

    # ---- 3. Reference: the SFT start, kept without gradient to measure kl_to_ref; not in the loss
    logps = jax.jit(lambda params, p, c, m: pair_logps(model, params, p, c, m))
    ref_params = params  # the SFT parameters; the updates below make new pytrees and leave these alone
    start_chosen = logps(params, data["prompts"], data["chosen"], data["chosen_mask"])

    # ---- 4. Update: epochs of minibatch steps over the pairs
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(args.learning_rate))
    opt_state = optimizer.init(params)

    def loss_fn(params, mb):
        policy_chosen = pair_logps(model, params, mb["prompts"], mb["chosen"], mb["chosen_mask"])
        policy_rejected = pair_logps(model, params, mb["prompts"], mb["rejected"], mb["rejected_mask"])
        loss, nll, or_loss, log_odds_ratio = orpo_loss(
            policy_chosen, policy_rejected, mb["chosen_len"], mb["rejected_len"], args.lam
        )
        return loss, (nll, or_loss, log_odds_ratio, policy_chosen, policy_rejected)

    @jax.jit
    def update(params, opt_state, mb):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, aux

    initial_acc, key = accuracy(model, params, test_pairs, args.digits, key)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    chosen_logps_curve, margin_curve = [], []
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    steps_per_epoch = -(-num_pairs // args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    step, pairs_seen, last_print = 0, 0, 0.0
    start_time = time.time()
    for epoch in range(args.epochs):
        perm = rng.permutation(num_pairs)
        for start in range(0, num_pairs, args.batch_size):
            step += 1
            mb = perm[start : start + args.batch_size]
            batch = {k: v[mb] for k, v in data.items()}
            params, opt_state, loss, aux = update(params, opt_state, batch)
            nll, or_loss, log_odds_ratio, policy_chosen, policy_rejected = aux
            pairs_seen += len(mb)

            # ---- 5. Logging, as TRL logs ORPO: rewards are lambda x the mean per-token log-probs,
            # the margin is the log-odds ratio.
            chosen_mean = policy_chosen / batch["chosen_len"]
            rejected_mean = policy_rejected / batch["rejected_len"]
            margin = float(log_odds_ratio.mean())
            chosen_logps_curve.append((step, float(chosen_mean.mean())))
            margin_curve.append((step, margin))
            sps = int(pairs_seen / (time.time() - start_time))
            writer.add_scalar("losses/orpo_loss", float(loss), step)
            writer.add_scalar("losses/nll_loss", float(nll), step)
            writer.add_scalar("losses/or_loss", float(or_loss), step)
            writer.add_scalar("rewards/chosen", args.lam * float(chosen_mean.mean()), step)
            writer.add_scalar("rewards/rejected", args.lam * float(rejected_mean.mean()), step)
            writer.add_scalar("rewards/margins", args.lam * float((chosen_mean - rejected_mean).mean()), step)
            writer.add_scalar("rewards/accuracies", float((chosen_mean > rejected_mean).mean()), step)
            writer.add_scalar("logps/chosen", float(chosen_mean.mean()), step)
            writer.add_scalar("logps/rejected", float(rejected_mean.mean()), step)
            writer.add_scalar("log_odds_ratio", margin, step)
            writer.add_scalar("log_odds_chosen", float(log_odds(chosen_mean).mean()), step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == total_steps:
                test_acc, key = accuracy(model, params, test_pairs, args.digits, key)
                accuracy_curve.append((step, test_acc))
                gain_curve.append((step, test_acc - initial_acc))
                writer.add_scalar("charts/test_accuracy", test_acc, step)
            if args.progress and (time.time() - last_print > 0.5 or step == total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{total_steps}  loss {float(loss):.4f}  log-odds ratio {margin:.3f}  "
                    f"test acc {accuracy_curve[-1][1]:.3f}  pairs/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    # ---- 6. Summary: the change on the pair set, the KL to the reference, the run's figures
    if args.progress:
        print(file=sys.stderr)

    # Unlike DPO, the NLL term keeps the chosen completions likely: their mean log-prob should rise.
    final_chosen = logps(params, data["prompts"], data["chosen"], data["chosen_mask"])
    chosen_change = float(((final_chosen - start_chosen) / data["chosen_len"]).mean())

    wall_time = time.time() - start_time
    kl_to_ref, key = kl_to_reference(model, params, ref_params, test_pairs, args.digits, key)
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
        "pair_label_accuracy": float(data["gold_correct"].mean()),
        "chosen_logps_change": chosen_change,
        "kl_to_ref": kl_to_ref,
        "sps": pairs_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {
            "orpo_loss": float(loss),
            "nll_loss": float(nll),
            "or_loss": float(or_loss),
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
