"""Tier 1 for RLOO: the worked problem (docs/algorithms/rloo.md) in both twins, exact numbers for
rloo_advantages (one correct answer in four, equal rewards, k/(k-1) times the centred reward); the
unbiasedness of the leave-one-out estimator, by exact enumeration of every group of 4 draws from a
toy categorical policy, against the (k-1)/k shrinkage of a baseline that includes the sample itself;
sequence_kl and rloo_loss's masking, aggregation and clipping on hand numbers; the keys train()
returns; and the bad-input checks (k below 2, a checkpoint of the wrong vocabulary or context) that
stop a run before work."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script, smoke_run

TWINS = ["llm/rloo_torch.py", "llm/rloo_jax.py"]
tasks = load_script("llm/tasks.py")


# ----------------------------------------------------------------------------- the advantages
@pytest.mark.parametrize("script", TWINS)
def test_worked_problem_one_correct_in_four(script):
    m, c = load_script(script), conv(script)
    adv = np.asarray(m.rloo_advantages(c([[1.0, 0.0, 0.0, 0.0]])))[0]
    # sample 1: 1 - mean(0, 0, 0) = +1;  samples 2-4: 0 - mean(1, 0, 0) = -1/3
    np.testing.assert_allclose(adv, [1.0, -1 / 3, -1 / 3, -1 / 3], atol=1e-6)
    # the same as k/(k-1) times the group-centred reward: 4/3 * [0.75, -0.25, -0.25, -0.25]
    np.testing.assert_allclose(adv, 4 / 3 * np.array([0.75, -0.25, -0.25, -0.25]), atol=1e-6)
    # and the advantages of a group sum to zero: +1 - 3 * 1/3
    assert adv.sum() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_equal_rewards_give_zero_advantage(script):
    m, c = load_script(script), conv(script)
    adv = np.asarray(m.rloo_advantages(c([[1, 1, 1, 1], [0, 0, 0, 0], [0.3, 0.3, 0.3, 0.3], [1, 0, 1, 0]])))
    np.testing.assert_array_equal(adv[:2], 0.0)
    np.testing.assert_allclose(adv[2], 0.0, atol=1e-6)
    # [1, 0, 1, 0]: a 1 has baseline (0 + 1 + 0) / 3 = 1/3, a 0 has (1 + 1 + 0) / 3 = 2/3
    np.testing.assert_allclose(adv[3], [2 / 3, -2 / 3, 2 / 3, -2 / 3], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_k_times_centred_reward_and_shift_invariance(script):
    m, c = load_script(script), conv(script)
    rng = np.random.default_rng(0)
    for k in (2, 3, 8):
        r = rng.normal(size=(5, k)).astype(np.float32)
        adv = np.asarray(m.rloo_advantages(c(r)))
        np.testing.assert_allclose(adv, k / (k - 1) * (r - r.mean(1, keepdims=True)), atol=1e-5)
        # a constant added to every reward (a KL-free reward offset) changes nothing
        np.testing.assert_allclose(np.asarray(m.rloo_advantages(c(r + 5.0))), adv, atol=1e-4)
    # k = 2: each sample's baseline is the other one, A = +-(r1 - r2)
    np.testing.assert_allclose(np.asarray(m.rloo_advantages(c([[1.0, 0.0]])))[0], [1.0, -1.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_one_sample_per_prompt_is_a_value_error(script):
    m, c = load_script(script), conv(script)
    with pytest.raises(ValueError, match="k >= 2"):
        m.rloo_advantages(c([[1.0], [0.0]]))


# ----------------------------------------------------------------------------- unbiasedness
# A toy "language model" with one token: a categorical policy pi = softmax(theta) over 3 actions,
# pi = [0.2, 0.5, 0.3], reward 1 for action 0 (the "correct answer") and 0 otherwise. Its expected
# reward is J = 0.2 and the exact policy gradient is dJ/dtheta_a = pi_a (r_a - J):
#     [0.2 * 0.8, 0.5 * -0.2, 0.3 * -0.2] = [0.16, -0.10, -0.06].
# One RLOO estimate from a group of k = 4 draws is -grad rloo_loss = (1/k) sum_i A_i grad log pi(a_i).
# There are 3^4 = 81 possible groups: the expectation of the estimator is their probability-weighted
# sum, computed exactly (no Monte Carlo noise, so the tolerance can be tight).
PI = np.array([0.2, 0.5, 0.3])
EXACT = np.array([0.16, -0.10, -0.06])


def estimate(script, actions, advantages):
    """-grad_theta rloo_loss for one group of actions with the given advantages, at theta = log PI,
    through the script's own rloo_loss and its framework's autodiff (on-policy: old = log pi)."""
    m = load_script(script)
    theta = np.log(PI).astype(np.float32)
    if is_torch(script):
        t = torch.tensor(theta, requires_grad=True)
        logp = torch.log_softmax(t, 0)[torch.as_tensor(actions)][:, None]  # (k, 1): one token each
        loss, _ = m.rloo_loss(logp, logp.detach(), torch.as_tensor(advantages), torch.ones_like(logp), 0.2)
        (-loss).backward()
        return t.grad.numpy().astype(np.float64)
    return np.asarray(
        _jax_estimate(m)(jnp.asarray(theta), jnp.asarray(actions), jnp.asarray(advantages)), dtype=np.float64
    )


_jitted = {}


def _jax_estimate(m):
    """-grad rloo_loss of the JAX twin, jitted once (every group has the same shapes)."""
    if m not in _jitted:

        def neg_loss(t, actions, advantages):
            logp = jax.nn.log_softmax(t)[actions][:, None]  # (k, 1): one token each
            return -m.rloo_loss(logp, jax.lax.stop_gradient(logp), advantages, jnp.ones_like(logp), 0.2)[0]

        _jitted[m] = jax.jit(jax.grad(neg_loss))
    return _jitted[m]


def expectation(script, rewards_of_action, baseline, k=4):
    """Exact mean and mean squared error of the estimator over all 3^k groups of k draws from PI."""
    m, c = load_script(script), conv(script)
    groups = list(itertools.product(range(3), repeat=k))
    r = np.array([[rewards_of_action[a] for a in g] for g in groups], dtype=np.float32)
    adv = {
        "leave-one-out": np.asarray(m.rloo_advantages(c(r))),
        "mean including itself": r - r.mean(1, keepdims=True),
        "none": r,
    }[baseline]
    mean, mse = np.zeros(3), 0.0
    for g, a in zip(groups, adv):
        p = np.prod(PI[list(g)])
        est = estimate(script, np.array(g), a.astype(np.float32))
        mean += p * est
        mse += p * ((est - EXACT) ** 2).sum()
    return mean, mse


@pytest.mark.parametrize("script", TWINS)
def test_leave_one_out_estimator_is_unbiased(script):
    loo, loo_mse = expectation(script, [1.0, 0.0, 0.0], "leave-one-out")
    np.testing.assert_allclose(loo, EXACT, atol=1e-5)
    # The group mean includes the sample itself: A = (k-1)/k * A_loo, so its expectation is the exact
    # gradient shrunk by 3/4, [0.12, -0.075, -0.045]: biased, though for a fixed k only in scale (the
    # direction is right, which is why the GRPO paper's mean baseline works).
    mean_incl, _ = expectation(script, [1.0, 0.0, 0.0], "mean including itself")
    np.testing.assert_allclose(mean_incl, 0.75 * EXACT, atol=1e-5)
    assert np.abs(mean_incl - EXACT).max() > 0.01
    # No baseline at all is unbiased too; the baseline is for the variance. Shift every reward by +1
    # (rewards [2, 1, 1]): the leave-one-out advantages do not change, so neither does the error
    # (E|g_hat - g|^2 = 0.0373); without a baseline it grows from 0.0392 to 0.2922.
    loo_shift, loo_shift_mse = expectation(script, [2.0, 1.0, 1.0], "leave-one-out")
    none, none_mse = expectation(script, [1.0, 0.0, 0.0], "none")
    none_shift, none_shift_mse = expectation(script, [2.0, 1.0, 1.0], "none")
    np.testing.assert_allclose(loo_shift, EXACT, atol=1e-5)
    np.testing.assert_allclose(none, EXACT, atol=1e-5)
    np.testing.assert_allclose(none_shift, EXACT, atol=1e-5)
    assert loo_mse == pytest.approx(0.03733, abs=1e-4) and loo_shift_mse == pytest.approx(loo_mse, abs=1e-5)
    assert none_mse == pytest.approx(0.0392, abs=1e-4) and none_shift_mse == pytest.approx(0.2922, abs=1e-4)


# ----------------------------------------------------------------------------- KL and the loss
@pytest.mark.parametrize("script", TWINS)
def test_sequence_kl_sums_completion_tokens_only(script):
    m, c = load_script(script), conv(script)
    logp = np.log([[0.5, 0.25, 0.9], [0.1, 0.2, 0.4]])
    ref = np.log([[0.25, 0.25, 0.1], [0.2, 0.2, 0.4]])
    mask = [[1, 1, 0], [1, 1, 1]]
    kl = np.asarray(m.sequence_kl(c(logp), c(ref), c(mask)))
    # row 0: log(0.5/0.25) + log(0.25/0.25) = ln 2 = 0.6931 (the masked log(0.9/0.1) = 2.197 is not counted)
    # row 1: log(0.1/0.2) + 0 + 0 = -ln 2: one sample's estimate can be negative (its mean cannot)
    np.testing.assert_allclose(kl, [np.log(2), -np.log(2)], atol=1e-6)


def loss_and_grad(script, logp, old, adv, mask, clip_coef=0.2):
    m, c = load_script(script), conv(script)
    if is_torch(script):
        lp = c(logp).requires_grad_(True)
        loss, clip = m.rloo_loss(lp, c(old), c(adv), c(mask), clip_coef)
        loss.backward()
        return loss.item(), clip.item(), lp.grad.numpy()
    f = lambda lp: m.rloo_loss(lp, c(old), c(adv), c(mask), clip_coef)
    (loss, clip), g = f(c(logp)), jax.grad(lambda lp: f(lp)[0])(c(logp))
    return float(loss), float(clip), np.asarray(g)


@pytest.mark.parametrize("script", TWINS)
def test_rloo_loss_on_policy_is_reinforce_on_the_sequence(script):
    logp = np.log([[0.5, 0.5, 0.9], [0.2, 0.3, 0.9]])
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    adv = np.array([1.0, 0.5])
    loss, clip, g = loss_and_grad(script, logp, logp, adv, mask)
    # ratio 1 for both: loss = -(1 * 1 + 1 * 0.5) / 2 = -0.75, nothing clipped
    assert loss == pytest.approx(-0.75, abs=1e-6) and clip == 0.0
    # d loss / d logp_t = -A_i / (completions) on every completion token: the SUM of a completion's
    # log-probs is the action's log-prob, so each token gets the whole advantage (-1/2 and -0.5/2),
    # whatever the length (GRPO divides by the length: -1/4 for the 2-token row); 0 where masked
    np.testing.assert_allclose(g, [[-0.5, -0.5, 0.0], [-0.25, -0.25, -0.25]], atol=1e-6)
    # a masked log-prob (after <eos>) can be anything: neither the loss nor the gradient moves
    changed = logp.copy()
    changed[0, 2] = np.log(0.01)
    loss2, _, g2 = loss_and_grad(script, changed, changed, adv, mask)
    assert loss2 == pytest.approx(loss, abs=1e-6)
    np.testing.assert_allclose(g2, g, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_rloo_loss_clips_the_sequence_ratio(script):
    # two completions of two tokens; sequence log-ratios ln 1.5 (past 1 + eps) and ln 1.1
    old = np.zeros((2, 2))
    logp = np.array([[np.log(1.5) - 0.1, 0.1], [np.log(1.1), 0.0]])
    loss, clip, g = loss_and_grad(script, logp, old, np.array([1.0, 1.0]), np.ones((2, 2)))
    # A > 0: min(1.5 A, 1.2 A) = 1.2 and min(1.1, 1.1) = 1.1 -> loss = -(1.2 + 1.1) / 2 = -1.15
    assert loss == pytest.approx(-1.15, abs=1e-6) and clip == pytest.approx(0.5)
    np.testing.assert_allclose(g[0], 0.0, atol=1e-7)  # clipped on the favoured side: no gradient
    np.testing.assert_allclose(g[1], -1.1 / 2, atol=1e-6)  # d(rho A)/d logp_t = rho A, over 2 completions
    # A < 0 with rho 1.5: min(-1.5, -1.2) = -1.5 is the unclipped term, so the clip does not bind and
    # the gradient flows (the clip only stops moves further in the advantage's direction): loss 1.5,
    # d/d logp_t = 1.5, clip fraction 0
    loss, clip, g = loss_and_grad(script, logp[:1], old[:1], np.array([-1.0]), np.ones((1, 2)))
    assert loss == pytest.approx(1.5, abs=1e-5) and clip == 0.0
    np.testing.assert_allclose(g, [[1.5, 1.5]], atol=1e-5)


# ----------------------------------------------------------------------------- train()
@pytest.mark.parametrize("script", TWINS)
def test_train_returns_the_llm_summary(script, tmp_path):
    m = load_script(script)
    out = smoke_run(script)
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
    ):
        assert key in out, key
    assert out["accuracy_gain"] == pytest.approx(out["test_accuracy"] - out["initial_test_accuracy"])
    assert np.isfinite(out["kl_to_ref"]) and out["global_step"] == m.SMOKE_ARGS["total_steps"]
    assert set(out["losses"]) == {"rloo_loss", "kl", "entropy", "clip_ratio", "frac_reward_zero_std"}


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_group_size_below_two_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--group-size"):
        m.train(m.Args(group_size=1, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--update-epochs"):
        m.train(m.Args(update_epochs=0, log_dir=str(tmp_path), progress=False))
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
