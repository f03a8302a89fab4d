"""The task every llm/ script learns: multi-digit addition with a verifiable answer.

Substrate, not an algorithm (framework-neutral: python and numpy only). It holds
  - a character tokenizer with <pad> and <eos>;
  - the prompts "ab+cd=" (operands zero-padded to `digits` digits) split into fixed, disjoint
    train and test sets;
  - the answer format: the sum written *least significant digit first*, zero-padded to digits + 1
    characters, then <eos> ("57+48=" -> "501<eos>", 105 reversed). Reversed order lets a left-to-right
    model produce each digit after the carry it depends on;
  - the verifier: reward 1 for exactly the right answer, 0 for anything else (malformed included);
  - the demonstrator behind the SFT data, deliberately imperfect: it forgets each carry between two
    columns with probability `drop_carry` (the final overflow digit is always right), so an SFT policy
    that imitates it well answers about half the test prompts wrong under greedy decoding;
  - the preference-pair builder for the reward model and DPO: two sampled completions of one prompt,
    the gold verifier's preference passed through Bradley-Terry label noise.
Docs: docs/algorithms/llm.md
"""

import numpy as np

PAD, EOS = 0, 1
CHARS = "0123456789+="
VOCAB = ["<pad>", "<eos>"] + list(CHARS)
VOCAB_SIZE = len(VOCAB)
_ID = {c: i + 2 for i, c in enumerate(CHARS)}


def encode(text):
    """Characters -> token ids (no <eos> added)."""
    return [_ID[c] for c in text]


def decode(ids):
    """Token ids -> text, stopping at the first <eos>; <pad> is dropped."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i != PAD:
            out.append(VOCAB[i])
    return "".join(out)


def prompt_len(digits):
    """Tokens of a prompt: two operands, '+' and '='."""
    return 2 * digits + 2


def completion_len(digits):
    """Tokens of a well-formed completion: digits + 1 answer digits and <eos>."""
    return digits + 2


def prompt_text(a, b, digits):
    return f"{a:0{digits}d}+{b:0{digits}d}="


def answer_text(total, digits):
    """The sum, zero-padded to digits + 1 characters, least significant digit first."""
    return f"{total:0{digits + 1}d}"[::-1]


def demonstrator_answer(a, b, digits, drop_carry, rng):
    """Column addition, least significant digit first, that forgets each carry into the next column
    with probability drop_carry. The carry out of the last column (the leading 1) is never lost."""
    out, carry = [], 0
    for col in range(digits):
        s = (a // 10**col) % 10 + (b // 10**col) % 10 + carry
        out.append(s % 10)
        carry = s // 10
        if carry and col < digits - 1 and rng.random() < drop_carry:
            carry = 0
    out.append(carry)
    return "".join(str(d) for d in out)


def make_splits(digits, num_test, seed=0):
    """All digits-digit operand pairs, shuffled with a fixed seed, split into disjoint train and test
    lists of (a, b). The split does not depend on the run's seed: every run tests on the same prompts."""
    n = 10**digits
    if num_test >= n * n:
        raise ValueError(
            f"num_test = {num_test} leaves no training prompts ({n * n} problems with {digits} digits)"
        )
    pairs = np.array([(a, b) for a in range(n) for b in range(n)], dtype=np.int64)
    np.random.default_rng(seed).shuffle(pairs)
    return pairs[num_test:], pairs[:num_test]


def inner_carry(pairs, digits):
    """(N, 2) operand pairs -> (N,) bool: True where some column carries into the next one (the
    carries the demonstrator forgets; the overflow out of the last column does not count). A carry
    leaves the k lowest columns exactly when their parts of a and b sum to 10**k or more."""
    a, b = np.asarray(pairs).T
    out = np.zeros(len(a), dtype=bool)
    for k in range(1, digits):
        out |= a % 10**k + b % 10**k >= 10**k
    return out


def encode_prompts(pairs, digits):
    """(N, 2) operand pairs -> (N, prompt_len) int64 token ids."""
    return np.array([encode(prompt_text(a, b, digits)) for a, b in pairs], dtype=np.int64)


def sft_batch(pairs, digits, drop_carry, rng):
    """Demonstrations for the given operand pairs: tokens (N, prompt_len + completion_len) and the
    completion mask (1 on answer digits and <eos>, 0 on the prompt), for next-token training."""
    p, c = prompt_len(digits), completion_len(digits)
    tokens = np.zeros((len(pairs), p + c), dtype=np.int64)
    mask = np.zeros((len(pairs), p + c), dtype=np.float32)
    for i, (a, b) in enumerate(pairs):
        text = prompt_text(a, b, digits) + demonstrator_answer(a, b, digits, drop_carry, rng)
        tokens[i] = encode(text) + [EOS]
        mask[i, p:] = 1.0
    return tokens, mask


def verify(pairs, completions, digits):
    """Gold reward per completion: 1.0 when the tokens up to the first <eos> spell exactly the
    reversed, zero-padded sum, else 0.0 (no <eos>, wrong length or wrong digit are all wrong)."""
    rewards = np.zeros(len(pairs), dtype=np.float32)
    for i, ((a, b), ids) in enumerate(zip(pairs, completions)):
        ids = [int(t) for t in ids]
        if EOS not in ids:
            continue
        body = ids[: ids.index(EOS)]
        if PAD in body:
            continue
        rewards[i] = float("".join(VOCAB[t] for t in body) == answer_text(int(a + b), digits))
    return rewards


def graded_score(pairs, completions, digits):
    """The gold preference score behind the preference pairs: 1.0 for a correct answer (verify), else
    half the fraction of answer characters in the right place (a wrong answer with one wrong digit is
    preferred to a wrong answer with three; any correct answer is preferred to every wrong one)."""
    scores = verify(pairs, completions, digits)
    for i, ((a, b), ids) in enumerate(zip(pairs, completions)):
        if scores[i] == 0.0:
            text, gold = decode(ids), answer_text(int(a + b), digits)
            scores[i] = 0.5 * sum(x == y for x, y in zip(text, gold)) / len(gold)
    return scores


def completion_mask(completions):
    """(N, L) sampled completion tokens -> float mask: 1 up to and including the first <eos>, 0 after
    (tokens after <eos> are padding, never trained on)."""
    completions = np.asarray(completions)
    is_eos = completions == EOS
    after_eos = np.cumsum(is_eos, axis=1) - is_eos  # eos tokens strictly before this position
    return (after_eos == 0).astype(np.float32)


def build_preference_pairs(prompts, completions, rewards, label_noise, rng):
    """Preference pairs from K sampled completions per prompt.

    prompts (N, P), completions (N, K, L), gold scores (N, K) (graded_score). For each prompt, the
    first completion scored differently from completion 0 is paired with it (prompts where all K tie
    are skipped: the gold scorer has no preference). The label is Bradley-Terry on the gold
    preference, P(a preferred over b) = sigmoid(s (1[a better] - 1[b better])) with
    s = ln((1 - label_noise) / label_noise): the better completion is chosen with probability
    1 - label_noise.
    Returns dict(prompts, chosen, rejected (M, L) tokens, gold_correct (M,) 1.0 when the chosen
    completion is the gold-better one).
    """
    if not 0.0 <= label_noise < 0.5:
        raise ValueError(f"label_noise = {label_noise} must be in [0, 0.5)")
    out = {"prompts": [], "chosen": [], "rejected": [], "gold_correct": []}
    for i in range(len(prompts)):
        differs = np.flatnonzero(rewards[i] != rewards[i, 0])
        if len(differs) == 0:
            continue
        j = differs[0]
        better, worse = (0, j) if rewards[i, 0] > rewards[i, j] else (j, 0)
        flip = rng.random() < label_noise
        chosen, rejected = (worse, better) if flip else (better, worse)
        out["prompts"].append(prompts[i])
        out["chosen"].append(completions[i, chosen])
        out["rejected"].append(completions[i, rejected])
        out["gold_correct"].append(0.0 if flip else 1.0)
    if not out["prompts"]:
        raise ValueError("no preference pairs: every prompt's samples tie under the verifier")
    return {k: np.array(v) for k, v in out.items()}
