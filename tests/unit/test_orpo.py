"""Tier 1 for ORPO: the worked problem (docs/algorithms/orpo.md) in both twins: log_odds and orpo_loss on
hand numbers at two lambdas, the stable log-odds against the naive log P - log(1 - P), the gradient of
the odds-ratio term in the paper's form, masking after <eos>, and the bad-input checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, smoke_run

TWINS = ["llm/orpo_torch.py", "llm/orpo_jax.py"]
tasks = load_script("llm/tasks.py")


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def naive_log_odds(x):
    """The textbook formula in float64: log P - log(1 - P), P = exp(x)."""
    return x - math.log(1.0 - math.exp(x))


# The worked problem: two pairs, summed completion log-probs and lengths (tokens up to and including <eos>).
#   pair 0: chosen  -1.2 over 4 tokens -> mean -0.3, P = exp(-0.3) = 0.740818
#           rejected -3.0 over 3 tokens -> mean -1.0, P = exp(-1.0) = 0.367879
#   pair 1: chosen  -0.4 over 2 tokens -> mean -0.2, P = 0.818731
#           rejected -1.5 over 3 tokens -> mean -0.5, P = 0.606531
CHOSEN, CHOSEN_LEN = [-1.2, -0.4], [4.0, 2.0]
REJECTED, REJECTED_LEN = [-3.0, -1.5], [3.0, 3.0]
# log odds = x - log(1 - e^x):
#   -0.3 - log(0.259182) = -0.3 + 1.350226 = 1.050226      -1.0 - log(0.632121) = -1.0 + 0.458675 = -0.541325
#   -0.2 - log(0.181269) = -0.2 + 1.707772 = 1.507772      -0.5 - log(0.393469) = -0.5 + 0.932752 =  0.432752
# log odds ratios: 1.050226 + 0.541325 = 1.591550 (odds ratio 4.911), 1.507772 - 0.432752 = 1.075020 (2.930)
LOG_ODDS_CHOSEN, LOG_ODDS_REJECTED = [1.050226, 1.507772], [-0.541325, 0.432752]
LOG_ODDS_RATIO = [1.591550, 1.075020]
# L_OR = mean(-log sigmoid(1.591550), -log sigmoid(1.075020)) = mean(0.185325, 0.293633) = 0.239479
# NLL  = (1.2 + 0.4) / (4 + 2) = 0.266667 (mean over all chosen completion tokens, as SFT's loss)
NLL, L_OR = 1.6 / 6.0, 0.239479


def run_loss(script, chosen, rejected, chosen_len, rejected_len, lam):
    m = load_script(script)
    if script.endswith("torch.py"):
        args = (torch.tensor(x, dtype=torch.float32) for x in (chosen, rejected, chosen_len, rejected_len))
        return [np.asarray(x.detach().numpy()) for x in m.orpo_loss(*args, lam)]
    args = (jnp.array(x, dtype=jnp.float32) for x in (chosen, rejected, chosen_len, rejected_len))
    return [np.asarray(x) for x in m.orpo_loss(*args, lam)]


def run_log_odds(script, x):
    m = load_script(script)
    if script.endswith("torch.py"):
        return m.log_odds(torch.tensor(x, dtype=torch.float32)).numpy()
    return np.asarray(m.log_odds(jnp.array(x, dtype=jnp.float32)))


@pytest.mark.parametrize("script", TWINS)
def test_log_odds_on_hand_numbers(script):
    np.testing.assert_allclose(run_log_odds(script, [-0.3, -0.2]), LOG_ODDS_CHOSEN, atol=1e-5)
    np.testing.assert_allclose(run_log_odds(script, [-1.0, -0.5]), LOG_ODDS_REJECTED, atol=1e-5)
    assert run_log_odds(script, [-math.log(2.0)])[0] == pytest.approx(0.0, abs=1e-6)  # P = 1/2: odds 1


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("lam,want", [(0.1, 0.290615), (1.0, 0.506146)])
def test_worked_problem(script, lam, want):
    loss, nll, or_loss, ratio = run_loss(script, CHOSEN, REJECTED, CHOSEN_LEN, REJECTED_LEN, lam)
    np.testing.assert_allclose(ratio, LOG_ODDS_RATIO, atol=1e-5)
    assert float(nll) == pytest.approx(NLL, abs=1e-6)  # 0.266667
    l_or = (-math.log(sigmoid(1.591550)) - math.log(sigmoid(1.075020))) / 2
    assert float(or_loss) == pytest.approx(l_or, abs=1e-5) and float(or_loss) == pytest.approx(L_OR, abs=1e-5)
    # lambda 0.1: 0.266667 + 0.1 x 0.239479 = 0.290615; lambda 1: 0.266667 + 0.239479 = 0.506146
    assert float(loss) == pytest.approx(NLL + lam * L_OR, abs=1e-5)
    assert float(loss) == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_lambda_zero_is_sft_on_the_chosen_completions(script):
    loss, nll, _, _ = run_loss(script, CHOSEN, REJECTED, CHOSEN_LEN, REJECTED_LEN, 0.0)
    assert float(loss) == pytest.approx(float(nll), abs=1e-7) and float(loss) == pytest.approx(NLL, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_stable_log_odds_matches_naive_and_stays_finite_as_p_goes_to_1(script):
    # Where the naive formula is finite (float64 here) the two agree ...
    xs = [-20.0, -5.0, -1.0, -0.3, -0.05, -1e-2, -1e-3, -1e-4, -1e-5]
    got = run_log_odds(script, xs)
    np.testing.assert_allclose(got, [naive_log_odds(x) for x in xs], rtol=1e-4, atol=1e-5)
    # ... and as P -> 1 the naive float32 formula breaks: exp(-1e-9) rounds to 1.0, log(1 - 1) = -inf,
    # log odds = +inf (and 0.0 is P = 1 exactly). The script's value stays finite: clamped at the
    # mean log-prob -1e-6, log odds = -1e-6 - log(1 - e^-1e-6) = 13.8155.
    with np.errstate(divide="ignore"):
        naive32 = [np.float32(x) - np.log(np.float32(1.0) - np.exp(np.float32(x))) for x in (-1e-9, 0.0)]
    assert np.all(np.isinf(naive32))
    got = run_log_odds(script, [-1e-6, -1e-9, -1e-20, 0.0])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, naive_log_odds(-1e-6), rtol=1e-4)  # 13.8155
    # A pair whose chosen completion has P = 1 exactly gives a finite loss and finite gradients.
    m = load_script(script)
    if script.endswith("torch.py"):
        c = torch.tensor([0.0, -0.4], requires_grad=True)
        loss = m.orpo_loss(
            c, torch.tensor(REJECTED), torch.tensor(CHOSEN_LEN), torch.tensor(REJECTED_LEN), 1.0
        )[0]
        loss.backward()
        g = c.grad.numpy()
    else:
        f = lambda c: m.orpo_loss(
            c, jnp.array(REJECTED), jnp.array(CHOSEN_LEN), jnp.array(REJECTED_LEN), 1.0
        )[0]
        loss, g = jax.value_and_grad(f)(jnp.array([0.0, -0.4]))
    assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(g)))


def loss_gradients(script, lam):
    """d loss / d (summed chosen log-probs), d loss / d (summed rejected log-probs) on the worked problem."""
    m = load_script(script)
    lens = (np.array(CHOSEN_LEN, dtype=np.float32), np.array(REJECTED_LEN, dtype=np.float32))
    if script.endswith("torch.py"):
        c, r = torch.tensor(CHOSEN, requires_grad=True), torch.tensor(REJECTED, requires_grad=True)
        m.orpo_loss(c, r, torch.as_tensor(lens[0]), torch.as_tensor(lens[1]), lam)[0].backward()
        return c.grad.numpy(), r.grad.numpy()
    f = lambda c, r: m.orpo_loss(c, r, jnp.asarray(lens[0]), jnp.asarray(lens[1]), lam)[0]
    gc, gr = jax.grad(f, argnums=(0, 1))(jnp.array(CHOSEN), jnp.array(REJECTED))
    return np.asarray(gc), np.asarray(gr)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("lam", [0.1, 1.0])
def test_gradient_in_the_papers_form(script, lam):
    """The paper's gradient of L_OR (its eq. 8-10):
    delta (grad log P_w / (1 - P_w) - grad log P_l / (1 - P_l)), delta = 1 / (1 + odds ratio), with a
    minus sign for descent; log P is the mean log-prob, so d / d (summed log-probs) adds 1 / |y|; the
    batch mean adds 1 / B (B = 2). The NLL adds -1 / 6 to each chosen sum (6 chosen tokens in the batch).
      pair 0: delta = 1 / (1 + 4.911358) = 0.169166; chosen -0.169166 / 0.259182 / (2 x 4) = -0.081586,
              rejected +0.169166 / 0.632121 / (2 x 3) = +0.044603
      pair 1: delta = 1 / (1 + 2.930051) = 0.254450; chosen -0.254450 / 0.181269 / (2 x 2) = -0.350928,
              rejected +0.254450 / 0.393469 / (2 x 3) = +0.107780"""
    ratio = np.array(LOG_ODDS_RATIO)
    delta = 1.0 / (1.0 + np.exp(ratio))
    p_w = np.exp(np.array(CHOSEN) / np.array(CHOSEN_LEN))
    p_l = np.exp(np.array(REJECTED) / np.array(REJECTED_LEN))
    d_or_chosen = -delta / (1.0 - p_w) / (2 * np.array(CHOSEN_LEN))
    d_or_rejected = delta / (1.0 - p_l) / (2 * np.array(REJECTED_LEN))
    np.testing.assert_allclose(d_or_chosen, [-0.081586, -0.350928], atol=1e-6)
    np.testing.assert_allclose(d_or_rejected, [0.044603, 0.107780], atol=1e-6)
    gc, gr = loss_gradients(script, lam)
    np.testing.assert_allclose(gc, -1.0 / 6.0 + lam * d_or_chosen, atol=1e-5)
    np.testing.assert_allclose(gr, lam * d_or_rejected, atol=1e-5)
    # L_OR's own gradient (loss at lambda minus loss at 0, over lambda): raises the chosen, lowers
    # the rejected.
    gc0, gr0 = loss_gradients(script, 0.0)
    assert np.all(gr0 == 0.0)  # no odds-ratio term, no gradient on the rejected completions
    np.testing.assert_allclose((gc - gc0) / lam, d_or_chosen, atol=1e-4)
    assert np.all((gc - gc0) < 0) and np.all(gr > 0)


@pytest.mark.parametrize("script", TWINS)
def test_padding_after_eos_does_not_change_the_loss(script, tmp_path):
    """Two batches equal up to and including each completion's <eos>, different after it (padding vs
    random tokens): same log-probs, same lengths, same loss."""
    m = load_script(script)
    lm_t = load_script("llm/tinylm_torch.py")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "policy.npz")
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 8)[1], 2)
    chosen, rejected = rng.integers(2, 12, size=(8, 4)), rng.integers(2, 12, size=(8, 4))
    chosen[:, 1], rejected[::2, 2], rejected[1::2, 0] = tasks.EOS, tasks.EOS, tasks.EOS
    padded_c, padded_r = chosen.copy(), rejected.copy()
    for c, p in ((chosen, padded_c), (rejected, padded_r)):
        mask = tasks.completion_mask(c)
        p[mask == 0] = tasks.PAD
        c[mask == 0] = rng.integers(1, 14, size=int((mask == 0).sum()))  # garbage, <eos> included
    assert not np.array_equal(chosen, padded_c) and not np.array_equal(rejected, padded_r)

    def losses(c, r):
        cm, rm = tasks.completion_mask(c), tasks.completion_mask(r)
        if script.endswith("torch.py"):
            policy, T = lm_t.load_checkpoint(tmp_path / "policy.npz"), torch.as_tensor
            with torch.no_grad():
                lc, lr = (
                    m.pair_logps(policy, T(prompts), T(c), T(cm)),
                    m.pair_logps(policy, T(prompts), T(r), T(rm)),
                )
                out = m.orpo_loss(lc, lr, T(cm).sum(-1), T(rm).sum(-1), 0.5)
            return lc.numpy(), lr.numpy(), cm.sum(-1), rm.sum(-1), out[0].item()
        model, params = load_script("llm/tinylm_jax.py").load_checkpoint(tmp_path / "policy.npz")
        J = jnp.asarray
        lc, lr = (
            m.pair_logps(model, params, J(prompts), J(c), J(cm)),
            m.pair_logps(model, params, J(prompts), J(r), J(rm)),
        )
        out = m.orpo_loss(lc, lr, J(cm).sum(-1), J(rm).sum(-1), 0.5)
        return np.asarray(lc), np.asarray(lr), cm.sum(-1), rm.sum(-1), float(out[0])

    a, b = losses(chosen, rejected), losses(padded_c, padded_r)
    np.testing.assert_array_equal(a[2], [2.0] * 8)  # chosen: one digit, then <eos>
    np.testing.assert_array_equal(a[3], [3.0, 1.0] * 4)  # rejected: <eos> third / first
    for x, y in zip(a[:4], b[:4]):
        np.testing.assert_allclose(x, y, atol=1e-6)
    assert a[4] == pytest.approx(b[4], abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    runs = str(tmp_path / "runs")
    for field, value in [("samples_per_prompt", 1), ("label_noise", 0.5), ("lam", -0.1), ("batch_size", 0)]:
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
    ):
        assert k in out, k
    assert out["accuracy_gain"] == pytest.approx(out["test_accuracy"] - out["initial_test_accuracy"])
    assert out["accuracy_curve"][-1][0] == out["global_step"] == len(out["margin_curve"]) > 0
    assert np.isfinite(out["kl_to_ref"])
    assert set(out["losses"]) == {"orpo_loss", "nll_loss", "or_loss", "log_odds_ratio"}
    assert out["losses"]["orpo_loss"] == pytest.approx(
        out["losses"]["nll_loss"] + 0.1 * out["losses"]["or_loss"], abs=1e-5
    )
