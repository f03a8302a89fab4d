"""Tier 1 for DAPO: the four changes to GRPO on hand-computed numbers, in both twins (the worked
problem of docs/algorithms/dapo.md): clip-higher (dapo_loss), dynamic sampling
(informative_groups, dynamic_sample on a stub sampler), token-level aggregation (aggregate_loss,
padding invariance) and the soft overlong penalty (overlong_penalty); train()'s summary keys; and
the bad-input checks that stop a run before any work."""

import math

import jax
import numpy as np
import pytest

from helpers import conv, is_torch, load_script, smoke_run

TWINS = ["llm/dapo_torch.py", "llm/dapo_jax.py"]
tasks = load_script("llm/tasks.py")


def loss_and_grad(script, logp, old, adv, mask, clip_low=0.2, clip_high=0.28, kl_coef=0.0, token_level=True):
    """dapo_loss's four outputs as floats and d loss / d logp as numpy (reference log-probs = logp)."""
    m, c = load_script(script), conv(script)
    if is_torch(script):
        lp = c(logp).requires_grad_(True)
        out = m.dapo_loss(lp, c(old), c(logp), c(adv), c(mask), clip_low, clip_high, kl_coef, token_level)
        out[0].backward()
        return [x.item() for x in out], lp.grad.numpy()
    f = lambda lp: m.dapo_loss(
        lp, c(old), c(logp), c(adv), c(mask), clip_low, clip_high, kl_coef, token_level
    )
    return [float(x) for x in f(c(logp))], np.asarray(jax.grad(lambda lp: f(lp)[0])(c(logp)))


# ----------------------------------------------------------------------------- 1. clip-higher
@pytest.mark.parametrize("script", TWINS)
def test_clip_higher_keeps_a_rising_token_that_the_symmetric_clip_stops(script):
    # one token, pi / pi_old = 1.25, A = +1
    logp, old, adv, mask = np.log([[1.25]]), np.zeros((1, 1)), np.array([1.0]), np.ones((1, 1))
    # eps_high 0.28: 1.25 < 1.28, not clipped: loss -r A = -1.25, d loss / d logp = -r A = -1.25
    (loss, _, low, high), g = loss_and_grad(script, logp, old, adv, mask, clip_high=0.28)
    assert loss == pytest.approx(-1.25, abs=1e-6) and g[0, 0] == pytest.approx(-1.25, abs=1e-6)
    assert low == 0.0 and high == 0.0
    # eps_high 0.2 (GRPO): min(1.25, 1.2) = 1.2, the clipped branch is a constant: no gradient
    (loss, _, low, high), g = loss_and_grad(script, logp, old, adv, mask, clip_high=0.2)
    assert loss == pytest.approx(-1.2, abs=1e-6) and g[0, 0] == 0.0
    assert low == 0.0 and high == 1.0


@pytest.mark.parametrize("script", TWINS)
def test_clip_low_side_with_negative_advantage(script):
    old, adv, mask = np.zeros((1, 1)), np.array([-1.0]), np.ones((1, 1))
    # r = 0.75, A = -1: min(-0.75, clip(0.75, 0.8, 1.28) * -1 = -0.8) = -0.8: clipped, loss 0.8, no gradient
    (loss, _, low, high), g = loss_and_grad(script, np.log([[0.75]]), old, adv, mask)
    assert loss == pytest.approx(0.8, abs=1e-6) and g[0, 0] == 0.0 and low == 1.0 and high == 0.0
    # r = 0.85, A = -1: inside [0.8, 1.28]: loss 0.85, d loss / d logp = -r A = +0.85 (pushes pi down)
    (loss, _, low, high), g = loss_and_grad(script, np.log([[0.85]]), old, adv, mask)
    assert loss == pytest.approx(0.85, abs=1e-6) and g[0, 0] == pytest.approx(0.85, abs=1e-6) and low == 0.0
    # r = 1.25, A = -1, even with eps_high 0.2: min(-1.25, -1.2) = -1.25, the unclipped branch: the upper
    # bound only binds for A > 0 (and the lower only for A < 0)
    (loss, _, low, high), g = loss_and_grad(script, np.log([[1.25]]), old, adv, mask, clip_high=0.2)
    assert loss == pytest.approx(1.25, abs=1e-6) and g[0, 0] == pytest.approx(1.25, abs=1e-6) and high == 0.0


# ----------------------------------------------------------------------------- 2. dynamic sampling
@pytest.mark.parametrize("script", TWINS)
def test_informative_groups(script):
    m = load_script(script)
    correct = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 1]], dtype=np.float32)
    # all correct and all wrong: zero advantage, dropped; mixed groups kept
    np.testing.assert_array_equal(m.informative_groups(correct), [False, False, True, True])
    adv = np.asarray(m.group_advantages(conv(script)(correct)))
    np.testing.assert_array_equal(adv[:2], 0.0)


ALL1, ALL0, MIX = [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]


def stub_sampler(rounds):
    """A sample_round that hands out fixed rounds of 4 groups; group ids 4k..4k+3 in round k."""
    state = {"k": 0}

    def sample_round():
        k = state["k"]
        state["k"] += 1
        return {"id": np.arange(4 * k, 4 * k + 4), "correct": np.array(rounds[k], dtype=np.float32)}

    return sample_round, state


@pytest.mark.parametrize("script", TWINS)
def test_dynamic_sampling_fills_the_batch(script):
    m = load_script(script)
    # round 1: ids 0-3 = [all correct, mixed, all wrong, all wrong] -> keeps id 1
    # round 2: ids 4-7 = [mixed, all correct, mixed, all wrong]     -> keeps ids 4 and 6: 3 groups, stop
    sampler, state = stub_sampler([[ALL1, MIX, ALL0, ALL0], [MIX, ALL1, MIX, ALL0], [MIX] * 4])
    batch, stats = m.dynamic_sample(sampler, num_groups=3, max_rounds=8)
    np.testing.assert_array_equal(batch["id"], [1, 4, 6])
    assert state["k"] == 2, "round 3 is never drawn"
    assert stats == {"rounds": 2, "prompts_sampled": 8, "groups_filtered": 5, "groups_topped_up": 0}
    # more informative groups than needed: cut to num_groups in sampling order
    sampler, _ = stub_sampler([[ALL1, MIX, ALL0, ALL0], [MIX, MIX, MIX, ALL0]])
    batch, stats = m.dynamic_sample(sampler, num_groups=3, max_rounds=8)
    np.testing.assert_array_equal(batch["id"], [1, 4, 5])
    assert stats["rounds"] == 2 and stats["groups_filtered"] == 4


@pytest.mark.parametrize("script", TWINS)
def test_dynamic_sampling_round_cap_tops_up(script):
    m = load_script(script)
    # max 2 rounds, one informative group in each: ids 1 and 5 kept; the batch is topped up with the
    # first set-aside group (id 0, all correct: zero advantage) and the loop stops at the cap
    sampler, state = stub_sampler([[ALL1, MIX, ALL0, ALL0], [ALL0, MIX, ALL1, ALL1], [MIX] * 4])
    batch, stats = m.dynamic_sample(sampler, num_groups=3, max_rounds=2)
    np.testing.assert_array_equal(batch["id"], [1, 5, 0])
    assert state["k"] == 2
    assert stats == {"rounds": 2, "prompts_sampled": 8, "groups_filtered": 6, "groups_topped_up": 1}
    # without filtering (--no-dynamic-sampling): one round, every group, as GRPO
    sampler, _ = stub_sampler([[ALL1, MIX, ALL0, ALL0]])
    batch, stats = m.dynamic_sample(sampler, num_groups=4, max_rounds=1, filter_groups=False)
    np.testing.assert_array_equal(batch["id"], [0, 1, 2, 3])
    assert stats == {"rounds": 1, "prompts_sampled": 4, "groups_filtered": 0, "groups_topped_up": 0}


# ----------------------------------------------------------------------------- 3. token-level loss
LONG_SHORT = np.array([[1, 2, 3, 4, 5, 6], [10, 20, 0, 0, 0, 0]], dtype=np.float32)
LONG_SHORT_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]], dtype=np.float32)


def aggregate(script, per_token, mask, token_level):
    m, c = load_script(script), conv(script)
    f = lambda x: m.aggregate_loss(x, c(mask), token_level)
    if is_torch(script):
        x = c(per_token).requires_grad_(True)
        loss = f(x)
        loss.backward()
        return loss.item(), x.grad.numpy()
    return float(f(c(per_token))), np.asarray(jax.grad(f)(c(per_token)))


@pytest.mark.parametrize("script", TWINS)
def test_token_level_against_per_sequence_mean(script):
    # long completion: 6 tokens of loss 1..6 (sum 21, mean 3.5);
    # short: 2 tokens of loss 10, 20 (sum 30, mean 15)
    loss, g = aggregate(script, LONG_SHORT, LONG_SHORT_MASK, token_level=True)
    assert loss == pytest.approx((21 + 30) / 8, abs=1e-5)  # 6.375: every token weighs 1/8
    np.testing.assert_allclose(g, LONG_SHORT_MASK / 8, atol=1e-7)
    loss, g = aggregate(script, LONG_SHORT, LONG_SHORT_MASK, token_level=False)
    assert loss == pytest.approx((3.5 + 15) / 2, abs=1e-5)  # 9.25: a short token weighs 1/4, a long one 1/12
    np.testing.assert_allclose(g, [[1 / 12] * 6, [1 / 4, 1 / 4, 0, 0, 0, 0]], atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("token_level", [True, False])
def test_aggregation_is_padding_invariant(script, token_level):
    base, _ = aggregate(script, LONG_SHORT, LONG_SHORT_MASK, token_level)
    # three more padded positions and a whole padded row, all holding large junk losses
    per_token = np.full((3, 9), 1e3, dtype=np.float32)
    per_token[:2, :6] = LONG_SHORT
    mask = np.zeros((3, 9), dtype=np.float32)
    mask[:2, :6] = LONG_SHORT_MASK
    padded, g = aggregate(script, per_token, mask, token_level)
    assert padded == pytest.approx(base, abs=1e-5)
    assert (g[mask == 0] == 0).all()


@pytest.mark.parametrize("script", TWINS)
def test_token_level_dapo_loss_on_policy(script):
    # on-policy (r = 1), no KL: per-token loss = -A. Long completion (6 tokens) A = +1, short (2) A = -1.
    logp = np.log(np.full((2, 6), 0.5))
    (loss, *_), g = loss_and_grad(script, logp, logp, np.array([1.0, -1.0]), LONG_SHORT_MASK)
    assert loss == pytest.approx((6 * -1 + 2 * 1) / 8, abs=1e-6)  # -0.5
    np.testing.assert_allclose(g, LONG_SHORT_MASK * np.array([[-1 / 8], [1 / 8]]), atol=1e-6)
    (loss, *_), g = loss_and_grad(
        script, logp, logp, np.array([1.0, -1.0]), LONG_SHORT_MASK, token_level=False
    )
    assert loss == pytest.approx((-1 + 1) / 2, abs=1e-6)  # 0: GRPO's aggregation
    np.testing.assert_allclose(g[0, 0], -1 / 12, atol=1e-6)
    np.testing.assert_allclose(g[1, 0], 1 / 4, atol=1e-6)


# ----------------------------------------------------------------------------- 4. overlong shaping
@pytest.mark.parametrize("script", TWINS)
def test_overlong_penalty_values(script):
    m, c = load_script(script), conv(script)
    pen = lambda lengths, max_len, cache: np.asarray(m.overlong_penalty(c(lengths), max_len, cache))
    # defaults L_max 6, L_cache 2: 0 up to 4 tokens (a well-formed 2-digit answer: 3 digits + <eos>),
    # (4 - 5) / 2 = -0.5 at 5, (4 - 6) / 2 = -1 at 6 (a truncated completion counts 6)
    d = m.Args()
    assert tasks.completion_len(d.digits) == d.max_completion_len - d.overlong_cache == 4
    np.testing.assert_allclose(
        pen([1, 3, 4, 5, 6], d.max_completion_len, d.overlong_cache), [0, 0, 0, -0.5, -1.0], atol=1e-6
    )
    # L_max 8, L_cache 4: linear from 0 at 4 to -1 at 8, -1 beyond
    np.testing.assert_allclose(pen([4, 5, 6, 7, 8, 9], 8, 4), [0, -0.25, -0.5, -0.75, -1.0, -1.0], atol=1e-6)
    # the paper's sizes: L_max 20480, L_cache 4096: 0 up to 16384, -0.5 at 18432
    np.testing.assert_allclose(pen([16384, 18432, 20480], 20480, 4096), [0, -0.5, -1.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_group_advantages_and_k3_as_grpo(script):
    m, c = load_script(script), conv(script)
    # rewards [1, 0, 0, 0]: mean 0.25, std 0.433 -> +1.732, -0.577 (GRPO's worked problem 6)
    np.testing.assert_allclose(
        np.asarray(m.group_advantages(c([[1.0, 0, 0, 0]]), eps=0.0))[0],
        [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)],
        atol=1e-5,
    )
    # with a shaped reward: a wrong, over-long completion (0 - 0.5) is pushed below a wrong, short one
    adv = np.asarray(m.group_advantages(c([[1.0, 0.0, 0.0, -0.5]])))[0]
    assert adv[0] > 0 > adv[1] == adv[2] > adv[3]
    np.testing.assert_allclose(
        np.asarray(m.k3_kl(c([0.0, 0.0]), c([-0.5, 0.5]))), [0.1065, 0.1487], atol=1e-4
    )


# ----------------------------------------------------------------------------- train() summary
@pytest.mark.parametrize("script", TWINS)
def test_train_returns_the_comparison_keys(script, tmp_path):
    s = smoke_run(script)
    for key in (
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
        "prompts_sampled",
        "groups_filtered",
        "completions_sampled",
        "overlong_penalised",
        "truncated",
    ):
        assert key in s, key
    assert math.isfinite(s["kl_to_ref"])
    assert s["accuracy_gain"] == pytest.approx(s["test_accuracy"] - s["initial_test_accuracy"])
    # 2 steps of 4 prompts, at most 2 rounds each (a 4-step SFT start: groups are rarely mixed)
    assert 8 <= s["prompts_sampled"] <= 16 and s["completions_sampled"] == 4 * s["prompts_sampled"]
    assert set(s["losses"]) >= {"dapo_loss", "kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean"}


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(group_size=1), "--group-size"),
        (dict(clip_low=1.0), "--clip-low"),
        (dict(clip_high=0.0), "--clip-high"),
        (dict(max_sampling_rounds=0), "--max-sampling-rounds"),
        (dict(max_completion_len=3), "--max-completion-len"),
        (dict(overlong_cache=3), "--overlong-cache"),  # penalty from 3 tokens: hits every right answer
        (dict(overlong_cache=0), "--overlong-cache"),
        (dict(max_completion_len=12), "context"),  # 6 + 12 positions > 16
    ],
)
def test_bad_arguments_are_refused(script, bad, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **bad))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_wrong_checkpoint_is_refused(script, tmp_path):
    m = load_script(script)
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    lm.save_checkpoint(lm.TinyLM(tasks.VOCAB_SIZE, 10, 32, 1, 2), tmp_path / "ctx10.npz")
    logs = tmp_path / "runs"
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(logs), progress=False))
    # 10 positions hold GRPO's 6 + 4 but not the 6 + 6 of DAPO's longer sampling budget
    with pytest.raises(ValueError, match="context"):
        m.train(m.Args(sft_path=str(tmp_path / "ctx10.npz"), log_dir=str(logs), progress=False))
    assert not logs.exists()


@pytest.mark.parametrize("script", TWINS)
def test_prompts_longer_than_the_context_are_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="block_size|context"):
        m.train(m.Args(digits=5, max_completion_len=9, log_dir=str(tmp_path), progress=False))  # 12 + 9 > 16
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script", TWINS)
def test_with_the_four_changes_off_dapo_is_grpo(script, tmp_path):
    """clip_high = clip_low, no dynamic sampling, GRPO's aggregation, no length shaping, GRPO's
    4-token budget and beta: the same prompts, samples and updates as llm/grpo_*.py, figure for figure."""
    m, grpo = load_script(script), load_script(script.replace("dapo", "grpo"))
    common = dict(
        sft_steps=4,
        num_test=16,
        total_steps=2,
        prompts_per_step=4,
        group_size=4,
        eval_every=1,
        kl_coef=0.04,
        progress=False,
    )
    g = grpo.train(grpo.Args(log_dir=str(tmp_path), **common))
    d = m.train(
        m.Args(
            log_dir=str(tmp_path),
            clip_high=0.2,
            dynamic_sampling=False,
            token_level_loss=False,
            soft_overlong=False,
            max_completion_len=4,
            **common,
        )
    )
    assert d["prompts_sampled"] == 8 and d["groups_filtered"] == 0
    assert d["losses"]["dapo_loss"] == pytest.approx(g["losses"]["grpo_loss"], abs=1e-6)
    assert d["losses"]["kl"] == pytest.approx(g["losses"]["kl"], abs=1e-6)
    assert d["kl_to_ref"] == pytest.approx(g["kl_to_ref"], abs=1e-6)
