"""Tier 1 for SimPO: the worked problem (docs/algorithms/simpo.md) in both twins: simpo_loss on hand
numbers at two betas, each with gamma 0 and gamma > 0, length normalisation (equal per-token log-probs,
different lengths: equal SimPO rewards, different summed rewards), masking (tokens after <eos> change
nothing), the gradient's direction, the bad-input checks and the summary keys."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, smoke_run

TWINS = ["llm/simpo_torch.py", "llm/simpo_jax.py"]
tasks = load_script("llm/tasks.py")


def softplus(x):  # -log sigmoid(-x) = log(1 + e^x)
    return math.log1p(math.exp(x))


def simpo(script, pc, pr, lc, lr, beta, gamma):
    """simpo_loss of the script on (B,) lists; returns (loss, chosen rewards, rejected rewards)."""
    m = load_script(script)
    if script.endswith("torch.py"):
        loss, c, r = m.simpo_loss(
            *(torch.tensor(x, dtype=torch.float32) for x in (pc, pr, lc, lr)), beta, gamma
        )
        return loss.item(), c.numpy(), r.numpy()
    loss, c, r = m.simpo_loss(*(jnp.array(x, dtype=jnp.float32) for x in (pc, pr, lc, lr)), beta, gamma)
    return float(loss), np.asarray(c), np.asarray(r)


# The worked problem: one pair.
#   chosen:   log pi(y_w|x) = -2.0 over |y_w| = 4 tokens  ->  mean per-token log-prob -0.5
#   rejected: log pi(y_l|x) = -3.0 over |y_l| = 2 tokens  ->  mean per-token log-prob -1.5
# Reward r = (beta / |y|) log pi(y|x); loss = -log sigmoid(r_w - r_l - gamma) = softplus(gamma - (r_w - r_l)).
PAIR = ([-2.0], [-3.0], [4.0], [2.0])


@pytest.mark.parametrize("script", TWINS)
def test_worked_problem_beta_2(script):
    _, c, r = simpo(script, *PAIR, 2.0, 0.0)
    np.testing.assert_allclose(c, [-1.0], atol=1e-6)  # 2 / 4 * (-2)
    np.testing.assert_allclose(r, [-3.0], atol=1e-6)  # 2 / 2 * (-3); margin r_w - r_l = 2
    loss, _, _ = simpo(script, *PAIR, 2.0, 0.0)
    # gamma 0: -log sigmoid(2) = log(1 + e^-2) = log(1.135335) = 0.126928
    assert loss == pytest.approx(softplus(-2.0), abs=1e-6) and loss == pytest.approx(0.1269, abs=1e-4)
    loss, _, _ = simpo(script, *PAIR, 2.0, 1.0)
    # gamma 1: -log sigmoid(2 - 1) = log(1 + e^-1) = log(1.367879) = 0.313262
    assert loss == pytest.approx(softplus(-1.0), abs=1e-6) and loss == pytest.approx(0.3133, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_worked_problem_beta_1(script):
    _, c, r = simpo(script, *PAIR, 1.0, 0.0)
    np.testing.assert_allclose(c, [-0.5], atol=1e-6)  # 1 / 4 * (-2)
    np.testing.assert_allclose(r, [-1.5], atol=1e-6)  # 1 / 2 * (-3); margin 1
    loss, _, _ = simpo(script, *PAIR, 1.0, 0.0)
    # gamma 0: -log sigmoid(1) = log(1 + e^-1) = 0.313262
    assert loss == pytest.approx(softplus(-1.0), abs=1e-6) and loss == pytest.approx(0.3133, abs=1e-4)
    loss, _, _ = simpo(script, *PAIR, 1.0, 0.5)
    # gamma 0.5: -log sigmoid(1 - 0.5) = log(1 + e^-0.5) = log(1.606531) = 0.474077
    assert loss == pytest.approx(softplus(-0.5), abs=1e-6) and loss == pytest.approx(0.4741, abs=1e-4)
    loss, _, _ = simpo(script, *PAIR, 1.0, 1.0)
    # gamma 1 = the margin: -log sigmoid(0) = ln 2 = 0.693147 -- the pair is no longer "won"
    assert loss == pytest.approx(math.log(2.0), abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_batch_mean_and_gamma_shifts_every_pair(script):
    # Two pairs: the worked pair (margin 2 at beta 2) and a pair with equal rewards (margin 0).
    # gamma 0.5: (softplus(0.5 - 2) + softplus(0.5 - 0)) / 2 = (0.201413 + 0.974077) / 2 = 0.587745
    loss, _, _ = simpo(script, [-2.0, -1.0], [-3.0, -2.0], [4.0, 2.0], [2.0, 4.0], 2.0, 0.5)
    assert loss == pytest.approx((softplus(-1.5) + softplus(0.5)) / 2, abs=1e-6)
    assert loss == pytest.approx(0.5877, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_length_normalisation_hand_numbers(script):
    """Per-token log-prob -0.5 in both completions; the chosen one has 2 tokens (sum -1.0), the
    rejected one 4 (sum -2.0). SimPO's rewards: 2 / 2 * (-1) = 2 / 4 * (-2) = -1.0, equal, so the loss
    is ln 2 at gamma 0: the reward does not prefer either length. The summed (DPO-style, no reference)
    rewards beta log pi = -2.0 and -4.0 differ by 2 and would favour the shorter completion."""
    loss, c, r = simpo(script, [-1.0], [-2.0], [2.0], [4.0], 2.0, 0.0)
    np.testing.assert_allclose(c, r, atol=1e-6)
    np.testing.assert_allclose(c, [-1.0], atol=1e-6)
    assert loss == pytest.approx(math.log(2.0), abs=1e-6)
    assert 2.0 * -1.0 - 2.0 * -2.0 == pytest.approx(2.0)  # the summed rewards' margin


def _uniform_and_random_models(tmp_path):
    """A tiny LM with every weight zero (the final LayerNorm's gain 0 -> logits 0 -> every token has
    log-prob -log V) and a random one, saved once for both twins."""
    lm_t = load_script("llm/tinylm_torch.py")
    torch.manual_seed(0)
    model = lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2)
    lm_t.save_checkpoint(model, tmp_path / "random.npz")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    lm_t.save_checkpoint(model, tmp_path / "uniform.npz")


def _logps_and_lengths(script, path, prompts, completions):
    """pair_logps and completion_lengths of the script for one checkpoint and one batch."""
    m = load_script(script)
    mask = tasks.completion_mask(completions)
    if script.endswith("torch.py"):
        lm = load_script("llm/tinylm_torch.py")
        T = torch.as_tensor
        with torch.no_grad():
            lp = m.pair_logps(lm.load_checkpoint(path), T(prompts), T(completions), T(mask))
        return lp.numpy(), m.completion_lengths(T(mask)).numpy()
    lm = load_script("llm/tinylm_jax.py")
    model, params = lm.load_checkpoint(path)
    J = jnp.asarray
    return (
        np.asarray(m.pair_logps(model, params, J(prompts), J(completions), J(mask))),
        np.asarray(m.completion_lengths(J(mask))),
    )


@pytest.mark.parametrize("script", TWINS)
def test_length_normalisation_through_a_model(script, tmp_path):
    """Under the uniform model every token costs log V = log 14 = 2.639057 nats. Completions of 2, 3
    and 4 tokens (counting <eos>) get summed log-probs -5.278, -7.917, -10.556 but the same SimPO
    reward beta * (-log 14), so the loss at gamma 0 is ln 2 for any pairing of them."""
    _uniform_and_random_models(tmp_path)
    prompts = tasks.encode_prompts(np.array([[12, 34]] * 3), 2)
    E = tasks.EOS
    completions = np.array([[3, E, 0, 0], [3, 4, E, 0], [3, 4, 5, E]])  # |y| = 2, 3, 4
    lp, lengths = _logps_and_lengths(script, tmp_path / "uniform.npz", prompts, completions)
    log_v = math.log(tasks.VOCAB_SIZE)
    np.testing.assert_allclose(lengths, [2.0, 3.0, 4.0])
    np.testing.assert_allclose(lp, [-2 * log_v, -3 * log_v, -4 * log_v], atol=1e-5)
    loss, c, r = simpo(script, lp[[0, 0, 1]], lp[[1, 2, 2]], lengths[[0, 0, 1]], lengths[[1, 2, 2]], 2.0, 0.0)
    np.testing.assert_allclose(c, -2.0 * log_v, atol=1e-5)
    np.testing.assert_allclose(r, -2.0 * log_v, atol=1e-5)
    assert loss == pytest.approx(math.log(2.0), abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_padding_after_eos_changes_nothing(script, tmp_path):
    """The same completions with <pad> or with random tokens after <eos>: the same log-probs (the mask
    stops at <eos>), the same lengths |y| and so the same loss, under a random (non-uniform) model."""
    _uniform_and_random_models(tmp_path)
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 8)[1], 2)
    padded = rng.integers(2, 12, size=(8, 4))
    padded[::2, 1], padded[1::4, 2] = tasks.EOS, tasks.EOS
    eos_at = np.argmax(padded == tasks.EOS, axis=1)
    noisy = padded.copy()
    for i, e in enumerate(eos_at):
        if padded[i, e] == tasks.EOS:
            padded[i, e + 1 :] = tasks.PAD
            noisy[i, e + 1 :] = rng.integers(2, 12, size=len(noisy[i, e + 1 :]))
    assert not np.array_equal(padded, noisy)
    lp_a, len_a = _logps_and_lengths(script, tmp_path / "random.npz", prompts, padded)
    lp_b, len_b = _logps_and_lengths(script, tmp_path / "random.npz", prompts, noisy)
    np.testing.assert_allclose(lp_a, lp_b, atol=1e-6)
    np.testing.assert_array_equal(len_a, len_b)
    half = len(prompts) // 2
    la = simpo(script, lp_a[:half], lp_a[half:], len_a[:half], len_a[half:], 2.0, 1.0)[0]
    lb = simpo(script, lp_b[:half], lp_b[half:], len_b[:half], len_b[half:], 2.0, 1.0)[0]
    assert la == pytest.approx(lb, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_gradient_raises_chosen_lowers_rejected(script):
    """d loss / d log pi(y_w) = -(beta / |y_w|) sigmoid(gamma - margin), d loss / d log pi(y_l) =
    +(beta / |y_l|) sigmoid(gamma - margin). Worked problem, beta 2, gamma 1: sigmoid(1 - 2) = 0.268941,
    so -2/4 x 0.268941 = -0.134471 and +2/2 x 0.268941 = +0.268941; the rewards are detached."""
    m = load_script(script)
    beta, gamma = 2.0, 1.0
    s = 1.0 / (1.0 + math.exp(1.0))
    lc, lr = np.array([4.0], dtype=np.float32), np.array([2.0], dtype=np.float32)
    if script.endswith("torch.py"):
        pc, pr = torch.tensor([-2.0], requires_grad=True), torch.tensor([-3.0], requires_grad=True)
        loss, c, r = m.simpo_loss(pc, pr, torch.as_tensor(lc), torch.as_tensor(lr), beta, gamma)
        loss.backward()
        g = (pc.grad.item(), pr.grad.item())
        assert not c.requires_grad and not r.requires_grad
    else:
        f = lambda pc, pr: m.simpo_loss(pc, pr, lc, lr, beta, gamma)[0]
        g = tuple(float(x[0]) for x in jax.grad(f, argnums=(0, 1))(jnp.array([-2.0]), jnp.array([-3.0])))
        gc = jax.grad(lambda pc: m.simpo_loss(pc, jnp.array([-3.0]), lc, lr, beta, gamma)[1].sum())
        assert float(gc(jnp.array([-2.0]))[0]) == 0.0
    assert g[0] == pytest.approx(-beta / 4 * s, abs=1e-6) and g[1] == pytest.approx(beta / 2 * s, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    runs = str(tmp_path / "runs")
    for field, value in [("samples_per_prompt", 1), ("label_noise", 0.5), ("beta", 0.0), ("gamma", -0.5)]:
        with pytest.raises(ValueError, match="--" + field.replace("_", "-")):
            m.train(m.Args(**{field: value}, log_dir=runs, progress=False))
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=runs, progress=False))
    with pytest.raises(ValueError, match="block_size|context"):
        m.train(m.Args(digits=5, log_dir=runs, progress=False))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", TWINS)
def test_train_returns_the_llm_summary_keys(script, tmp_path):
    """The keys the LLM comparison table reads (docs/algorithms/llm.md), on the smoke budget."""
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
        "margin_curve",
        "chosen_logps_curve",
        "num_pairs",
        "margin_change",
    ):
        assert k in out, k
    assert out["accuracy_gain"] == pytest.approx(out["test_accuracy"] - out["initial_test_accuracy"])
    assert out["accuracy_curve"][-1][0] == out["global_step"] == len(out["margin_curve"])
    assert out["global_step"] == -(-out["num_pairs"] // 8)  # one epoch, batch 8
    assert np.isfinite(out["kl_to_ref"])
    assert set(out["losses"]) == {"simpo_loss", "margin"}
