"""A local Hugging Face causal LM that speaks the addition task: what `--model PATH` loads in the llm/
torch scripts.

Substrate, not an algorithm: torch + transformers only, and transformers is imported inside the
functions that need it, so every script imports this module on the core install (no transformers)
and only `--model` asks for the library. Nothing is ever downloaded: the folder must exist locally
(`local_files_only=True`); a missing folder is a ValueError before any work.

The mapping from the task's vocabulary to the model's (docs/algorithms/llm.md, "Real models"):
  - ids: each of the V = 14 task symbols (tasks.VOCAB) gets one id of the model's vocabulary,
    `token_ids` (V,). With a tokenizer in the folder: each character "0".."9", "+", "=" -> the
    tokenizer's id of exactly that token (convert_tokens_to_ids; else the encoding of the character
    when it is one token; else a ValueError naming the character); <eos> -> the tokenizer's eos
    token; <pad> -> its pad token when it has one that no other symbol uses, else the smallest id no
    other symbol uses. Without a tokenizer: ids 0..V-1. The V ids must be distinct: two symbols on
    one logit would count it twice in the softmax.
  - input: task tokens (B, T) -> token_ids[tokens], one model token per character (no BPE merges,
    no BOS), positions 0..T-1, no padding on the left (prompts have a fixed length; the <pad>s after
    a completion's <eos> sit behind the causal mask of every position that is trained on).
  - output: the model's logits (B, T, model vocabulary) gathered at token_ids -> (B, T, V), in float32.
    The policy is the model's next-token distribution renormalised over the task's symbols (every
    other token of the model is masked out), so sample, token_logps, sequence_logps and every loss
    of llm/ run unchanged over the task vocabulary, and the verifier reads task ids.
  - features: the last hidden state (hidden_states[-1], after the final norm in GPT-2, Llama, ...),
    d_model = the model's hidden size: the scalar heads of the reward model and the PRM
    (nn.Linear(d_model, 1)) sit on it as on the tiny LM's.
  - dropout off: from_pretrained returns the model in eval mode and nothing here switches it back, so
    the log-probs that sampled a completion are those trained on (PPO/GRPO ratios start at exactly 1),
    as with the tiny LM, which has no dropout.
  - save: save_pretrained of the fine-tuned weights plus the tokenizer when there was one, so that the
    saved folder, passed as --model again, gives the same mapping.
Docs: docs/algorithms/llm.md ("Real models")
"""

import os

import torch
import torch.nn as nn

import tasks

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("--model needs transformers: pip install transformers==5.25.0") from e
    return transformers


def context_length(config):
    """Positions the model can attend over (n_positions or max_position_embeddings); None if unnamed."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def check_path(path, min_context=None):
    """A missing folder, a folder without config.json or a context shorter than min_context raises
    ValueError; reads only the config (cheap), before any run directory is written."""
    if not os.path.isdir(path):
        raise ValueError(
            f"--model {path}: no such folder (a local Hugging Face model folder; nothing is downloaded)"
        )
    if not os.path.exists(os.path.join(path, "config.json")):
        raise ValueError(f"--model {path}: no config.json, not a Hugging Face model folder")
    config = _transformers().AutoConfig.from_pretrained(path, local_files_only=True)
    n = context_length(config)
    if min_context is not None and n is not None and n < min_context:
        raise ValueError(f"prompt + completion need {min_context} positions; {path} has a context of {n}")


def _single_token_id(tokenizer, symbol):
    i = tokenizer.convert_tokens_to_ids(symbol)
    if i is not None and i != tokenizer.unk_token_id:
        return int(i)
    ids = tokenizer.encode(symbol, add_special_tokens=False)
    if len(ids) == 1:
        return int(ids[0])
    raise ValueError(
        f"the tokenizer has no single token for the task symbol {symbol!r} (it encodes to {ids})"
    )


def task_token_ids(tokenizer=None):
    """The model id of each task symbol, in tasks.VOCAB order (<pad>, <eos>, "0".."9", "+", "=")."""
    if tokenizer is None:
        return list(range(tasks.VOCAB_SIZE))
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token: the task's <eos> needs one")
    ids = [int(tokenizer.eos_token_id)] + [_single_token_id(tokenizer, c) for c in tasks.CHARS]
    pad = tokenizer.pad_token_id
    if pad is None or pad in ids:
        pad = next(i for i in range(len(ids) + 1) if i not in ids)
    ids = [int(pad)] + ids
    if len(set(ids)) != len(ids):
        raise ValueError(f"two task symbols share a model token: {dict(zip(tasks.VOCAB, ids))}")
    return ids


class HFCausalLM(nn.Module):
    """A transformers causal LM behind the tiny LM's interface: forward(tokens) -> (B, T, V) logits over
    the task's vocabulary, features(tokens) -> (B, T, d_model), config["d_model"] and ["block_size"]."""

    def __init__(self, hf, token_ids, source, has_tokenizer):
        super().__init__()
        self.hf = hf
        self.source, self.has_tokenizer = source, has_tokenizer
        self.register_buffer(
            "token_ids", torch.as_tensor(token_ids, dtype=torch.long)
        )  # moves with .to(device)
        text_config = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
        self.config = dict(
            vocab_size=len(token_ids), block_size=context_length(hf.config), d_model=text_config.hidden_size
        )
        self.eval()  # dropout off (see the module docstring)

    def _outputs(self, tokens, hidden):
        ids = self.token_ids[tokens]
        return self.hf(
            input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, output_hidden_states=hidden
        )

    def features(self, tokens):
        """(B, T) task tokens -> (B, T, d_model) last hidden states, float32."""
        return self._outputs(tokens, True).hidden_states[-1].float()

    def forward(self, tokens):
        """(B, T) task tokens -> (B, T, V) next-token logits at the task symbols' ids, float32."""
        return self._outputs(tokens, False).logits[..., self.token_ids].float()


def load(path, min_context=None):
    """An HFCausalLM from a local folder (AutoModelForCausalLM.from_pretrained, local files only)."""
    check_path(path, min_context)
    transformers = _transformers()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    has_tokenizer = any(os.path.exists(os.path.join(path, f)) for f in TOKENIZER_FILES)
    tokenizer = (
        transformers.AutoTokenizer.from_pretrained(path, local_files_only=True) if has_tokenizer else None
    )
    token_ids = task_token_ids(tokenizer)
    vocab = hf.get_input_embeddings().num_embeddings
    if max(token_ids) >= vocab:
        raise ValueError(
            f"{path}: the task's symbols need model ids up to {max(token_ids)}; the model has {vocab}"
        )
    return HFCausalLM(hf, token_ids, path, has_tokenizer)


def save(model, folder):
    """The fine-tuned weights (save_pretrained) and the source folder's tokenizer, when it had one."""
    model.hf.save_pretrained(folder)
    if model.has_tokenizer:
        _transformers().AutoTokenizer.from_pretrained(model.source, local_files_only=True).save_pretrained(
            folder
        )
