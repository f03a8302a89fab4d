"""Tier 1 for GRPO: worked problem 6 (docs/worked_problems.md) in both twins, exact numbers for
group_advantages and k3_kl; grpo_loss's masking, clipping and KL term; and the bad-input checks
(group size below 2, a checkpoint of the wrong vocabulary or context) that stop a run before work."""

import math

import jax
import numpy as np
import pytest

from helpers import conv, is_torch, load_script

TWINS = ["llm/grpo_torch.py", "llm/grpo_jax.py"]
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("script", TWINS)
def test_problem6_group_of_four_with_one_correct(script):
    m, c = load_script(script), conv(script)
    rewards = c([[1.0, 0.0, 0.0, 0.0]])
    # mean 0.25, population std sqrt(0.25 * 0.75) = 0.4330
    adv = np.asarray(m.group_advantages(rewards, eps=0.0))[0]
    p = 0.25
    np.testing.assert_allclose(adv, [math.sqrt((1 - p) / p)] + [-math.sqrt(p / (1 - p))] * 3, atol=1e-5)
    np.testing.assert_allclose(adv, [1.732, -0.577, -0.577, -0.577], atol=1e-3)
    # the default eps = 1e-4 only nudges the numbers
    np.testing.assert_allclose(np.asarray(m.group_advantages(rewards))[0], adv, atol=1e-3)
    # without the std: the mean baseline alone (Dr. GRPO)
    np.testing.assert_allclose(
        np.asarray(m.group_advantages(rewards, scale=False))[0], [0.75, -0.25, -0.25, -0.25], atol=1e-6
    )


@pytest.mark.parametrize("script", TWINS)
def test_problem6_uniform_groups_give_zero_advantage(script):
    m, c = load_script(script), conv(script)
    adv = np.asarray(m.group_advantages(c([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]])))
    np.testing.assert_array_equal(adv[:2], 0.0)
    np.testing.assert_allclose(adv[2], [1, -1, 1, -1], atol=1e-3)


@pytest.mark.parametrize("script", TWINS)
def test_problem6_k3_values_and_sign(script):
    m, c = load_script(script), conv(script)
    d = np.array([-0.5, 0.0, 0.5])
    # d = log pi_ref - log pi: take log pi = 0 and log pi_ref = d
    k3 = np.asarray(m.k3_kl(c(np.zeros(3)), c(d)))
    np.testing.assert_allclose(k3, [0.1065, 0.0, 0.1487], atol=1e-4)
    d = np.linspace(-5, 5, 101)
    assert (np.asarray(m.k3_kl(c(np.zeros_like(d)), c(d))) >= 0).all()


def loss_and_grad(script, logp, old, ref, adv, mask, clip_coef=0.2, kl_coef=0.0):
    m, c = load_script(script), conv(script)
    if is_torch(script):
        lp = c(logp).requires_grad_(True)
        loss, kl, clip = m.grpo_loss(lp, c(old), c(ref), c(adv), c(mask), clip_coef, kl_coef)
        loss.backward()
        return loss.item(), kl.item(), clip.item(), lp.grad.numpy()
    f = lambda lp: m.grpo_loss(lp, c(old), c(ref), c(adv), c(mask), clip_coef, kl_coef)
    (loss, kl, clip), g = f(c(logp)), jax.grad(lambda lp: f(lp)[0])(c(logp))
    return float(loss), float(kl), float(clip), np.asarray(g)


@pytest.mark.parametrize("script", TWINS)
def test_grpo_loss_on_policy_is_minus_mean_advantage_per_token(script):
    logp = np.log([[0.5, 0.5, 0.9], [0.2, 0.3, 0.9]])
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    adv = np.array([1.0, -1.0])
    loss, kl, clip, g = loss_and_grad(script, logp, logp, logp, adv, mask)
    assert loss == pytest.approx(0.0, abs=1e-6) and kl == pytest.approx(0.0) and clip == 0.0
    # d loss / d logp = -A / (tokens in the completion) / (completions), zero where masked
    np.testing.assert_allclose(g, [[-0.25, -0.25, 0.0], [1 / 6, 1 / 6, 1 / 6]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_grpo_loss_clip_and_kl(script):
    old = np.zeros((1, 2))
    logp = np.log([[1.5, 1.1]])  # ratios 1.5 (past 1 + eps) and 1.1
    ref = np.zeros((1, 2))
    loss, kl, clip, g = loss_and_grad(script, logp, old, ref, np.array([1.0]), np.ones((1, 2)))
    assert loss == pytest.approx(-(1.2 + 1.1) / 2, abs=1e-6)
    assert clip == pytest.approx(0.5)
    assert g[0, 0] == 0.0  # clipped on the favoured side
    assert g[0, 1] == pytest.approx(-1.1 / 2, abs=1e-6)  # d(r A)/d logp = r A, over 2 tokens
    # the KL term alone: zero advantage, loss = beta * mean k3
    loss, kl, _, _ = loss_and_grad(script, logp, logp, ref, np.array([0.0]), np.ones((1, 2)), kl_coef=0.1)
    d = -logp[0]
    expected = np.mean(np.exp(d) - d - 1)
    assert kl == pytest.approx(expected, abs=1e-6) and loss == pytest.approx(0.1 * expected, abs=1e-6)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_group_size_below_two_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--group-size"):
        m.train(m.Args(group_size=1, log_dir=str(tmp_path), progress=False))
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
