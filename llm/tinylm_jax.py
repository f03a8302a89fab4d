"""A tiny GPT-style causal transformer -- the JAX twin of the substrate every llm/ script uses.

Pre-LN blocks (LayerNorm -> causal self-attention -> residual, LayerNorm -> GELU MLP -> residual),
learned token and position embeddings, a final LayerNorm and an output head tied to the token
embedding. With the defaults (d_model 128, 2 layers, 4 heads, 16 positions) it has about 0.4M
parameters.
Checkpoints are .npz files with framework-neutral names and (in, out) matrices, so that
llm/tinylm_torch.py loads the same weights; tests/parity/test_tinylm.py checks that both give the same
logits within 1e-4.
Docs: docs/algorithms/llm.md
"""

import math
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

import tasks


def default_config(block_size=16):
    return dict(vocab_size=tasks.VOCAB_SIZE, block_size=block_size, d_model=128, n_layer=2, n_head=4)


# ----------------------------------------------------------------------------- log-probs
def token_logps(logits, labels, temperature=1.0):
    """log pi(label_t | tokens before t) per position: logits (B, T, V) already aligned with
    labels (B, T), i.e. logits[:, t] is the distribution of labels[:, t]. Logits are divided by the
    sampling temperature first, so that log-probs are those of the distribution that sampled."""
    logp_all = jax.nn.log_softmax(logits / temperature, axis=-1)
    return jnp.take_along_axis(logp_all, labels[..., None], axis=-1).squeeze(-1)


def sequence_logps(logits, labels, completion_mask, temperature=1.0):
    """Sum of the completion tokens' log-probs per sequence (prompt and padding masked out)."""
    return (token_logps(logits, labels, temperature) * completion_mask).sum(-1)


# ----------------------------------------------------------------------------- network
init = nn.initializers.normal(0.02)
Dense = partial(nn.Dense, kernel_init=init, bias_init=nn.initializers.zeros)
LayerNorm = partial(nn.LayerNorm, epsilon=1e-5, use_fast_variance=False)  # torch's LayerNorm


class Block(nn.Module):
    d_model: int
    n_head: int

    @nn.compact
    def __call__(self, x):
        B, T, D = x.shape
        hd = D // self.n_head
        q, k, v = jnp.split(Dense(3 * D, name="qkv")(LayerNorm(name="ln1")(x)), 3, axis=-1)
        q, k, v = (z.reshape(B, T, self.n_head, hd).transpose(0, 2, 1, 3) for z in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
        causal = jnp.tril(jnp.ones((T, T), dtype=bool))
        att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + Dense(D, name="proj")(y)
        h = nn.gelu(Dense(4 * D, name="fc")(LayerNorm(name="ln2")(x)), approximate=False)
        return x + Dense(D, name="fc_proj")(h)


class TinyLM(nn.Module):
    vocab_size: int
    block_size: int
    d_model: int
    n_layer: int
    n_head: int

    def setup(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model = {self.d_model} is not divisible by n_head = {self.n_head}")
        self.wte = nn.Embed(self.vocab_size, self.d_model, embedding_init=init)
        self.wpe = nn.Embed(self.block_size, self.d_model, embedding_init=init)
        self.h = [Block(self.d_model, self.n_head) for _ in range(self.n_layer)]  # named h_0, h_1, ...
        self.lnf = LayerNorm()

    @property
    def config(self):
        return dict(
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            d_model=self.d_model,
            n_layer=self.n_layer,
            n_head=self.n_head,
        )

    def features(self, tokens):
        """(B, T) tokens -> (B, T, d_model) final hidden states (after the last LayerNorm)."""
        T = tokens.shape[1]
        if T > self.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than the context ({self.block_size})")
        x = self.wte(tokens) + self.wpe(jnp.arange(T))
        for block in self.h:
            x = block(x)
        return self.lnf(x)

    def __call__(self, tokens):
        """(B, T) tokens -> (B, T, vocab) next-token logits (head tied to the token embedding)."""
        return self.wte.attend(self.features(tokens))


@partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature"))
def sample(model, params, prompts, key, max_new_tokens, temperature):
    """Complete (B, P) prompts with max_new_tokens tokens; temperature 0 is greedy. Tokens after a
    sequence's first <eos> are <pad>. Returns ((B, max_new_tokens) int32, key); the key is split
    inside the jitted call. No KV cache: at 10 tokens a full forward per step costs about the same."""
    B, P = prompts.shape
    tokens = jnp.concatenate([prompts, jnp.full((B, max_new_tokens), tasks.PAD, dtype=prompts.dtype)], axis=1)
    done = jnp.zeros(B, dtype=bool)
    for t in range(max_new_tokens):
        key, sample_key = jax.random.split(key)
        logits = model.apply(params, tokens[:, : P + t])[:, -1]
        if temperature == 0:
            tok = logits.argmax(-1)
        else:
            tok = jax.random.categorical(sample_key, logits / temperature, axis=-1)
        tok = jnp.where(done, tasks.PAD, tok).astype(tokens.dtype)
        tokens = tokens.at[:, P + t].set(tok)
        done = done | (tok == tasks.EOS)
    return tokens[:, P:], key


# ----------------------------------------------------------------------------- checkpoints
_LEAF = {"embedding": "w", "kernel": "w", "scale": "g", "bias": "b"}


def _neutral_name(path):
    """flax path -> neutral name: ("h_0", "qkv", "kernel") -> "h.0.qkv.w"."""
    *modules, leaf = path
    return (
        ".".join(m.replace("h_", "h.", 1) if m.startswith("h_") else m for m in modules) + "." + _LEAF[leaf]
    )


def save_checkpoint(model, params, path):
    """Weights as an .npz of float32 arrays with neutral names, Dense kernels stored (in, out)."""
    arrays = {f"config.{k}": np.array(v) for k, v in model.config.items()}
    for path_, w in traverse_util.flatten_dict(params["params"]).items():
        arrays[_neutral_name(path_)] = np.asarray(w, dtype=np.float32)
    np.savez(path, **arrays)


def load_checkpoint(path, vocab_size=None, min_context=None):
    """(TinyLM, params) from an .npz checkpoint. A checkpoint whose vocabulary differs from
    vocab_size, whose context is shorter than min_context, or whose arrays do not have the shapes its
    config implies raises ValueError."""
    data = np.load(path)
    config = {k.removeprefix("config."): int(data[k]) for k in data.files if k.startswith("config.")}
    if set(config) != {"vocab_size", "block_size", "d_model", "n_layer", "n_head"}:
        raise ValueError(f"{path} is not a tinylm checkpoint (config keys {sorted(config)})")
    if vocab_size is not None and config["vocab_size"] != vocab_size:
        raise ValueError(
            f"{path} has a vocabulary of {config['vocab_size']} tokens; the task has {vocab_size}"
        )
    if min_context is not None and config["block_size"] < min_context:
        raise ValueError(
            f"prompt + completion need {min_context} positions; {path} has a context of "
            f"{config['block_size']}"
        )
    model = TinyLM(**config)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.zeros((1, 1), dtype=jnp.int32))
    flat = {}
    for path_, s in traverse_util.flatten_dict(shapes["params"]).items():
        name = _neutral_name(path_)
        if name not in data.files:
            raise ValueError(f"{path} has no array {name}")
        if tuple(data[name].shape) != tuple(s.shape):
            raise ValueError(
                f"{path}: {name} has shape {data[name].shape}, the model expects {tuple(s.shape)}"
            )
        flat[path_] = jnp.asarray(data[name])
    return model, {"params": traverse_util.unflatten_dict(flat)}
