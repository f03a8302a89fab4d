"""Tier 1 for the LLM substrate (llm/tasks.py, llm/tinylm_{torch,jax}.py): the tokenizer, the
verifier (malformed output is wrong), the demonstrator's deliberate mistake, the fixed disjoint
splits, the preference-pair builder, sequence_logps by hand in both twins, and the checkpoint
checks (wrong vocabulary, wrong shape, too short a context) that stop a run before any work."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

tasks = load_script("llm/tasks.py")
TWINS = ["llm/tinylm_torch.py", "llm/tinylm_jax.py"]


def test_tokenizer_round_trip():
    ids = tasks.encode("07+45=")
    assert tasks.decode(ids + [tasks.EOS, 5, 6]) == "07+45="
    assert tasks.decode([tasks.PAD] + ids) == "07+45="
    assert tasks.VOCAB_SIZE == 14


def test_answer_format_is_reversed_and_padded():
    assert tasks.answer_text(105, 2) == "501"
    assert tasks.answer_text(52, 2) == "250"
    assert tasks.prompt_text(7, 45, 2) == "07+45="


def test_verifier_scores_exact_answers_only():
    ok = tasks.encode("501") + [tasks.EOS]
    pairs = [(57, 48)] * 5
    completions = [
        ok,
        tasks.encode("591") + [tasks.EOS],  # wrong digit (a dropped carry)
        tasks.encode("501") + [5],  # no <eos>: malformed
        tasks.encode("50") + [tasks.EOS, tasks.PAD],  # too short
        [tasks.EOS] + [tasks.PAD] * 3,
    ]  # empty answer
    np.testing.assert_array_equal(tasks.verify(pairs, completions, 2), [1, 0, 0, 0, 0])


def test_demonstrator_forgets_inner_carries_only():
    rng = np.random.default_rng(0)
    assert tasks.demonstrator_answer(57, 48, 2, 0.0, rng) == "501"  # 105, correct
    assert tasks.demonstrator_answer(57, 48, 2, 1.0, rng) == "590"  # 7+8=15 -> 5, carry lost: 5+4=9, 0
    assert tasks.demonstrator_answer(95, 10, 2, 1.0, rng) == "501"  # only the final carry: kept
    wrong = [tasks.demonstrator_answer(57, 48, 2, 0.7, rng) != "501" for _ in range(2000)]
    assert abs(np.mean(wrong) - 0.7) < 0.04


def test_inner_carry_marks_exactly_the_problems_the_demonstrator_can_get_wrong():
    pairs = np.array([[57, 48], [12, 34], [19, 1], [95, 10], [50, 50]])
    np.testing.assert_array_equal(tasks.inner_carry(pairs, 2), [True, False, True, False, False])
    # three digits: a carry out of either lower column counts (150+50, 99+1); 100+900 only overflows
    np.testing.assert_array_equal(
        tasks.inner_carry(np.array([[150, 50], [99, 1], [100, 900]]), 3), [True, True, False]
    )
    # on every 2-digit problem: the demonstrator with drop_carry 1 is wrong exactly where inner_carry is
    rng = np.random.default_rng(0)
    all_pairs = np.array([(a, b) for a in range(100) for b in range(100)])
    wrong = [
        tasks.demonstrator_answer(a, b, 2, 1.0, rng) != tasks.answer_text(a + b, 2) for a, b in all_pairs
    ]
    np.testing.assert_array_equal(tasks.inner_carry(all_pairs, 2), wrong)
    assert tasks.inner_carry(all_pairs, 2).mean() == 0.45


def test_splits_are_fixed_and_disjoint():
    train_a, test_a = tasks.make_splits(2, 500)
    train_b, test_b = tasks.make_splits(2, 500)
    np.testing.assert_array_equal(test_a, test_b)
    assert len(train_a) + len(test_a) == 10_000
    assert not {tuple(p) for p in train_a} & {tuple(p) for p in test_a}


def test_sft_batch_masks_the_prompt():
    tokens, mask = tasks.sft_batch(np.array([[57, 48]]), 2, 0.0, np.random.default_rng(0))
    assert tasks.decode(tokens[0]) == "57+48=501"
    np.testing.assert_array_equal(mask[0], [0] * 6 + [1] * 4)


def test_completion_mask_stops_after_first_eos():
    c = np.array([[5, tasks.EOS, tasks.PAD, tasks.PAD], [5, 6, 7, 8], [tasks.EOS, 4, tasks.EOS, 4]])
    np.testing.assert_array_equal(tasks.completion_mask(c), [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])


def test_preference_pairs_skip_ties_and_flip_at_the_noise_rate():
    n, k = 4000, 2
    prompts = np.zeros((n, 6), dtype=np.int64)
    completions = np.arange(n * k * 4).reshape(n, k, 4)
    rewards = np.zeros((n, k))
    rewards[: n // 2, 1] = 1.0  # first half: completion 1 is correct, 0 is not
    pairs = tasks.build_preference_pairs(prompts, completions, rewards, 0.2, np.random.default_rng(0))
    assert len(pairs["chosen"]) == n // 2  # the tied half has no preference
    assert abs(pairs["gold_correct"].mean() - 0.8) < 0.03
    right = pairs["gold_correct"] == 1
    np.testing.assert_array_equal(pairs["chosen"][right], completions[: n // 2, 1][right])
    with pytest.raises(ValueError, match="label_noise"):
        tasks.build_preference_pairs(prompts, completions, rewards, 0.5, np.random.default_rng(0))


@pytest.mark.parametrize("script", TWINS)
def test_sequence_logps_sums_completion_tokens_only(script):
    m = load_script(script)
    # uniform logits over 4 tokens: every token has log-prob -ln 4; three of five positions masked in
    logits = np.zeros((1, 5, 4), dtype=np.float32)
    labels = np.array([[0, 1, 2, 3, 0]])
    mask = np.array([[0, 0, 1, 1, 1]], dtype=np.float32)
    conv = torch.as_tensor if script.endswith("torch.py") else jnp.asarray
    out = m.sequence_logps(conv(logits), conv(labels), conv(mask))
    assert float(out[0]) == pytest.approx(-3 * np.log(4), abs=1e-6)
    # a confident correct token contributes ~0; the masked prompt's terrible token contributes nothing
    logits[0, 0, 3] = 50.0  # position 0 predicts 3, label 0: masked
    logits[0, 2, 2] = 50.0  # position 2 predicts its label 2
    out = m.sequence_logps(conv(logits), conv(labels), conv(mask))
    assert float(out[0]) == pytest.approx(-2 * np.log(4), abs=1e-5)


def _save(script, path, **config):
    m = load_script(script)
    cfg = dict(vocab_size=tasks.VOCAB_SIZE, block_size=16, d_model=32, n_layer=1, n_head=2) | config
    if script.endswith("torch.py"):
        m.save_checkpoint(m.TinyLM(**cfg), path)
    else:
        import jax

        model = m.TinyLM(**cfg)
        m.save_checkpoint(model, model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), dtype=jnp.int32)), path)


@pytest.mark.parametrize("script", TWINS)
def test_checkpoint_checks(script, tmp_path):
    m = load_script(script)
    _save(script, tmp_path / "ok.npz")
    m.load_checkpoint(tmp_path / "ok.npz", vocab_size=tasks.VOCAB_SIZE, min_context=10)
    _save(script, tmp_path / "vocab.npz", vocab_size=20)
    with pytest.raises(ValueError, match="vocabulary"):
        m.load_checkpoint(tmp_path / "vocab.npz", vocab_size=tasks.VOCAB_SIZE)
    with pytest.raises(ValueError, match="context"):
        m.load_checkpoint(tmp_path / "ok.npz", vocab_size=tasks.VOCAB_SIZE, min_context=20)
    # arrays that do not match the config: a d_model 32 file relabelled as d_model 64
    data = dict(np.load(tmp_path / "ok.npz"))
    data["config.d_model"] = np.array(64)
    np.savez(tmp_path / "shape.npz", **data)
    with pytest.raises(ValueError, match="shape"):
        m.load_checkpoint(tmp_path / "shape.npz")


@pytest.mark.parametrize("script", TWINS)
def test_sampling_stops_at_eos_and_pads(script):
    m = load_script(script)
    prompts = np.array([tasks.encode("12+34=")] * 64)
    if script.endswith("torch.py"):
        torch.manual_seed(0)
        model = m.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2)
        out = m.sample(model, torch.as_tensor(prompts), 4, 1.0).numpy()
    else:
        import jax

        model = m.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2)
        params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), dtype=jnp.int32))
        out, _ = m.sample(model, params, jnp.asarray(prompts), jax.random.PRNGKey(1), 4, 1.0)
        out = np.asarray(out)
    assert out.shape == (64, 4)
    for row in out:
        row = list(row)
        if tasks.EOS in row:
            assert all(t == tasks.PAD for t in row[row.index(tasks.EOS) + 1 :])
