"""A tiny GPT-style causal transformer -- the PyTorch twin of the substrate every llm/ script uses.

Pre-LN blocks (LayerNorm -> causal self-attention -> residual, LayerNorm -> GELU MLP -> residual),
learned token and position embeddings, a final LayerNorm and an output head tied to the token
embedding. With the defaults (d_model 128, 2 layers, 4 heads, 16 positions) it has about 0.4M
parameters.
Checkpoints are .npz files with framework-neutral names and (in, out) matrices, so that
llm/tinylm_jax.py loads the same weights; tests/parity/test_tinylm.py checks that both give the same
logits within 1e-4.
Docs: docs/algorithms/llm.md
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import tasks


def default_config(block_size=16):
    return dict(vocab_size=tasks.VOCAB_SIZE, block_size=block_size, d_model=128, n_layer=2, n_head=4)


# ----------------------------------------------------------------------------- log-probs
def token_logps(logits, labels, temperature=1.0):
    """log pi(label_t | tokens before t) per position: logits (B, T, V) already aligned with
    labels (B, T), i.e. logits[:, t] is the distribution of labels[:, t]. Logits are divided by the
    sampling temperature first, so that log-probs are those of the distribution that sampled."""
    logp_all = torch.log_softmax(logits / temperature, dim=-1)
    return logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def sequence_logps(logits, labels, completion_mask, temperature=1.0):
    """Sum of the completion tokens' log-probs per sequence (prompt and padding masked out)."""
    return (token_logps(logits, labels, temperature) * completion_mask).sum(-1)


# ----------------------------------------------------------------------------- network
class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        B, T, D = x.shape
        hd = D // self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.reshape(B, T, self.n_head, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab_size, block_size, d_model, n_layer, n_head):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model = {d_model} is not divisible by n_head = {n_head}")
        self.config = dict(
            vocab_size=vocab_size, block_size=block_size, d_model=d_model, n_layer=n_layer, n_head=n_head
        )
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.h = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:  # embeddings and linear weights; LayerNorm gains stay 1
                nn.init.normal_(p, std=0.02)

    def features(self, tokens):
        """(B, T) tokens -> (B, T, d_model) final hidden states (after the last LayerNorm)."""
        T = tokens.shape[1]
        if T > self.config["block_size"]:
            raise ValueError(
                f"sequence of {T} tokens is longer than the context ({self.config['block_size']})"
            )
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.h:
            x = block(x)
        return self.lnf(x)

    def forward(self, tokens):
        """(B, T) tokens -> (B, T, vocab) next-token logits (head tied to the token embedding)."""
        return self.features(tokens) @ self.wte.weight.T


@torch.no_grad()
def sample(model, prompts, max_new_tokens, temperature):
    """Complete (B, P) prompts with max_new_tokens tokens; temperature 0 is greedy. Tokens after a
    sequence's first <eos> are <pad>. Returns (B, max_new_tokens) int64 on the prompts' device (the
    model's: sampling runs there). No KV cache: at 10 tokens a full forward per step costs about the
    same. Any module with the model's forward works (llm/hf_model.py for --model)."""
    B, P = prompts.shape
    tokens = torch.cat(
        [prompts, torch.full((B, max_new_tokens), tasks.PAD, dtype=torch.long, device=prompts.device)], dim=1
    )
    done = torch.zeros(B, dtype=torch.bool, device=prompts.device)
    for t in range(max_new_tokens):
        logits = model(tokens[:, : P + t])[:, -1]
        if temperature == 0:
            tok = logits.argmax(-1)
        else:
            tok = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, tasks.PAD), tok)
        tokens[:, P + t] = tok
        done = done | (tok == tasks.EOS)
    return tokens[:, P:]


# ----------------------------------------------------------------------------- checkpoints
def _neutral_name(module_name, param_name, module):
    """torch name -> neutral name: "h.0.qkv" + "weight" -> "h.0.qkv.w" (LayerNorm weight -> ".g")."""
    leaf = {"bias": "b", "weight": "g" if isinstance(module, nn.LayerNorm) else "w"}[param_name]
    return f"{module_name}.{leaf}"


def save_checkpoint(model, path):
    """Weights as an .npz of float32 arrays with neutral names, Linear matrices stored (in, out)."""
    arrays = {f"config.{k}": np.array(v) for k, v in model.config.items()}
    for module_name, module in model.named_modules():
        for param_name, p in module.named_parameters(recurse=False):
            w = p.detach().cpu().numpy().astype(np.float32)
            arrays[_neutral_name(module_name, param_name, module)] = (
                w.T if isinstance(module, nn.Linear) and w.ndim == 2 else w
            )
    np.savez(path, **arrays)


def load_checkpoint(path, vocab_size=None, min_context=None):
    """A TinyLM with the weights of an .npz checkpoint. A checkpoint whose vocabulary differs from
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
    with torch.no_grad():
        for module_name, module in model.named_modules():
            for param_name, p in module.named_parameters(recurse=False):
                name = _neutral_name(module_name, param_name, module)
                if name not in data.files:
                    raise ValueError(f"{path} has no array {name}")
                w = data[name].T if isinstance(module, nn.Linear) and p.dim() == 2 else data[name]
                if tuple(w.shape) != tuple(p.shape):
                    raise ValueError(
                        f"{path}: {name} has shape {w.shape}, the model expects {tuple(p.shape)}"
                    )
                p.copy_(torch.as_tensor(w))
    return model
