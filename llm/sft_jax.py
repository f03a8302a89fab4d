"""Supervised fine-tuning (here: training from scratch) on imperfect demonstrations -- the JAX twin.

The base policy of the LLM track: a tiny causal transformer (llm/tinylm_jax.py) trained by
next-token cross-entropy on the completion tokens of demonstrations of multi-digit addition, from a
demonstrator that forgets carries. Every other llm/ script starts from the checkpoint it writes.
Paper:  Ouyang et al. 2022, "Training language models to follow instructions with human feedback",
        arXiv:2203.02155 (SFT as the first stage of RLHF).
Twin:   llm/sft_torch.py (`diff llm/sft_torch.py llm/sft_jax.py` shows only the framework).
Docs:   docs/algorithms/sft.md
Run:    python llm/sft_jax.py --seed 1
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

import tasks
from tinylm_jax import TinyLM, sample, save_checkpoint, sequence_logps


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
    if args.model:
        raise ValueError(
            f"--model {args.model}: a Hugging Face model runs in the PyTorch twin only "
            "(llm/sft_torch.py; docs/algorithms/llm.md, 'Real models'): transformers 5 removed its "
            "Flax models (FlaxAutoModelForCausalLM), so there is no Flax version of an arbitrary "
            "checkpoint to load"
        )


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


# ----------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    check_args(args)

    # ---- 1. Setup: run directory, seeding, model, optimiser
    # JAX puts arrays on its default backend: the GPU with jax[cuda] installed; --no-cuda pins the CPU
    device = jax.devices("cpu")[0] if not args.cuda else jax.devices()[0]
    jax.config.update("jax_default_device", device)
    script = os.path.basename(__file__).removesuffix(".py")
    run_dir = os.path.join(args.log_dir, f"addition{args.digits}__{script}__{args.seed}__{int(time.time())}")
    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items())
    )

    # Seeding: python, numpy (the demonstrations) and jax (initialisation, sampling).
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.PRNGKey(args.seed)
    rng = np.random.default_rng(args.seed)

    train_pairs, test_pairs = tasks.make_splits(args.digits, args.num_test)
    model = TinyLM(tasks.VOCAB_SIZE, args.block_size, args.d_model, args.n_layer, args.n_head)
    key, init_key = jax.random.split(key)
    params = model.init(init_key, jnp.zeros((1, args.block_size), dtype=jnp.int32))
    warmup = min(50, args.total_steps)
    lr_at = lambda step: (
        args.learning_rate
        * jnp.minimum(step / warmup, (args.total_steps - step + 1) / (args.total_steps - warmup + 1))
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.inject_hyperparams(optax.adamw)(
            learning_rate=lambda count: lr_at(count + 1), weight_decay=args.weight_decay
        ),
    )
    opt_state = optimizer.init(params)

    def loss_fn(params, tokens, mask):
        logits = model.apply(params, tokens[:, :-1])
        return sft_loss(logits, tokens[:, 1:], mask[:, 1:])

    @jax.jit
    def update(params, opt_state, tokens, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mask)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    # ---- 2. Training: cross-entropy on fresh demonstrations, greedy evaluations
    accuracy_curve, tokens_seen, last_print = [], 0, 0.0
    start_time = time.time()
    for step in range(1, args.total_steps + 1):
        batch = train_pairs[rng.integers(0, len(train_pairs), args.batch_size)]
        tokens, mask = tasks.sft_batch(batch, args.digits, args.drop_carry, rng)
        params, opt_state, loss = update(params, opt_state, tokens, mask)
        tokens_seen += tokens.size

        if step % args.eval_every == 0 or step == args.total_steps:
            test_acc, key = accuracy(model, params, test_pairs, args.digits, key)
            accuracy_curve.append((step, test_acc))
            sps = int(tokens_seen / (time.time() - start_time))
            writer.add_scalar("charts/test_accuracy", test_acc, step)
            writer.add_scalar("charts/learning_rate", float(opt_state[1].hyperparams["learning_rate"]), step)
            writer.add_scalar("losses/sft_loss", float(loss), step)
            writer.add_scalar("charts/SPS", sps, step)
            if args.progress and (time.time() - last_print > 0.5 or step == args.total_steps):
                last_print = time.time()
                print(
                    f"\rstep {step:>6d}/{args.total_steps}  loss {float(loss):.4f}  test acc {test_acc:.3f}  "
                    f"tokens/s {sps:7,d}",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    if args.progress:
        print(file=sys.stderr)

    # ---- 3. Save: the checkpoint, then the sampled accuracies
    wall_time = time.time() - start_time
    model_path = args.save_path or os.path.join(run_dir, "sft.npz")
    os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
    save_checkpoint(model, params, model_path)
    sampled_acc, key = accuracy(model, params, test_pairs, args.digits, key, temperature=1.0)
    # the quantity the RL scripts live on: how often a sample gets a carry problem right
    carry_pairs = test_pairs[tasks.inner_carry(test_pairs, args.digits)]
    sampled_carry_acc, key = accuracy(model, params, carry_pairs, args.digits, key, temperature=1.0)
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
        "losses": {"sft_loss": float(loss)},
    }


if __name__ == "__main__":
    args = tyro.cli(Args)
    try:
        check_args(args)
    except ValueError as err:  # a bad flag: one line and exit status 2, as tyro reports its own errors
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    train(args)
