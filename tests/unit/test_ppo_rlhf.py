"""Tier 1 for RLHF with PPO: the worked problem of docs/algorithms/ppo_rlhf.md in both twins --
the per-token reward (KL on every completion token, the reward-model score at <eos>, nothing after),
GAE with gamma 1, advantage whitening, the clipped policy and value losses and the adaptive KL
controller on hand-computed numbers; the reward-model checkpoint round trip; and the bad-input
checks that stop a run before any work."""

import jax
import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["llm/ppo_rlhf_torch.py", "llm/ppo_rlhf_jax.py"]
tasks = load_script("llm/tasks.py")


# ----------------------------------------------------------------------------- the per-token reward
@pytest.mark.parametrize("script", TWINS)
def test_per_token_rewards_by_hand(script):
    m, c = load_script(script), conv(script)
    logp = c([[-0.5, -1.0, -0.2, -3.0], [-0.3, -0.4, -2.0, -2.0]])
    ref_logp = c([[-0.7, -0.8, -0.2, -1.0], [-0.3, -0.9, -1.0, -1.0]])
    # completion 1: 2 digits then <eos> at position 2; completion 2: 1 digit then <eos> at position 1
    mask = c([[1, 1, 1, 0], [1, 1, 0, 0]])
    rewards, kl = m.per_token_rewards(logp, ref_logp, c([2.0, -1.0]), mask, 0.1)
    # log pi - log pi_ref: row 1 (0.2, -0.2, 0.0 | -2.0 masked), row 2 (0.0, 0.5 | -1.0, -1.0 masked)
    np.testing.assert_allclose(np.asarray(kl), [[0.2, -0.2, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0]], atol=1e-6)
    # r_t = -0.1 kl_t, and the score at <eos>: row 1 (-0.02, 0.02, 0 + 2.0, 0), row 2 (0, -0.05 - 1.0, 0, 0)
    np.testing.assert_allclose(
        np.asarray(rewards), [[-0.02, 0.02, 2.0, 0.0], [0.0, -1.05, 0.0, 0.0]], atol=1e-6
    )
    # the sequence KL estimate is the masked sum: 0.0 and 0.5 nats
    np.testing.assert_allclose(np.asarray(kl).sum(-1), [0.0, 0.5], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_per_token_rewards_without_eos_score_the_last_token(script):
    m, c = load_script(script), conv(script)
    rewards, _ = m.per_token_rewards(
        c([[0.0, 0.0, 0.0]]), c([[0.0, 0.0, 0.0]]), c([0.7]), c([[1, 1, 1]]), 0.1
    )
    np.testing.assert_allclose(np.asarray(rewards), [[0.0, 0.0, 0.7]], atol=1e-6)


# ----------------------------------------------------------------------------- GAE and whitening
@pytest.mark.parametrize("script", TWINS)
def test_gae_gamma_one_by_hand(script):
    m, c = load_script(script), conv(script)
    rewards = c([[-0.02, 0.02, 2.0, 0.0]])
    values = c([[0.5, 1.0, 1.5, 9.0]])  # 9.0 sits after <eos>: it must never be bootstrapped from
    mask = c([[1, 1, 1, 0]])
    adv, ret = m.compute_gae(rewards, values, mask, 1.0, 0.95)
    # deltas: -0.02 + 1.0 - 0.5 = 0.48, 0.02 + 1.5 - 1.0 = 0.52, 2.0 + 0 - 1.5 = 0.5 (V after <eos> = 0)
    # A_2 = 0.5; A_1 = 0.52 + 0.95 * 0.5 = 0.995; A_0 = 0.48 + 0.95 * 0.995 = 1.42525; A_3 = 0 (masked)
    np.testing.assert_allclose(np.asarray(adv), [[1.42525, 0.995, 0.5, 0.0]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret)[0, :3], [1.92525, 1.995, 2.0], atol=1e-5)
    # lambda = 1: the returns are the plain rewards-to-go 2.0, 2.02, 2.0
    _, ret = m.compute_gae(rewards, values, mask, 1.0, 1.0)
    np.testing.assert_allclose(np.asarray(ret)[0, :3], [2.0, 2.02, 2.0], atol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_whiten_masked_by_hand(script):
    m, c = load_script(script), conv(script)
    # mean of (1, 2, 3) = 2, population variance 2/3: (x - 2) / sqrt(2/3) = -1.2247, 0, 1.2247; 100 masked
    out = np.asarray(m.whiten_masked(c([[1.0, 2.0, 3.0, 100.0]]), c([[1, 1, 1, 0]])))
    np.testing.assert_allclose(out, [[-1.224745, 0.0, 1.224745, 0.0]], atol=1e-5)


# ----------------------------------------------------------------------------- the clipped losses
def with_grad(script, fn, x, *others):
    """(outputs of fn(x, *others), d output[0] / d x) in the script's framework."""
    c = conv(script)
    if is_torch(script):
        xt = c(x).requires_grad_(True)
        out = fn(xt, *map(c, others))
        out[0].backward()
        return [float(o.detach()) for o in out], xt.grad.numpy()
    f = lambda x: fn(x, *map(c, others))
    return [float(o) for o in f(c(x))], np.asarray(jax.grad(lambda x: f(x)[0])(c(x)))


@pytest.mark.parametrize("script", TWINS)
def test_ppo_policy_loss_by_hand(script):
    m = load_script(script)
    logp = np.log([[1.5, 0.7, 1.1, 0.7]])  # ratios against old_logp = 0
    adv = [[1.0, 1.0, -1.0, -2.0]]
    (loss, clip, _), g = with_grad(
        script,
        lambda lp, o, a, mk: m.ppo_policy_loss(lp, o, a, mk, 0.2),
        logp,
        np.zeros((1, 4)),
        adv,
        np.ones((1, 4)),
    )
    # min(rA, clip(r)A): 1.2 (clipped at 1.2), 0.7 (below 0.8 but the min keeps it), -1.1, -1.6 (0.8 * -2)
    assert loss == pytest.approx(-(1.2 + 0.7 - 1.1 - 1.6) / 4, abs=1e-6)  # = +0.2
    assert clip == pytest.approx(0.75)  # 1.5, 0.7, 0.7 are off by > 0.2
    # d loss / d logp = -r A / 4 where the unclipped term is the min, 0 where the clip holds it
    np.testing.assert_allclose(g, [[0.0, -0.7 / 4, 1.1 / 4, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_clipped_value_loss_by_hand(script):
    m = load_script(script)
    (loss, vclip), g = with_grad(
        script,
        lambda v, o, r, mk: m.clipped_value_loss(v, o, r, mk, 0.2),
        [[1.5, 0.9, 1.5, 5.0]],
        [[1.0, 1.0, 1.0, 1.0]],
        [[2.0, 2.0, 0.0, 0.0]],
        [[1, 1, 1, 0]],
    )
    # token 1: V = 1.5, V_clip = 1.2: max((1.5 - 2)^2, (1.2 - 2)^2) = 0.64 (the clipped error, no gradient)
    # token 2: V = 0.9 inside the clip: 1.21; token 3: V = 1.5, R = 0: max(2.25, 1.44) = 2.25; token 4 masked
    assert loss == pytest.approx(0.5 * (0.64 + 1.21 + 2.25) / 3, abs=1e-6)  # = 0.68333
    assert vclip == pytest.approx(1 / 3)
    np.testing.assert_allclose(g, [[0.0, 0.5 * 2 * (0.9 - 2.0) / 3, 0.5 * 2 * 1.5 / 3, 0.0]], atol=1e-6)


# ----------------------------------------------------------------------------- the adaptive KL controller
@pytest.mark.parametrize("script", TWINS)
def test_adaptive_kl_update_by_hand(script):
    m = load_script(script)
    # KL 3 nats against a target of 2: error 0.5, clipped to 0.2; 256 completions of a 10,000 horizon:
    # beta = 0.1 * (1 + 0.2 * 256 / 10000) = 0.1 * 1.00512
    assert m.adaptive_kl_update(0.1, 3.0, 2.0, 10000, 256) == pytest.approx(0.100512, abs=1e-9)
    # KL 1.8: error -0.1, beta = 0.1 * (1 - 0.1 * 0.0256) = 0.0997440
    assert m.adaptive_kl_update(0.1, 1.8, 2.0, 10000, 256) == pytest.approx(0.099744, abs=1e-9)
    # on target: unchanged
    assert m.adaptive_kl_update(0.1, 2.0, 2.0, 10000, 256) == pytest.approx(0.1)


# ----------------------------------------------------------------------------- reward-model checkpoints
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_reward_model_checkpoint_round_trip(framework, tmp_path):
    rm = load_script(f"llm/reward_model_{framework}.py")
    lm_t = load_script("llm/tinylm_torch.py")
    rm_t = load_script("llm/reward_model_torch.py")
    torch.manual_seed(0)
    model = rm_t.RewardModel(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2))
    with torch.no_grad():
        model.head.weight.normal_()
        model.head.bias.fill_(0.25)
    rm_t.save_reward_model(model, tmp_path / "rm.npz")
    tokens = np.concatenate([tasks.encode_prompts(tasks.make_splits(2, 4)[1], 2), np.full((4, 4), 3)], axis=1)
    last = np.full(4, 9)
    with torch.no_grad():
        expected = model(torch.as_tensor(tokens), torch.as_tensor(last)).numpy()
    if framework == "torch":
        with torch.no_grad():
            got = rm.load_reward_model(tmp_path / "rm.npz")(
                torch.as_tensor(tokens), torch.as_tensor(last)
            ).numpy()
    else:
        net, params = rm.load_reward_model(tmp_path / "rm.npz")
        got = np.asarray(net.apply(params, tokens, last))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "plain.npz")
    with pytest.raises(ValueError, match="reward-model checkpoint"):
        rm.load_reward_model(tmp_path / "plain.npz")


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides,match",
    [
        (dict(temperature=0.0), "--temperature"),
        (dict(prompts_per_step=10, num_minibatches=4), "--num-minibatches"),
        (dict(kl_coef=-0.1), "--kl-coef"),
        (dict(adaptive_kl=True, target_kl=0.0), "--target-kl"),
        (dict(adaptive_kl=True, kl_coef=0.0), "adaptive-kl"),
        (dict(gae_lambda=1.5), "--gae-lambda"),
    ],
)
def test_bad_args_are_refused(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_wrong_checkpoints_are_refused(script, tmp_path):
    m = load_script(script)
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    lm.save_checkpoint(lm.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "plain.npz")
    logs = tmp_path / "runs"
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(logs), progress=False))
    with pytest.raises(ValueError, match="reward-model checkpoint"):
        m.train(m.Args(rm_path=str(tmp_path / "plain.npz"), log_dir=str(logs), progress=False))
    assert not logs.exists()
