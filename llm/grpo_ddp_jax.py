"""GRPO, data parallel over the devices with jax.sharding, in one process -- the JAX twin.

llm/grpo_jax.py with the step's prompts and everything per completion sharded over a one-axis mesh
in whole groups, the parameters replicated; XLA all-reduces the gradient of the mean over all
completions. On the CPU, XLA_FLAGS=--xla_force_host_platform_device_count=2 gives two devices.
Paper:  Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
        Language Models", arXiv:2402.03300.
Twin:   llm/grpo_ddp_torch.py; `diff llm/grpo_jax.py llm/grpo_ddp_jax.py` shows the distribution.
Docs:   docs/algorithms/grpo_ddp.md
Run:    XLA_FLAGS=--xla_force_host_platform_device_count=2 python llm/grpo_ddp_jax.py --seed 1
"""

import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tensorboardX import SummaryWriter

import sft_jax
import tasks
from tinylm_jax import load_checkpoint, sample, sequence_logps, token_logps


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
    centred = rewards - rewards.mean(axis=1, keepdims=True)
    if not scale:
        return centred
    return centred / (rewards.std(axis=1, keepdims=True) + eps)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref) from a sample of pi: exp(d) - d - 1 with
    d = log pi_ref - log pi. Unbiased (E_pi[exp(d)] = 1) and never negative (e^d >= 1 + d)."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_coef, kl_coef):
    """GRPO objective as a loss, on (B, T) per-token log-probs and a (B, T) completion mask;
    advantages (B,) are per completion and shared by its tokens.
        per token: -[min(r A, clip(r, 1 - eps, 1 + eps) A) - beta * k3(pi, pi_ref)], r = pi / pi_old
    averaged over each completion's tokens, then over completions (the GRPO paper's aggregation).
    Returns (loss, mean KL per token, fraction of tokens whose ratio was clipped)."""
    ratio = jnp.exp(logp - old_logp)
    adv = advantages[:, None]
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * adv)
    kl = k3_kl(logp, ref_logp)
    per_token = -(surrogate - kl_coef * kl)
    lengths = jnp.maximum(mask.sum(-1), 1.0)
    loss = ((per_token * mask).sum(-1) / lengths).mean()
    clipped = (jnp.abs(ratio - 1.0) > clip_coef).astype(jnp.float32)
    return loss, (kl * mask).sum() / mask.sum(), (clipped * mask).sum() / mask.sum()


# ----------------------------------------------------------------------------- distribution
def make_optimizer(args):
    """Adam after a global-norm clip, with the linear warm-up counted in steps (update_epochs updates
    each)."""
    return optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.adam(
            lambda count: (
                args.learning_rate * jnp.minimum(1.0, (count // args.update_epochs + 1) / args.warmup_steps)
            )
        ),
    )


def grpo_batch_loss(model, args, params, batch):
    """The GRPO loss of a batch of groups and the logged statistics. On a batch sharded over the
    devices, the mean over completions (and the token sums of the statistics) are reductions across
    the devices: XLA inserts the all-reduces, and the gradient is the 1-device gradient."""
    logits = model.apply(params, batch["inputs"])
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
    logp_all = jax.nn.log_softmax(logits / args.temperature, axis=-1)
    entropy = (-(jnp.exp(logp_all) * logp_all).sum(-1) * batch["mask"]).sum() / batch["mask"].sum()
    return loss, {"grpo_loss": loss, "kl": kl, "clip_ratio": clip_ratio, "entropy": entropy}


def grpo_update(model, optimizer, args, params, opt_state, batch):
    """update_epochs gradient steps on one batch of groups, as one call to jit."""

    def epoch_step(carry, _):
        params, opt_state = carry
        grads, stats = jax.grad(partial(grpo_batch_loss, model, args), has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    (params, opt_state), stats = jax.lax.scan(
        epoch_step, (params, opt_state), None, length=args.update_epochs
    )
    return params, opt_state, jax.tree.map(lambda x: x[-1], stats)


# ----------------------------------------------------------------------------- set-up and evaluation
def default_sft_path(args):
    return os.path.join(args.log_dir, f"sft_jax_{args.digits}d_{args.sft_steps}steps_seed{args.seed}.npz")


def check_args(args):
    """Refuse bad flags before any environment or network is built (one-line ValueError)."""
    problems = 100**args.digits if args.digits >= 1 else 0  # operand pairs of the task
    workers = len(jax.devices() if args.cuda else jax.devices("cpu"))  # the devices the batch is sharded over
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
    if args.model:
        raise ValueError(
            f"--model {args.model}: a Hugging Face model runs in the PyTorch twin only "
            "(llm/grpo_ddp_torch.py; docs/algorithms/llm.md, 'Real models'): transformers 5 removed its "
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

    # ---- 1. Setup: workers, SFT start, run directory, seeding, reference, optimiser
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU.
    devices = jax.devices() if args.cuda else jax.devices("cpu")
    num_shards = len(devices)
    with jax.default_device(devices[0]):
        (model, params), sft_path = load_or_train_sft(args)
        # One mesh axis, "batch", over every device: a sharded array splits its first axis into equal
        # device blocks (of whole groups), a replicated one is whole on every device.
        mesh = Mesh(np.array(devices), ("batch",))
        sharded, replicated = (
            NamedSharding(mesh, PartitionSpec("batch")),
            NamedSharding(mesh, PartitionSpec()),
        )
        params = jax.device_put(params, replicated)
        script = os.path.basename(__file__).removesuffix(".py")
        run_dir = os.path.join(
            args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}"
        )
        writer = SummaryWriter(run_dir)  # one process: it logs alone, as the torch twin's rank 0
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n"
            + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
            + f"\n|world_size|{num_shards}|",
        )

        # Seeding: python, numpy (prompt draws) and jax (sampling). One key for the whole batch: the
        # sampling of sharded prompts draws the same numbers as unsharded (partitionable threefry).
        random.seed(args.seed)
        np.random.seed(args.seed)
        key = jax.device_put(jax.random.PRNGKey(args.seed), replicated)
        rng = np.random.default_rng(args.seed)

        ref_params = params  # the frozen SFT policy of the KL term (arrays are immutable: no copy needed)
        optimizer = make_optimizer(args)
        opt_state = optimizer.init(params)

        @jax.jit
        def logps(params, inputs, labels):
            return token_logps(model.apply(params, inputs), labels, args.temperature)

        update = jax.jit(partial(grpo_update, model, optimizer, args))
        train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
        P, C, G = tasks.prompt_len(args.digits), tasks.completion_len(args.digits), args.group_size

        initial_acc, key = accuracy(model, params, test_pairs, args.digits, key)
        accuracy_curve, gain_curve = [(0, initial_acc)], [(0, 0.0)]
        writer.add_scalar("charts/test_accuracy", initial_acc, 0)
        tokens_sampled, last_print = 0, 0.0
        start_time = time.time()
        for step in range(1, args.total_steps + 1):
            # ---- 2. Rollout: G completions per prompt, each worker for its own whole groups
            pairs = np.repeat(
                train_pairs[rng.integers(0, len(train_pairs), args.prompts_per_step)], G, axis=0
            )
            prompts = jax.device_put(tasks.encode_prompts(pairs, args.digits), sharded)
            completions, key = sample(model, params, prompts, key, C, args.temperature)
            rewards = jax.device_put(tasks.verify(pairs, np.asarray(completions), args.digits), sharded)
            advantages = group_advantages(rewards.reshape(-1, G), scale=args.scale_rewards).reshape(-1)
            comp_mask = jax.device_put(tasks.completion_mask(np.asarray(completions)), sharded)
            tokens_sampled += int(comp_mask.sum())

            # ---- 3. Log-probs: of the sampling and the reference policy
            # inputs, labels and the mask, aligned: labels[:, t] is predicted by logits[:, t]
            full = jnp.concatenate([prompts, completions], axis=1)
            inputs, labels = full[:, :-1], full[:, 1:]
            mask = jnp.concatenate([jnp.zeros((len(full), P - 1)), comp_mask], axis=1)
            old_logp = logps(params, inputs, labels)
            ref_logp = logps(ref_params, inputs, labels)

            # ---- 4. Update: the gradient averaged over the workers
            # (XLA inserts the all-reduce over the devices)
            batch = jax.device_put(
                dict(
                    inputs=inputs,
                    labels=labels,
                    mask=mask,
                    advantages=advantages,
                    old_logp=old_logp,
                    ref_logp=ref_logp,
                ),
                sharded,
            )
            params, opt_state, stats = update(params, opt_state, batch)
            loss, kl, clip_ratio, entropy = (stats[k] for k in ("grpo_loss", "kl", "clip_ratio", "entropy"))

            # ---- 5. Logging and evaluation
            group_rewards = rewards.reshape(-1, G)
            zero_std = float((group_rewards.std(axis=1) == 0).mean())
            sps = int(tokens_sampled / (time.time() - start_time))
            writer.add_scalar("reward", float(rewards.mean()), step)
            writer.add_scalar("accuracy", float((rewards == 1).mean()), step)
            writer.add_scalar("completions/mean_length", float(comp_mask.sum(-1).mean()), step)
            writer.add_scalar("frac_reward_zero_std", zero_std, step)
            writer.add_scalar("losses/grpo_loss", float(loss), step)
            writer.add_scalar("kl", float(kl), step)
            writer.add_scalar("entropy", float(entropy), step)
            writer.add_scalar("clip_ratio", float(clip_ratio), step)
            writer.add_scalar("charts/SPS", sps, step)
            if step % args.eval_every == 0 or step == args.total_steps:
                test_acc, key = accuracy(model, params, test_pairs, args.digits, key)
                accuracy_curve.append((step, test_acc))
                gain_curve.append((step, test_acc - initial_acc))
                writer.add_scalar("charts/test_accuracy", test_acc, step)
            if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>4d}/{args.total_steps}  reward {float(rewards.mean()):.3f}  "
                    f"test acc {accuracy_curve[-1][1]:.3f}  kl {float(kl):.4f}  tokens/s {sps:6,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
        if args.progress:
            print(file=sys.stderr)

        # ---- 6. Summary: the sequence KL to the reference on the test prompts
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
            "sps": tokens_sampled / wall_time,
            "wall_time": wall_time,
            "global_step": args.total_steps,
            "run_dir": run_dir,
            "losses": {
                "grpo_loss": float(loss),
                "kl": float(kl),
                "entropy": float(entropy),
                "clip_ratio": float(clip_ratio),
                "frac_reward_zero_std": zero_std,
            },
            "world_size": num_shards,
            "rank": 0,
        }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
