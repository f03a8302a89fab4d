"""Tier 1 for Dr. GRPO: the worked problem (docs/algorithms/dr_grpo.md) in both twins: the mean-only
advantages of rewards [1, 0, 0, 0] against GRPO's standardised ones (group_advantages imported from
llm/grpo_*.py); the aggregation of a long and a short completion with known per-token losses (GRPO's
per-completion mean against the constant normaliser), padding invariance; dr_grpo_loss's clip, KL
term and masking, GRPO's loss recovered by loss_type="grpo"; and the bad-input checks that stop a
run before any work."""

import jax
import numpy as np
import pytest

from helpers import conv, is_torch, load_script

TWINS = ["llm/dr_grpo_torch.py", "llm/dr_grpo_jax.py"]
GRPO = {"llm/dr_grpo_torch.py": "llm/grpo_torch.py", "llm/dr_grpo_jax.py": "llm/grpo_jax.py"}
tasks = load_script("llm/tasks.py")


# ----------------------------------------------------------------------------- worked problem: advantages
@pytest.mark.parametrize("script", TWINS)
def test_advantages_one_correct_in_four_against_grpo(script):
    m, grpo, c = load_script(script), load_script(GRPO[script]), conv(script)
    rewards = c([[1.0, 0.0, 0.0, 0.0]])
    # Dr. GRPO: r - mean, mean = 0.25 -> [0.75, -0.25, -0.25, -0.25]; they sum to 0
    adv = np.asarray(m.group_advantages(rewards))[0]
    np.testing.assert_allclose(adv, [0.75, -0.25, -0.25, -0.25], atol=1e-7)
    # GRPO divides the same numbers by the population std sqrt(0.25 * 0.75) = 0.4330 (+ eps 1e-4):
    # 0.75 / 0.4330 = 1.732, -0.25 / 0.4330 = -0.577
    grpo_adv = np.asarray(grpo.group_advantages(rewards))[0]
    np.testing.assert_allclose(grpo_adv, [1.732, -0.577, -0.577, -0.577], atol=1e-3)
    np.testing.assert_allclose(grpo_adv * (np.sqrt(0.25 * 0.75) + 1e-4), adv, atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_advantages_do_not_depend_on_the_groups_spread(script):
    """The difficulty bias: GRPO gives the lone success of a 1-in-8 group +2.65 and that of a 4-in-8
    group +1.0; Dr. GRPO gives +0.875 and +0.5, its reward minus the mean, whatever the std."""
    m, grpo, c = load_script(script), load_script(GRPO[script]), conv(script)
    rewards = c([[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    adv = np.asarray(m.group_advantages(rewards))
    np.testing.assert_allclose(adv[0], [0.875] + [-0.125] * 7, atol=1e-6)
    np.testing.assert_allclose(adv[1], [0.5] * 4 + [-0.5] * 4, atol=1e-6)
    np.testing.assert_array_equal(adv[2], 0.0)  # uniform group: no signal
    grpo_adv = np.asarray(grpo.group_advantages(rewards, eps=0.0))
    # 1-in-8: std sqrt(1/8 * 7/8) = 0.3307 -> 0.875 / 0.3307 = 2.646; 4-in-8: std 0.5 -> 1.0
    np.testing.assert_allclose([grpo_adv[0, 0], grpo_adv[1, 0]], [2.646, 1.0], atol=1e-3)


# ----------------------------------------------------------------------------- worked problem: aggregation
LONG = [0.4, 0.2, 0.2, 0.2]  # 4 tokens, sum 1.0
SHORT = [0.6, 0.0, 0.0, 0.0]  # 1 token, then 3 positions of padding (mask 0)
MASK = [[1, 1, 1, 1], [1, 0, 0, 0]]


def aggregate_and_weights(script, per_token, mask, max_len, loss_type):
    """The aggregated loss and its gradient with respect to each per-token loss (the token weights)."""
    m, c = load_script(script), conv(script)
    if is_torch(script):
        x = c(per_token).requires_grad_(True)
        out = m.aggregate(x, c(mask), max_len, loss_type)
        out.backward()
        return out.item(), x.grad.numpy()
    f = lambda x: m.aggregate(x, c(mask), max_len, loss_type)
    return float(f(c(per_token))), np.asarray(jax.grad(f)(c(per_token)))


@pytest.mark.parametrize("script", TWINS)
def test_aggregation_long_and_short_completion(script):
    # GRPO: mean over each completion's own tokens, then over the 2 completions
    #   (1.0 / 4 + 0.6 / 1) / 2 = (0.25 + 0.60) / 2 = 0.425
    #   token weights 1 / (2 * 4) = 0.125 in the long one, 1 / (2 * 1) = 0.5 for the short one's token
    loss, w = aggregate_and_weights(script, [LONG, SHORT], MASK, 4.0, "grpo")
    assert loss == pytest.approx(0.425, abs=1e-6)
    np.testing.assert_allclose(w, [[0.125] * 4, [0.5, 0, 0, 0]], atol=1e-7)
    # Dr. GRPO: sum over each completion, divided by the constant max_len = 4, then the mean
    #   (1.0 / 4 + 0.6 / 4) / 2 = (0.25 + 0.15) / 2 = 0.2
    #   every token weighs 1 / (2 * 4) = 0.125, in the long and in the short completion alike
    loss, w = aggregate_and_weights(script, [LONG, SHORT], MASK, 4.0, "dr_grpo")
    assert loss == pytest.approx(0.2, abs=1e-6)
    np.testing.assert_allclose(w, [[0.125] * 4, [0.125, 0, 0, 0]], atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo"])
def test_aggregation_ignores_padding(script, loss_type):
    """Three more positions with mask 0 and large values change neither the loss nor the weights of
    the real tokens (the constant max_len stays the generation budget, 4)."""
    loss, w = aggregate_and_weights(script, [LONG, SHORT], MASK, 4.0, loss_type)
    padded = np.concatenate([[LONG, SHORT], np.full((2, 3), 100.0)], axis=1)
    mask = np.concatenate([MASK, np.zeros((2, 3))], axis=1)
    loss_p, w_p = aggregate_and_weights(script, padded, mask, 4.0, loss_type)
    assert loss_p == pytest.approx(loss, abs=1e-6)
    np.testing.assert_allclose(w_p[:, :4], w, atol=1e-7)
    np.testing.assert_array_equal(w_p[:, 4:], 0.0)


def loss_and_grad(
    script, logp, old, ref, adv, mask, max_len=4.0, clip_coef=0.2, kl_coef=0.0, loss_type="dr_grpo"
):
    m, c = load_script(script), conv(script)
    if is_torch(script):
        lp = c(logp).requires_grad_(True)
        loss, kl, clip = m.dr_grpo_loss(
            lp, c(old), c(ref), c(adv), c(mask), clip_coef, kl_coef, max_len, loss_type
        )
        loss.backward()
        return loss.item(), kl.item(), clip.item(), lp.grad.numpy()
    f = lambda lp: m.dr_grpo_loss(lp, c(old), c(ref), c(adv), c(mask), clip_coef, kl_coef, max_len, loss_type)
    (loss, kl, clip), g = f(c(logp)), jax.grad(lambda lp: f(lp)[0])(c(logp))
    return float(loss), float(kl), float(clip), np.asarray(g)


@pytest.mark.parametrize("script", TWINS)
def test_length_bias_on_two_wrong_completions(script):
    """Two wrong completions of one prompt, advantage -0.25 each, a 4-token and a 1-token one,
    on-policy (ratio 1). d loss / d log pi of a token is -A times its weight:
    GRPO pushes the short one's token down with 0.25 / (2 * 1) = 0.125, each long token with
    0.25 / (2 * 4) = 0.03125 (a long wrong answer is punished 4 times less per token);
    Dr. GRPO pushes every token with 0.25 / (2 * 4) = 0.03125."""
    logp = np.log([[0.5, 0.5, 0.9, 0.9], [0.2, 0.3, 0.3, 0.3]])
    adv = np.array([-0.25, -0.25])
    *_, g = loss_and_grad(script, logp, logp, logp, adv, MASK)
    np.testing.assert_allclose(g, [[0.03125] * 4, [0.03125, 0, 0, 0]], atol=1e-7)
    *_, g = loss_and_grad(script, logp, logp, logp, adv, MASK, loss_type="grpo")
    np.testing.assert_allclose(g, [[0.03125] * 4, [0.125, 0, 0, 0]], atol=1e-7)
    # the same numbers from GRPO's own loss
    grpo, c = load_script(GRPO[script]), conv(script)
    if is_torch(script):
        lp = c(logp).requires_grad_(True)
        grpo.grpo_loss(lp, c(logp), c(logp), c(adv), c(MASK), 0.2, 0.0)[0].backward()
        g_grpo = lp.grad.numpy()
    else:
        g_grpo = np.asarray(
            jax.grad(lambda lp: grpo.grpo_loss(lp, c(logp), c(logp), c(adv), c(MASK), 0.2, 0.0)[0])(c(logp))
        )
    np.testing.assert_allclose(g_grpo, g, atol=1e-7)


@pytest.mark.parametrize("script", TWINS)
def test_loss_clip_and_kl(script):
    old = np.zeros((1, 2))
    logp = np.log([[1.5, 1.1]])  # ratios 1.5 (past 1 + eps) and 1.1
    ref = np.zeros((1, 2))
    # surrogate min(r A, clip(r) A) with A = 1: [1.2, 1.1]; summed, over max_len 4: -(2.3) / 4 = -0.575
    loss, kl, clip, g = loss_and_grad(script, logp, old, ref, np.array([1.0]), np.ones((1, 2)))
    assert loss == pytest.approx(-0.575, abs=1e-6)
    assert clip == pytest.approx(0.5)
    assert g[0, 0] == 0.0  # clipped on the favoured side
    assert g[0, 1] == pytest.approx(-1.1 / 4, abs=1e-6)  # d(r A)/d logp = r A, over max_len 4
    # the KL term alone (zero advantage): loss = beta * (sum of k3) / max_len; the logged KL is the
    # mean k3 per token. d = log pi_ref - log pi = [-0.4055, -0.0953], e^d = [2/3, 1/1.1]:
    # k3 = e^d - d - 1 = [0.6667 + 0.4055 - 1, 0.9091 + 0.0953 - 1] = [0.0721, 0.0044]
    loss, kl, _, _ = loss_and_grad(script, logp, logp, ref, np.array([0.0]), np.ones((1, 2)), kl_coef=0.1)
    d = -logp[0]
    k3 = np.exp(d) - d - 1
    np.testing.assert_allclose(k3, [0.0721, 0.0044], atol=1e-4)
    assert kl == pytest.approx(k3.mean(), abs=1e-6) and loss == pytest.approx(0.1 * k3.sum() / 4, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_grpo_loss_type_is_grpos_loss(script):
    """loss_type="grpo" (the comparison run's aggregation) is llm/grpo_*.py's grpo_loss, value and clip."""
    m, grpo, c = load_script(script), load_script(GRPO[script]), conv(script)
    rng = np.random.default_rng(0)
    logp, old, ref = (np.log(rng.uniform(0.05, 1.0, (6, 5))) for _ in range(3))
    mask = np.ones((6, 5))
    mask[::2, 3:] = 0.0
    adv = rng.normal(size=6)
    ours = m.dr_grpo_loss(c(logp), c(old), c(ref), c(adv), c(mask), 0.2, 0.04, 5.0, "grpo")
    theirs = grpo.grpo_loss(c(logp), c(old), c(ref), c(adv), c(mask), 0.2, 0.04)
    for a, b in zip(ours, theirs):
        assert float(a) == pytest.approx(float(b), abs=1e-6)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
def test_group_size_below_two_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--group-size"):
        m.train(m.Args(group_size=1, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_unknown_loss_type_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--loss-type"):
        m.train(m.Args(loss_type="bnpo", log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


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
