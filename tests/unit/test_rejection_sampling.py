"""Tier 1 for rejection sampling fine-tuning: the worked problem (docs/algorithms/rejection_sampling.md)
in both twins -- filter_samples on a hand batch (which samples are kept, the per-prompt cap, the
deduplication), training_batch's mask on hand tokens, rejection_sampling_loss on known logits (the
prompt and the padding after <eos> carry no loss and no gradient), the policy-improvement identity
(minus the loss gradient on exact accepted samples is grad log P(correct)), and the bad-input checks
that stop a run before work."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["llm/rejection_sampling_torch.py", "llm/rejection_sampling_jax.py"]
tasks = load_script("llm/tasks.py")
EOS, PAD = tasks.EOS, tasks.PAD

# Hand batch: 3 prompts x K = 4 samples of L = 5 tokens. The filter trusts the rewards it is given
# (prompt 2 plays a task with two correct answers, a and b).
a = [3, 2, 4, EOS, PAD]
a_tail = [3, 2, 4, EOS, 7]  # = a up to <eos>; differs only in the padding after it
b = [3, 2, 5, EOS, PAD]
c = [9, 9, 9, 9, 9]  # no <eos>
COMPLETIONS = np.array([[a, b, a, a], [c, c, b, a], [a, b, b, a_tail]])
REWARDS = np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=np.float32)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "cap,dedup,expected",
    [
        # no cap, no dedup: every correct sample; 7 of 12 (keep rate 0.583), 2 of 3 prompts solved
        (0, False, [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]]),
        # dedup: prompt 0 keeps a once; prompt 2 keeps a and b once each (a_tail = a up to <eos>)
        (0, True, [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]),
        # at most one per prompt (STaR): the first correct sample in sampling order
        (1, False, [[1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]),
        # at most 2, duplicates allowed: prompt 0 keeps a twice
        (2, False, [[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]]),
        # at most 3 after dedup: only 2 distinct correct answers exist in prompt 2
        (3, True, [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]),
        (3, False, [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]]),
    ],
)
def test_filter_on_a_hand_batch(script, cap, dedup, expected):
    m = load_script(script)
    keep = m.filter_samples(REWARDS, COMPLETIONS, max_per_prompt=cap, dedup=dedup)
    assert keep.dtype == bool and keep.shape == (3, 4)
    np.testing.assert_array_equal(keep, np.array(expected, dtype=bool))
    assert not keep[1].any(), "a prompt with no correct sample contributes nothing"
    assert not (keep & (REWARDS == 0)).any(), "a wrong sample is never kept"


@pytest.mark.parametrize("script", TWINS)
def test_filter_with_the_gold_verifier(script):
    m = load_script(script)
    # 57 + 48 = 105, written least significant digit first: "501" then <eos>
    right = tasks.encode("501") + [EOS]
    dropped_carry = tasks.encode("590") + [EOS]  # 7 + 8 = 15: the carry into the tens forgotten
    no_eos = tasks.encode("5010")
    pairs = np.array([[57, 48]] * 4)
    completions = np.array([right, dropped_carry, right, no_eos])
    rewards = tasks.verify(pairs, completions, 2)
    np.testing.assert_array_equal(rewards, [1, 0, 1, 0])
    keep = m.filter_samples(rewards.reshape(1, 4), completions.reshape(1, 4, 4))
    np.testing.assert_array_equal(keep, [[True, False, True, False]])
    # on this task a prompt has one correct answer, so dedup is the same as a cap of one
    np.testing.assert_array_equal(
        m.filter_samples(rewards.reshape(1, 4), completions.reshape(1, 4, 4), dedup=True),
        m.filter_samples(rewards.reshape(1, 4), completions.reshape(1, 4, 4), max_per_prompt=1),
    )


@pytest.mark.parametrize("script", TWINS)
def test_training_batch_masks_prompt_and_padding(script):
    m = load_script(script)
    prompts = tasks.encode_prompts(np.array([[57, 48], [57, 48]]), 2)  # "57+48=": 6 tokens
    completions = np.array(
        [tasks.encode("501") + [EOS], tasks.encode("5") + [EOS, PAD, PAD]]
    )  # <eos> early, then padding
    inputs, labels, mask = m.training_batch(prompts, completions)
    assert inputs.shape == labels.shape == mask.shape == (2, 9)
    np.testing.assert_array_equal(
        inputs[0], tasks.encode("57+48=501")
    )  # the last token (<eos>) is never an input
    np.testing.assert_array_equal(labels[0], tasks.encode("7+48=501") + [EOS])
    # labels 0-4 are prompt tokens (7 + 4 8 =), 5-8 the completion; the second row's <eos> is label 6
    np.testing.assert_array_equal(mask, [[0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 0, 0]])


def loss_and_grad(script, logits, labels, mask):
    m, c = load_script(script), conv(script)
    if is_torch(script):
        lg = c(logits).requires_grad_(True)
        loss = m.rejection_sampling_loss(lg, torch.as_tensor(np.asarray(labels)), c(mask))
        loss.backward()
        return loss.item(), lg.grad.numpy()
    f = lambda lg: m.rejection_sampling_loss(lg, jnp.asarray(np.asarray(labels)), c(mask))
    return float(f(c(logits))), np.asarray(jax.grad(f)(c(logits)))


@pytest.mark.parametrize("script", TWINS)
def test_loss_on_known_logits_masks_prompt_and_padding(script):
    # one sequence of 4 positions over a 3-token vocabulary; logits = log-probabilities
    logits = np.log(
        [
            [
                [1 / 3, 1 / 3, 1 / 3],  # position 0: a prompt token (masked)
                [0.25, 0.50, 0.25],  # position 1: completion, label 1 -> p = 0.5
                [0.25, 0.50, 0.25],  # position 2: completion (<eos>), label 2 -> p = 0.25
                [0.98, 0.01, 0.01],
            ]
        ]
    )  # position 3: padding after <eos>, label 1 -> p = 0.01 (masked)
    labels = [[0, 1, 2, 1]]
    mask = [[0, 1, 1, 0]]
    loss, g = loss_and_grad(script, logits, labels, mask)
    # -(ln 0.5 + ln 0.25) / 2 = (0.6931 + 1.3863) / 2 = 1.5 ln 2 = 1.0397
    assert loss == pytest.approx(1.5 * math.log(2), abs=1e-5)
    assert loss == pytest.approx(1.0397, abs=1e-4)
    # unmasked it would be (ln 3 + ln 2 + ln 4 + ln 100) / 4 = 2.0952: the mask matters
    # d loss / d logits = (softmax - onehot(label)) / (2 completion tokens), zero on masked rows
    np.testing.assert_allclose(
        g[0], [[0, 0, 0], [0.125, -0.25, 0.125], [0.125, 0.25, -0.375], [0, 0, 0]], atol=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_loss_is_a_mean_over_completion_tokens_of_the_batch(script):
    # sequence A: 1 completion token at p = 1/2; sequence B: 3 tokens at p = 1/4 each
    half, quarter = np.log([0.5, 0.5]), np.log([0.25, 0.75])
    logits = np.array([[half, half, half], [quarter, quarter, quarter]])
    labels = [[0, 0, 0], [0, 0, 0]]
    mask = [[1, 0, 0], [1, 1, 1]]
    loss, _ = loss_and_grad(script, logits, labels, mask)
    # token mean (as SFT): (ln 2 + 3 ln 4) / 4 = 7/4 ln 2 = 1.2130, not the mean of per-sequence means 1.0397
    assert loss == pytest.approx(1.75 * math.log(2), abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_loss_is_the_sft_loss(script):
    m = load_script(script)
    sft = load_script(script.replace("rejection_sampling", "sft"))
    c = conv(script)
    rng = np.random.default_rng(0)
    logits, labels = c(rng.normal(size=(5, 9, 14))), rng.integers(0, 14, size=(5, 9))
    labels = torch.as_tensor(labels) if is_torch(script) else jnp.asarray(labels)
    mask = c((rng.random((5, 9)) < 0.6).astype(np.float32))
    assert float(m.rejection_sampling_loss(logits, labels, mask)) == pytest.approx(
        float(sft.sft_loss(logits, labels, mask)), abs=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_policy_improvement_on_a_binary_reward(script):
    """A one-step policy over 4 answers, pi_old = softmax(theta) = [0.1, 0.2, 0.3, 0.4], reward
    r = [1, 0, 1, 0]: J = P(correct) = 0.4. Accepted samples are draws of q = r pi_old / J =
    [0.25, 0, 0.75, 0]; the batch [0, 2, 2, 2] represents q exactly. Minus the gradient of the loss
    at theta_old is grad log J = pi (r - J) / J = [0.15, -0.2, 0.45, -0.4]: an ascent direction of
    the expected reward."""
    pi = np.array([0.1, 0.2, 0.3, 0.4])
    theta = np.log(pi)
    labels = np.array([[0], [2], [2], [2]])
    mask = np.ones((4, 1))
    m, c = load_script(script), conv(script)
    if is_torch(script):
        th = c(theta).requires_grad_(True)
        m.rejection_sampling_loss(th.expand(4, 1, 4), torch.as_tensor(labels), c(mask)).backward()
        g = th.grad.numpy()
    else:
        f = lambda th: m.rejection_sampling_loss(
            jnp.broadcast_to(th, (4, 1, 4)), jnp.asarray(labels), c(mask)
        )
        g = np.asarray(jax.grad(f)(c(theta)))
    r, J = np.array([1, 0, 1, 0]), 0.4
    np.testing.assert_allclose(-g, pi * (r - J) / J, atol=1e-6)
    np.testing.assert_allclose(-g, [0.15, -0.2, 0.45, -0.4], atol=1e-6)
    # one small step along -g raises P(correct)
    new = np.exp(theta - 0.1 * g) / np.exp(theta - 0.1 * g).sum()
    assert (new * r).sum() > J


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "field,value,match",
    [
        ("samples_per_prompt", 0, "--samples-per-prompt"),
        ("max_per_prompt", -1, "--max-per-prompt"),
        ("temperature", 0.0, "--temperature"),
        ("epochs", 0, "--epochs"),
        ("prompts_per_iteration", 10_000, "--prompts-per-iteration"),
    ],
)
def test_bad_args_are_refused(script, tmp_path, field, value, match):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(**{field: value}, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_wrong_checkpoint_is_refused(script, tmp_path):
    m = load_script(script)
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    lm.save_checkpoint(lm.TinyLM(tasks.VOCAB_SIZE, 8, 32, 1, 2), tmp_path / "ctx8.npz")
    logs = tmp_path / "runs"
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(logs), progress=False))
    with pytest.raises(ValueError, match="context"):
        m.train(m.Args(sft_path=str(tmp_path / "ctx8.npz"), log_dir=str(logs), progress=False))
    assert not logs.exists()


@pytest.mark.parametrize("script", TWINS)
def test_prompts_longer_than_the_context_are_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="block_size|context"):
        m.train(m.Args(digits=5, log_dir=str(tmp_path), progress=False))  # 12 + 7 > 16 positions
    assert not any(tmp_path.iterdir())
