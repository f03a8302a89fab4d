"""KTO: Kahneman-Tversky optimisation on unpaired desirable / undesirable completions -- the JAX twin.

SFT samples (llm/sft_jax.py), each labelled desirable or not by the verifier (with label noise),
train the policy on lambda_D (1 - sigmoid(beta (r - z))) or lambda_U (1 - sigmoid(beta (z - r))),
r = log pi - log pi_ref, z a detached batch estimate of KL(pi || pi_ref) from mismatched pairs.
Paper:  Ethayarajh et al. 2024, "KTO: Model Alignment as Prospect Theoretic Optimization",
        arXiv:2402.01306.
Twin:   llm/kto_torch.py (`diff llm/kto_torch.py llm/kto_jax.py` shows only the framework).
Docs:   docs/algorithms/kto.md
Run:    python llm/kto_jax.py --seed 1
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
    """local Hugging Face causal LM folder (local files only), the start instead of --sft-path"""
    digits: int = 2
    """digits of each operand"""
    num_test: int = 500
    """held-out test prompts (a fixed split, disjoint from the training prompts)"""
    sft_path: str = ""
    """SFT checkpoint (.npz); empty: log_dir/sft_<framework>_<digits>d_<sft_steps>steps_seed<seed>.npz"""
    sft_steps: int = 1500
    """steps of the SFT run made when the checkpoint is missing"""
    num_prompts: int = 2000
    """training prompts whose SFT samples become the unpaired examples"""
    samples_per_prompt: int = 2
    """completions sampled per prompt (temperature 1); each one is an example of its own"""
    label_noise: float = 0.1
    """probability that a completion's desirable / undesirable label is flipped"""
    beta: float = 1.0
    """KTO temperature beta: the scale of the implied reward inside the sigmoid (paper: 0.1)"""
    desirable_weight: float = 1.0
    """lambda_D, the weight of the desirable examples' loss"""
    undesirable_weight: float = 1.5
    """lambda_U, the weight of the undesirable examples' loss (TRL: 1.0; why 1.5: docs/algorithms/kto.md)"""
    epochs: int = 1
    """passes over the examples"""
    batch_size: int = 64
    """examples per gradient step (also the mismatched pairs of the KL estimate)"""
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


# ----------------------------------------------------------------------------- pure math
def kto_loss(
    policy_logps,
    ref_logps,
    policy_kl_logps,
    ref_kl_logps,
    desirable,
    beta,
    desirable_weight,
    undesirable_weight,
):
    """KTO loss on (B,) sequence log-probs. desirable: (B,) 1.0 / 0.0 labels. policy_kl_logps and
    ref_kl_logps: the same policy and reference on mismatched pairs (another prompt's completion).
    z = max(0, mean(policy_kl_logps - ref_kl_logps)), detached: a reference point, not a target.
    Loss: mean over the batch of lambda_D (1 - sigmoid(beta (r - z))) for desirable and
    lambda_U (1 - sigmoid(beta (z - r))) for undesirable examples, r = log pi - log pi_ref.
    Returns (loss, rewards, z), rewards = beta * r of each example, detached (for logging)."""
    z = jnp.maximum(jax.lax.stop_gradient((policy_kl_logps - ref_kl_logps).mean()), 0.0)
    logratios = policy_logps - ref_logps
    desirable_losses = desirable_weight * (1.0 - jax.nn.sigmoid(beta * (logratios - z)))
    undesirable_losses = undesirable_weight * (1.0 - jax.nn.sigmoid(beta * (z - logratios)))
    loss = jnp.where(desirable > 0.5, desirable_losses, undesirable_losses).mean()
    return loss, jax.lax.stop_gradient(beta * logratios), z


def masked_mean(x, mask):
    """Mean of x where mask is 1; 0.0 when the mask is empty (a batch with no example of one label)."""
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_jax_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    rules = [  # (field, holds, the rule in words): single-field ranges first, then relations
        ("seed", args.seed >= 0, ">= 0"),
        ("digits", args.digits >= 1, ">= 1"),
        ("num_test", args.num_test >= 1, ">= 1"),
        ("sft_steps", args.sft_steps >= 1, ">= 1"),
        ("num_prompts", args.num_prompts >= 1, ">= 1"),
        ("samples_per_prompt", args.samples_per_prompt >= 1, ">= 1"),
        ("label_noise", 0 <= args.label_noise < 0.5, "in [0, 0.5)"),
        ("beta", args.beta > 0, "> 0"),
        ("desirable_weight", args.desirable_weight > 0, "> 0"),
        ("undesirable_weight", args.undesirable_weight > 0, "> 0"),
        ("epochs", args.epochs >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 2, ">= 2, the KL estimate needs mismatched pairs"),
        ("learning_rate", args.learning_rate > 0, "> 0"),
        ("max_grad_norm", args.max_grad_norm > 0, "> 0"),
        ("eval_every", args.eval_every >= 1, ">= 1"),
        ("num_test", args.num_test < problems, f"< {problems}, the {args.digits}-digit problems"),
        (
            "num_prompts",
            args.num_prompts <= problems - args.num_test,
            f"<= {problems - args.num_test}, the training prompts",
        ),
        (
            "num_prompts",
            args.num_prompts * args.samples_per_prompt >= 2,
            f">= 2 with --samples-per-prompt {args.samples_per_prompt}: the KL estimate needs 2 examples",
        ),
    ]
    for name, holds, rule in rules:
        if not holds:
            raise ValueError(f"--{name.replace('_', '-')} must be {rule} (got {getattr(args, name)})")
    if args.model:
        raise ValueError(
            f"--model {args.model}: a Hugging Face model runs in the PyTorch twin only "
            "(llm/kto_torch.py; docs/algorithms/llm.md, 'Real models'): transformers 5 removed its "
            "Flax models (FlaxAutoModelForCausalLM), so there is no Flax version of an arbitrary "
            "checkpoint to load"
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


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: SFT start, run directory, seeding
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

    # ---- 2. Unpaired data: K samples of the SFT policy per prompt, each labelled by the verifier
    operands = train_pairs[rng.choice(len(train_pairs), args.num_prompts, replace=False)]
    prompts = np.repeat(tasks.encode_prompts(operands, args.digits), K, axis=0)
    samples, key = sample(model, params, jnp.asarray(prompts), key, C, 1.0)
    samples = np.asarray(samples)
    correct = tasks.verify(np.repeat(operands, K, axis=0), samples, args.digits)
    flip = rng.random(len(correct)) < args.label_noise
    desirable = np.where(flip, 1.0 - correct, correct).astype(np.float32)
    data = {
        "prompts": prompts,
        "completions": samples,
        "mask": tasks.completion_mask(samples),
        "desirable": desirable,
    }
    data = {k: jnp.asarray(v) for k, v in data.items()}
    num_examples = len(desirable)
    num_desirable = int(desirable.sum())
    # The paper's guidance: lambda_D n_D / (lambda_U n_U) in [1, 4/3] (docs/algorithms/kto.md).
    weight_ratio = (
        args.desirable_weight
        * num_desirable
        / max(args.undesirable_weight * (num_examples - num_desirable), 1e-8)
    )
    if not 1.0 <= weight_ratio <= 4.0 / 3.0:
        print(
            f"note: lambda_D n_D / (lambda_U n_U) = {args.desirable_weight} x {num_desirable} / "
            f"({args.undesirable_weight} x {num_examples - num_desirable}) = {weight_ratio:.3f}, "
            "outside the paper's [1, 4/3]",
            file=sys.stderr,
        )

    # ---- 3. Reference log-probs: of the examples, once, without gradient
    logps = jax.jit(lambda params, p, c, m: pair_logps(model, params, p, c, m))
    ref_params = params  # the SFT parameters; the updates below make new pytrees and leave these alone
    ref_logps = logps(ref_params, data["prompts"], data["completions"], data["mask"])

    # ---- 4. Training: KTO steps, the reference point from each batch's mismatched pairs
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(args.learning_rate))
    opt_state = optimizer.init(params)

    def loss_fn(params, mb, policy_kl, ref_kl):
        policy_logps = pair_logps(model, params, mb["prompts"], mb["completions"], mb["mask"])
        loss, rewards, z = kto_loss(
            policy_logps,
            mb["ref_logps"],
            policy_kl,
            ref_kl,
            mb["desirable"],
            args.beta,
            args.desirable_weight,
            args.undesirable_weight,
        )
        return loss, (rewards, z, policy_logps)

    @jax.jit
    def update(params, opt_state, mb):
        # Mismatched pairs: prompt i with the completion of the batch's next example (another
        # prompt), scored by policy and reference without gradient: z only sets the reference point.
        kl_completions, kl_mask = jnp.roll(mb["completions"], -1, axis=0), jnp.roll(mb["mask"], -1, axis=0)
        policy_kl = jax.lax.stop_gradient(pair_logps(model, params, mb["prompts"], kl_completions, kl_mask))
        ref_kl = pair_logps(model, ref_params, mb["prompts"], kl_completions, kl_mask)
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb, policy_kl, ref_kl)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, aux

    initial_acc, key = accuracy(model, params, test_pairs, args.digits, key)
    accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
    writer.add_scalar("charts/test_accuracy", initial_acc, 0)
    # Batch starts; a lone last example is dropped (it has no mismatched partner for the KL estimate).
    starts = [s for s in range(0, num_examples, args.batch_size) if num_examples - s >= 2]
    steps_per_epoch = len(starts)
    total_steps = args.epochs * steps_per_epoch
    step, examples_seen, last_print = 0, 0, 0.0
    start_time = time.time()
    for epoch in range(args.epochs):
        perm = rng.permutation(num_examples)
        for start in starts:
            step += 1
            mb = perm[start : start + args.batch_size]
            batch = {k: v[mb] for k, v in data.items()} | {"ref_logps": ref_logps[mb]}
            params, opt_state, loss, aux = update(params, opt_state, batch)
            rewards, z, policy_logps = aux
            examples_seen += len(mb)

            d = batch["desirable"]
            chosen, rejected = float(masked_mean(rewards, d)), float(masked_mean(rewards, 1.0 - d))
            sps = int(examples_seen / (time.time() - start_time))
            writer.add_scalar("losses/kto_loss", float(loss), step)
            writer.add_scalar("rewards/chosen", chosen, step)
            writer.add_scalar("rewards/rejected", rejected, step)
            writer.add_scalar("rewards/margins", chosen - rejected, step)
            writer.add_scalar("logps/chosen", float(masked_mean(policy_logps, d)), step)
            writer.add_scalar("logps/rejected", float(masked_mean(policy_logps, 1.0 - d)), step)
            writer.add_scalar("kl", float(z), step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == total_steps:
                test_acc, key = accuracy(model, params, test_pairs, args.digits, key)
                accuracy_curve.append((step, test_acc))
                gain_curve.append((step, test_acc - initial_acc))
                writer.add_scalar("charts/test_accuracy", test_acc, step)
            if args.progress and (time.time() - last_print > 0.5 or step == total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{total_steps}  loss {float(loss):.4f}  kl {float(z):.3f}  "
                    f"test acc {accuracy_curve[-1][1]:.3f}  examples/s {sps:5,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)

    # ---- 5. Summary: the sequence KL to the reference on the test prompts
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
        "num_examples": num_examples,
        "desirable_fraction": num_desirable / num_examples,
        "label_accuracy": float((desirable == correct).mean()),
        "weight_ratio": weight_ratio,
        "kl_to_ref": kl_to_ref,
        "sps": examples_seen / wall_time,
        "wall_time": wall_time,
        "global_step": step,
        "run_dir": run_dir,
        "losses": {
            "kto_loss": float(loss),
            "kl": float(z),
            "rewards_chosen": chosen,
            "rewards_rejected": rejected,
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
