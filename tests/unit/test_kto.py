"""Tier 1 for KTO: the worked problem (docs/algorithms/kto.md) in both twins: kto_loss on hand numbers
at two betas, the reference point z (mismatched-pair KL estimate, clamped at 0, detached), the
desirable / undesirable weights, the gradient's direction, and the bad-input checks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script, smoke_run

TWINS = ["llm/kto_torch.py", "llm/kto_jax.py"]
tasks = load_script("llm/tasks.py")


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# The worked problem: two examples.
#   example 0, desirable:   log pi = -2, log pi_ref = -3  ->  r = +1
#   example 1, undesirable: log pi = -4, log pi_ref = -3  ->  r = -1
# Mismatched pairs (prompt i, completion of the other example): log pi = -5, -6; log pi_ref = -5.5, -6.3
#   -> log-ratios +0.5, +0.3, mean 0.4 -> z = max(0, 0.4) = 0.4.
POLICY, REF, DESIRABLE = [-2.0, -4.0], [-3.0, -3.0], [1.0, 0.0]
POLICY_KL, REF_KL = [-5.0, -6.0], [-5.5, -6.3]


def kto(script, policy, ref, policy_kl, ref_kl, desirable, beta, lam_d=1.0, lam_u=1.0):
    m = load_script(script)
    if script.endswith("torch.py"):
        args = (torch.tensor(x, dtype=torch.float32) for x in (policy, ref, policy_kl, ref_kl, desirable))
        loss, rewards, z = m.kto_loss(*args, beta, lam_d, lam_u)
        return loss.item(), rewards.numpy(), z.item()
    args = (jnp.array(x, dtype=jnp.float32) for x in (policy, ref, policy_kl, ref_kl, desirable))
    loss, rewards, z = m.kto_loss(*args, beta, lam_d, lam_u)
    return float(loss), np.asarray(rewards), float(z)


@pytest.mark.parametrize("script", TWINS)
def test_worked_problem_beta_1(script):
    loss, rewards, z = kto(script, POLICY, REF, POLICY_KL, REF_KL, DESIRABLE, 1.0)
    assert z == pytest.approx(0.4, abs=1e-6)  # mean(0.5, 0.3)
    np.testing.assert_allclose(rewards, [1.0, -1.0], atol=1e-6)  # beta * r
    # desirable: 1 - sigmoid(1 * (1 - 0.4)) = 1 - 0.645656 = 0.354344
    # undesirable: 1 - sigmoid(1 * (0.4 - (-1))) = 1 - 0.802184 = 0.197816
    # mean: (0.354344 + 0.197816) / 2 = 0.276080
    assert loss == pytest.approx(((1 - sigmoid(0.6)) + (1 - sigmoid(1.4))) / 2, abs=1e-6)
    assert loss == pytest.approx(0.2761, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_worked_problem_beta_0_1(script):
    loss, rewards, z = kto(script, POLICY, REF, POLICY_KL, REF_KL, DESIRABLE, 0.1)
    assert z == pytest.approx(0.4, abs=1e-6)  # z does not depend on beta
    np.testing.assert_allclose(rewards, [0.1, -0.1], atol=1e-6)
    # desirable: 1 - sigmoid(0.1 * 0.6) = 1 - 0.514995 = 0.485004
    # undesirable: 1 - sigmoid(0.1 * 1.4) = 1 - 0.534943 = 0.465057
    # mean: 0.475031 (a small beta keeps every example near the sigmoid's linear middle, loss near 1/2)
    assert loss == pytest.approx(((1 - sigmoid(0.06)) + (1 - sigmoid(0.14))) / 2, abs=1e-6)
    assert loss == pytest.approx(0.4750, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_policy_equal_to_reference_gives_one_half(script):
    loss, rewards, z = kto(script, [-3.0, -7.0], [-3.0, -7.0], [-4.0, -2.0], [-4.0, -2.0], DESIRABLE, 1.0)
    assert z == 0.0 and loss == pytest.approx(0.5, abs=1e-6) and np.all(rewards == 0.0)  # 1 - sigmoid(0)


@pytest.mark.parametrize("script", TWINS)
def test_z_is_zero_when_the_kl_estimate_is_negative(script):
    # Mismatched log-ratios -6 - (-5) = -1 and -6 - (-5.5) = -0.5: mean -0.75 < 0 -> z = 0, not -0.75.
    loss, _, z = kto(script, POLICY, REF, [-6.0, -6.0], [-5.0, -5.5], DESIRABLE, 1.0)
    assert z == 0.0
    # both terms 1 - sigmoid(1) = 0.268941; with z = -0.75 it would have been
    # ((1 - sigmoid(1.75)) + (1 - sigmoid(0.25))) / 2 = 0.2929
    assert loss == pytest.approx(1 - sigmoid(1.0), abs=1e-6)
    assert loss == pytest.approx(0.2689, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_desirable_and_undesirable_weights(script):
    # z = 0 (negative KL estimate as above), r = +1 and -1, beta 1: each unweighted term is
    # 1 - sigmoid(1) = 0.268941.
    kl = ([-6.0, -6.0], [-5.0, -5.5])
    base = 1 - sigmoid(1.0)
    loss, _, _ = kto(script, POLICY, REF, *kl, DESIRABLE, 1.0, lam_d=2.0, lam_u=1.0)
    assert loss == pytest.approx((2.0 * base + base) / 2, abs=1e-6)  # 0.403412
    assert loss == pytest.approx(0.4034, abs=1e-4)
    loss, _, _ = kto(script, POLICY, REF, *kl, DESIRABLE, 1.0, lam_d=1.0, lam_u=3.0)
    assert loss == pytest.approx((base + 3.0 * base) / 2, abs=1e-6)  # 0.537883
    # The labels pick the weight: the same numbers with the labels swapped (r = +1 undesirable,
    # r = -1 desirable) cost 1 - sigmoid(-1) = 0.731059 each: lambda_D 2 -> (0.731059 + 2 x 0.731059) / 2
    loss, _, _ = kto(script, POLICY, REF, *kl, [0.0, 1.0], 1.0, lam_d=2.0, lam_u=1.0)
    assert loss == pytest.approx(3.0 * (1 - sigmoid(-1.0)) / 2, abs=1e-6)  # 1.096589


@pytest.mark.parametrize("script", TWINS)
def test_gradient_raises_desirable_lowers_undesirable_and_ignores_z(script):
    """d loss / d log pi(y_D) = -lambda_D beta s (1 - s) / B with s = sigmoid(beta (r - z)),
    d loss / d log pi(y_U) = +lambda_U beta s (1 - s) / B with s = sigmoid(beta (z - r));
    d loss / d (mismatched policy log-probs) = 0: z is detached. Worked problem, beta 1, lambda_D 2,
    lambda_U 1: s = sigmoid(0.6), sigmoid(1.4)."""
    m = load_script(script)
    beta, lam_d, lam_u = 1.0, 2.0, 1.0
    sd, su = sigmoid(0.6), sigmoid(1.4)
    want = (-lam_d * beta * sd * (1 - sd) / 2, lam_u * beta * su * (1 - su) / 2)  # -0.228784, +0.079342
    ref, ref_kl, d = (np.array(x, dtype=np.float32) for x in (REF, REF_KL, DESIRABLE))
    if script.endswith("torch.py"):
        p = torch.tensor(POLICY, requires_grad=True)
        pkl = torch.tensor(POLICY_KL, requires_grad=True)
        loss, rewards, z = m.kto_loss(
            p, torch.as_tensor(ref), pkl, torch.as_tensor(ref_kl), torch.as_tensor(d), beta, lam_d, lam_u
        )
        loss.backward()
        g, gkl = p.grad.numpy(), pkl.grad
        assert not rewards.requires_grad and not z.requires_grad
        assert gkl is None or np.all(gkl.numpy() == 0.0)
    else:
        f = lambda p, pkl: m.kto_loss(p, ref, pkl, ref_kl, d, beta, lam_d, lam_u)[0]
        g, gkl = jax.grad(f, argnums=(0, 1))(jnp.array(POLICY), jnp.array(POLICY_KL))
        assert np.all(np.asarray(gkl) == 0.0)
        gz = jax.grad(lambda pkl: m.kto_loss(jnp.array(POLICY), ref, pkl, ref_kl, d, beta, lam_d, lam_u)[2])
        assert np.all(np.asarray(gz(jnp.array(POLICY_KL))) == 0.0)
    np.testing.assert_allclose(np.asarray(g), want, atol=1e-6)


def _two_models(tmp_path):
    """Two random tiny LMs saved once (policy, reference) and one batch: prompts, completions with an
    early <eos> in some rows, labels, and the mismatched completions (each row's next row)."""
    lm_t = load_script("llm/tinylm_torch.py")
    torch.manual_seed(1)  # seeds chosen so that the mismatched KL estimate is positive (z > 0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "policy.npz")
    torch.manual_seed(0)
    lm_t.save_checkpoint(lm_t.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "ref.npz")
    rng = np.random.default_rng(0)
    prompts = tasks.encode_prompts(tasks.make_splits(2, 8)[1], 2)
    completions = rng.integers(2, 12, size=(8, 4))
    completions[::3, 2] = tasks.EOS
    desirable = np.array([1, 0, 1, 1, 0, 0, 1, 0], dtype=np.float32)
    return prompts, completions, desirable


@pytest.mark.parametrize("script", TWINS)
def test_z_detached_gradient_equals_constant_reference_point(script, tmp_path):
    """The gradient w.r.t. the policy's parameters, with the mismatched log-probs computed *with*
    gradient through the policy, equals the gradient of the documented formula with z replaced by a
    constant of the same value; an undetached z would give another gradient."""
    m = load_script(script)
    prompts, completions, desirable = _two_models(tmp_path)
    kl_completions = np.roll(completions, -1, axis=0)
    mask, kl_mask = tasks.completion_mask(completions), tasks.completion_mask(kl_completions)
    beta, lam_d, lam_u = 0.5, 1.0, 1.5

    def formula(logratios, z, d, sig):  # the documented loss, z given from outside
        return (
            lam_d * (1 - sig(beta * (logratios - z))) * d
            + lam_u * (1 - sig(beta * (z - logratios))) * (1 - d)
        ).mean()

    if script.endswith("torch.py"):
        lm = load_script("llm/tinylm_torch.py")
        policy, ref = lm.load_checkpoint(tmp_path / "policy.npz"), lm.load_checkpoint(tmp_path / "ref.npz")
        T = torch.as_tensor
        d = T(desirable)

        def grads(variant):
            policy.zero_grad()
            lp = m.pair_logps(policy, T(prompts), T(completions), T(mask))
            lp_kl = m.pair_logps(policy, T(prompts), T(kl_completions), T(kl_mask))  # with gradient
            with torch.no_grad():
                rl = m.pair_logps(ref, T(prompts), T(completions), T(mask))
                rl_kl = m.pair_logps(ref, T(prompts), T(kl_completions), T(kl_mask))
            if variant == "script":
                loss, _, z = m.kto_loss(lp, rl, lp_kl, rl_kl, d, beta, lam_d, lam_u)
            else:
                z_live = (lp_kl - rl_kl).mean().clamp(min=0.0)
                z = torch.tensor(z_live.item()) if variant == "constant" else z_live
                loss = formula(lp - rl, z, d, torch.sigmoid)
            loss.backward()
            return float(z.detach()), np.concatenate([p.grad.numpy().ravel() for p in policy.parameters()])
    else:
        lm = load_script("llm/tinylm_jax.py")
        (model, params), (_, ref_params) = (
            lm.load_checkpoint(tmp_path / "policy.npz"),
            lm.load_checkpoint(tmp_path / "ref.npz"),
        )
        J = jnp.asarray
        rl = m.pair_logps(model, ref_params, J(prompts), J(completions), J(mask))
        rl_kl = m.pair_logps(model, ref_params, J(prompts), J(kl_completions), J(kl_mask))
        z_value = float(
            jnp.maximum(
                (m.pair_logps(model, params, J(prompts), J(kl_completions), J(kl_mask)) - rl_kl).mean(), 0.0
            )
        )

        def grads(variant):
            def loss_fn(params):
                lp = m.pair_logps(model, params, J(prompts), J(completions), J(mask))
                lp_kl = m.pair_logps(
                    model, params, J(prompts), J(kl_completions), J(kl_mask)
                )  # with gradient
                if variant == "script":
                    return m.kto_loss(lp, rl, lp_kl, rl_kl, J(desirable), beta, lam_d, lam_u)[0]
                z = z_value if variant == "constant" else jnp.maximum((lp_kl - rl_kl).mean(), 0.0)
                return formula(lp - rl, z, J(desirable), jax.nn.sigmoid)

            g = jax.grad(loss_fn)(params)
            return z_value, np.concatenate([np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(g)])

    z_script, g_script = grads("script")
    z_const, g_const = grads("constant")
    _, g_live = grads("undetached")
    assert z_script > 0.0 and z_script == pytest.approx(z_const, abs=1e-6)  # the clamp is not active here
    np.testing.assert_allclose(g_script, g_const, atol=1e-6, rtol=1e-5)
    assert np.abs(g_script - g_live).max() > 1e-4  # the test can tell a detached z from a live one


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    runs = str(tmp_path / "runs")
    for field, value in [
        ("samples_per_prompt", 0),
        ("label_noise", 0.5),
        ("beta", 0.0),
        ("desirable_weight", 0.0),
        ("undesirable_weight", -1.0),
        ("batch_size", 1),
        ("num_prompts", 1),
    ]:
        overrides = {field: value} | ({"samples_per_prompt": 1} if field == "num_prompts" else {})
        with pytest.raises(ValueError, match="--" + field.replace("_", "-")):
            m.train(m.Args(**overrides, log_dir=runs, progress=False))
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
        "weight_ratio",
    ):
        assert k in out, k
    assert out["accuracy_gain"] == pytest.approx(out["test_accuracy"] - out["initial_test_accuracy"])
    assert out["accuracy_curve"][-1][0] == out["global_step"] == 8  # 32 prompts x 2 samples / batch 8
    assert np.isfinite(out["kl_to_ref"]) and out["losses"]["kl"] >= 0.0
    assert set(out["losses"]) == {"kto_loss", "kl", "rewards_chosen", "rewards_rejected"}
