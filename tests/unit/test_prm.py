"""Tier 1 for the process reward model: worked problems in both twins with hand-computed numbers --
Math-Shepherd's Monte Carlo step labels on a stub policy whose rollouts are known (hard and soft),
the BCE loss's masking of non-step positions, the PRM aggregation (min / product), the best-of-n
selector and table on a hand batch, the analytic best-of-n KL -- the keys train() returns, and the
bad-input checks that stop a run before any work."""

import math

import jax
import numpy as np
import pytest

from helpers import conv, is_torch, load_script, smoke_run

TWINS = ["llm/prm_torch.py", "llm/prm_jax.py"]
tasks = load_script("llm/tasks.py")
NINE, EOS, PAD = tasks.encode("9")[0], tasks.EOS, tasks.PAD


def stub_rollouts(prefixes, max_new_tokens, num_rollouts=4):
    """A policy whose rollouts are known. Rows come in groups of num_rollouts copies of one prefix;
    copy r writes the gold continuation (the rest of the reversed sum, then <eos>) when
    r < max_new_tokens, else "9" then <eos>; both cut to max_new_tokens. So with 3 tokens left, 3 of
    4 rollouts are right; with 2 left, 2 of 4; with 1 left, 1 of 4 (unless the prefix is already
    wrong: then none is)."""
    P = tasks.prompt_len(2)
    out = np.full((len(prefixes), max_new_tokens), PAD, dtype=np.int64)
    for i, row in enumerate(np.asarray(prefixes)):
        text = tasks.decode(row[:P])
        a, b = int(text[:2]), int(text[3:5])
        gold = tasks.encode(tasks.answer_text(a + b, 2)) + [EOS]
        r = i % num_rollouts
        cont = (gold[len(row) - P :] if r < max_new_tokens else [NINE, EOS])[:max_new_tokens]
        out[i, : len(cont)] = cont
    return out


def mc_labels(script, pairs, completions, soft):
    m = load_script(script)
    if is_torch(script):
        labels, steps = m.mc_step_labels(pairs, completions, stub_rollouts, 4, 2, soft)
    else:
        labels, steps, _ = m.mc_step_labels(
            pairs,
            completions,
            lambda p, k, key: (stub_rollouts(p, k), key),
            4,
            2,
            jax.random.PRNGKey(0),
            soft,
        )
    return labels, steps


# 07 + 05 = 12: the answer is "210" (reversed, zero-padded to 3 digits), then <eos>.
PAIRS = np.array([(7, 5)] * 4)
COMPLETIONS = np.array(
    [
        tasks.encode("210") + [EOS],  # right
        tasks.encode("200") + [EOS],  # the carry into the tens dropped
        [EOS, PAD, PAD, PAD],  # empty answer: no step at all
        tasks.encode("2101"),
    ]
)  # never stops: 4 steps, wrong


@pytest.mark.parametrize("script", TWINS)
def test_mc_step_labels_soft_on_a_stub_policy(script):
    labels, steps = mc_labels(script, PAIRS, COMPLETIONS, soft=True)
    np.testing.assert_array_equal(steps, [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    # "210": after "2" 3 tokens are left -> 3 of 4 rollouts right (0.75); after "21", 2 of 4; after
    #        "210", 1 of 4 (the 3 others write "9" where <eos> belongs).
    # "200": after "2" as above (0.75); after "20" the tens digit is already wrong: 0, 0.
    # "2101": the first three prefixes are those of "210"; the last has nothing left to roll out and
    #         is verified as it is (no <eos>: wrong).
    np.testing.assert_allclose(
        labels, [[0.75, 0.5, 0.25, 0], [0.75, 0, 0, 0], [0, 0, 0, 0], [0.75, 0.5, 0.25, 0]]
    )


@pytest.mark.parametrize("script", TWINS)
def test_mc_step_labels_hard_on_a_stub_policy(script):
    labels, steps = mc_labels(script, PAIRS, COMPLETIONS, soft=False)
    # hard estimate: 1 as soon as one rollout of the prefix reaches the gold answer
    np.testing.assert_array_equal(labels, [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]])


def bce_and_grad(script, logits, labels, mask):
    m, c = load_script(script), conv(script)
    if is_torch(script):
        z = c(logits).requires_grad_(True)
        loss, acc = m.masked_bce_loss(z, c(labels), c(mask))
        loss.backward()
        return loss.item(), acc.item(), z.grad.numpy()
    f = lambda z: m.masked_bce_loss(z, c(labels), c(mask))
    (loss, acc), g = f(c(logits)), jax.grad(lambda z: f(z)[0])(c(logits))
    return float(loss), float(acc), np.asarray(g)


@pytest.mark.parametrize("script", TWINS)
def test_bce_masks_non_step_positions(script):
    mask = [[1, 1, 1, 0]]
    loss, acc, g = bce_and_grad(script, [[0.0, 2.0, -1.0, 5.0]], [[1.0, 1.0, 0.0, 0.5]], mask)
    # softplus(z) - y z: ln 2 = 0.693147 (z 0, y 1), ln(1 + e^-2) = 0.126928 (z 2, y 1),
    # ln(1 + e^-1) = 0.313262 (z -1, y 0); mean over the 3 steps = 1.133337 / 3 = 0.377779
    assert loss == pytest.approx(0.377779, abs=1e-5)
    assert acc == pytest.approx(2 / 3)  # z = 0 is not > 0, so the first step counts as wrong
    # d/dz = (sigmoid(z) - y) / 3 on the steps, 0 on the masked position
    np.testing.assert_allclose(g, [[-0.5 / 3, (0.880797 - 1) / 3, 0.268941 / 3, 0.0]], atol=1e-5)
    # whatever sits at the masked position changes nothing
    loss2, _, _ = bce_and_grad(script, [[0.0, 2.0, -1.0, -100.0]], [[1.0, 1.0, 0.0, 1.0]], mask)
    assert loss2 == pytest.approx(loss, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_prm_aggregation_min_and_product(script):
    m, c = load_script(script), conv(script)
    logit = lambda p: math.log(p / (1 - p))
    z = c(
        [
            [logit(0.9), logit(0.5), logit(0.8), logit(0.01)],
            [logit(0.9), logit(0.9), logit(0.9), logit(0.9)],
            [logit(0.2), logit(0.99), logit(0.01), logit(0.01)],
        ]
    )
    steps = c([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    # row 0: min(0.9, 0.5, 0.8) = 0.5, product 0.9 * 0.5 * 0.8 = 0.36 (0.01 is off the steps);
    # row 1: no step -> 0; row 2: min(0.2, 0.99) = 0.2, product 0.198
    np.testing.assert_allclose(
        np.asarray(m.aggregate_step_scores(z, steps, "min")), [0.5, 0.0, 0.2], atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(m.aggregate_step_scores(z, steps, "product")), [0.36, 0.0, 0.198], atol=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_best_of_n_selector_and_table_on_a_hand_batch(script):
    m, c = load_script(script), conv(script)
    # ties go to the first candidate; the max of negative scores is the least negative
    pick = np.asarray(m.best_of_n_select(c([[0.1, 0.7, 0.3, 0.7], [-1.0, -2.0, -0.5, -3.0]])))
    np.testing.assert_array_equal(pick, [1, 2])
    scores = {"prm": np.array([[0.1, 0.9, 0.2, 0.8]]), "orm": np.array([[0.5, 0.1, 0.6, 0.2]])}
    gold = np.array([[0.0, 1.0, 0.0, 0.0]], dtype=np.float32)
    answers = np.array([["200", "210", "200", "201"]])
    table = m.best_of_n_table(scores, gold, answers, [1, 2, 4])
    # n = 1: the mean gold reward 0.25. n = 2: groups (0.1, 0.9) -> the right one, (0.2, 0.8) -> a
    # wrong one: 0.5. n = 4: 0.9 wins: 1.
    assert table["prm"] == pytest.approx([0.25, 0.5, 1.0])
    # the ORM picks 0.5 (wrong) and 0.6 (wrong) in pairs, 0.6 (wrong) among 4
    assert table["orm"] == pytest.approx([0.25, 0.0, 0.0])
    # majority: "200" beats "210" on a tie (first seen) and outright among 4: always wrong
    assert table["majority"] == pytest.approx([0.25, 0.0, 0.0])
    # oracle (pass@n): some candidate right -> 1 of the 2 pairs, and among 4
    assert table["oracle"] == pytest.approx([0.25, 0.5, 1.0])


@pytest.mark.parametrize("script", TWINS)
def test_best_of_n_kl_bound(script):
    m = load_script(script)
    assert m.best_of_n_kl(1) == 0.0
    # log 4 - 3/4 = 1.386294 - 0.75
    assert m.best_of_n_kl(4) == pytest.approx(0.636294, abs=1e-6)
    assert m.best_of_n_kl(8) == pytest.approx(math.log(8) - 7 / 8)


@pytest.mark.parametrize("script", TWINS)
def test_train_returns_the_summary_keys(script, tmp_path):
    out = smoke_run(script)
    for k in (
        "accuracy_curve",
        "accuracy_gain_curve",
        "initial_test_accuracy",
        "test_accuracy",
        "accuracy_gain",
        "kl_to_ref",
        "sps",
        "wall_time",
        "global_step",
        "run_dir",
        "losses",
        "orm_test_accuracy",
        "best_of_n_table",
    ):
        assert k in out, k
    assert out["accuracy_gain"] == pytest.approx(out["test_accuracy"] - out["initial_test_accuracy"])
    assert out["kl_to_ref"] == pytest.approx(math.log(2) - 1 / 2)  # SMOKE_ARGS: best_of_n = 2
    assert out["best_of_n_table"]["n"] == [1, 2, 4]
    assert set(out["losses"]) == {"prm_loss", "orm_loss"}


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "field,value,match",
    [
        ("aggregation", "mean", "--aggregation"),
        ("num_rollouts", 0, "--num-rollouts"),
        ("best_of_n", 3, "--best-of-n"),
        ("samples_per_prompt", 0, "--samples-per-prompt"),
    ],
)
def test_bad_arguments_are_refused(script, tmp_path, field, value, match):
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
