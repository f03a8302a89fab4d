"""Tier 1 for CQL: the conservative penalty on hand numbers (importance-sampled and discrete forms),
the penalty's defining property (0 when every sampled action is the dataset action, positive otherwise), the
targets (terminals cut the bootstrap, timeouts do not), the penalty's gradient direction, bad input
refused before a run directory is written, and the --discrete variant end to end; in both twins."""

import math

import numpy as np
import pytest
import torch

from helpers import conv, is_torch, load_script

TWINS = ["algos/cql_torch.py", "algos/cql_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_penalty_by_hand(script):
    m, c = load_script(script), conv(script)
    # K = 2 samples, point-mass densities (log mu = 0): Q(s, a_k) = (0, ln 3), Q(s, a_data) = 0:
    # log((e^0 + e^ln3) / 2) - 0 = log(4 / 2) = ln 2 = 0.693147
    p = m.cql_penalty(c([0.0]), c([[0.0, math.log(3.0)]]), c([[0.0, 0.0]]))
    assert float(p) == pytest.approx(math.log(2.0), abs=1e-6)
    # density corrections: Q = (ln 2, ln 2), log mu = (ln 2, -ln 2): exp(Q - log mu) = (1, 4);
    # log(5 / 2) - 0.5 = 0.916291 - 0.5 = 0.416291
    p = m.cql_penalty(c([0.5]), c([[math.log(2.0)] * 2]), c([[math.log(2.0), -math.log(2.0)]]))
    assert float(p) == pytest.approx(math.log(2.5) - 0.5, abs=1e-6)
    # discrete, exact: Q(s, .) = (1, 2, 3), the data took action 0; every action once with log mu = -ln 3:
    # logsumexp(1, 2, 3) - 1 = 2 + ln(1 + e^-1 + e^-2) = 2 + 0.407606 = 2.407606
    p = m.cql_penalty(c([1.0]), c([[1.0, 2.0, 3.0]]), c([[-math.log(3.0)] * 3]))
    assert float(p) == pytest.approx(2.407606, abs=1e-5)
    # a batch of two states: the mean of the log-sum-exp terms minus the mean of Q_data. State 1: K = 3,
    # Q = (0, ln 3, -1e9), log mu = (-ln 1.5, -ln 1.5, 0): log((1.5 + 4.5 + 0) / 3) = ln 2; state 2 the
    # discrete case above, term logsumexp(1, 2, 3) = 3.407606; Q_data (0, 1):
    # (0.693147 + 3.407606) / 2 - 0.5 = 1.550377
    p = m.cql_penalty(
        c([0.0, 1.0]),
        c([[0.0, math.log(3.0), -1e9], [1.0, 2.0, 3.0]]),
        c([[-math.log(1.5), -math.log(1.5), 0.0], [-math.log(3.0)] * 3]),
    )
    assert float(p) == pytest.approx((math.log(2.0) + 3.407606) / 2 - 0.5, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_penalty_is_zero_when_all_mass_is_on_the_dataset_action(script):
    m, c = load_script(script), conv(script)
    rng = np.random.default_rng(0)
    q_data = rng.normal(scale=50.0, size=64)
    for k in (1, 5, 30):
        # the policy puts all its mass on the dataset action: every sample is a_data, log mu = 0
        p = m.cql_penalty(c(q_data), c(np.repeat(q_data[:, None], k, 1)), c(np.zeros((64, k))))
        assert abs(float(p)) < 1e-4, (k, float(p))
    # positive otherwise: some sampled action other than a_data where Q is higher
    bump = np.zeros((64, 5))
    bump[:, 0] = rng.uniform(0.1, 2.0, size=64)
    p = m.cql_penalty(c(q_data), c(q_data[:, None] + bump), c(np.zeros((64, 5))))
    assert float(p) > 0.01
    # discrete exact form: logsumexp over all actions beats any one of them, for any Q
    q_all = rng.normal(scale=3.0, size=(64, 2))
    taken = rng.integers(0, 2, size=64)
    p = m.cql_penalty(c(q_all[np.arange(64), taken]), c(q_all), c(np.full((64, 2), -math.log(2.0))))
    assert float(p) > 0.0


@pytest.mark.parametrize("script", TWINS)
def test_penalty_is_zero_through_the_critic(script):
    """The same property through the script's own critic: Q at the dataset action repeated K times."""
    m = load_script(script)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(16, 3)).astype(np.float32)
    actions = rng.uniform(-2, 2, size=(16, 1)).astype(np.float32)
    K = 6
    rep_obs, rep_actions = np.repeat(obs, K, 0), np.repeat(actions, K, 0)
    if is_torch(script):
        torch.manual_seed(0)
        qf = m.QNetwork(3, 1, 32)
        with torch.no_grad():
            q_data = qf(torch.as_tensor(obs), torch.as_tensor(actions))
            q_rep = qf(torch.as_tensor(rep_obs), torch.as_tensor(rep_actions)).reshape(16, K)
            p = m.cql_penalty(q_data, q_rep, torch.zeros(16, K))
    else:
        import jax
        import jax.numpy as jnp

        qf = m.QNetwork(32)
        params = qf.init(jax.random.PRNGKey(0), obs, actions)
        q_data = qf.apply(params, obs, actions)
        q_rep = qf.apply(params, rep_obs, rep_actions).reshape(16, K)
        p = m.cql_penalty(q_data, q_rep, jnp.zeros((16, K)))
    assert abs(float(p)) < 1e-5


@pytest.mark.parametrize("script", TWINS)
def test_penalty_gradient_pushes_sampled_down_and_data_up(script):
    """d penalty / d Q(s, a_data) = -1/B (the data's Q goes up under descent); d / d Q(s, a_k) =
    softmax_k(Q - log mu) / B >= 0 (the sampled actions' Q goes down, the highest most)."""
    m = load_script(script)
    q_data = np.array([0.0, 1.0], np.float32)
    q_s = np.array([[0.0, math.log(3.0)], [1.0, 1.0]], np.float32)
    ld = np.zeros((2, 2), np.float32)
    if is_torch(script):
        qd, qs = torch.tensor(q_data, requires_grad=True), torch.tensor(q_s, requires_grad=True)
        m.cql_penalty(qd, qs, torch.as_tensor(ld)).backward()
        g_data, g_s = qd.grad.numpy(), qs.grad.numpy()
    else:
        import jax

        g_data, g_s = jax.grad(m.cql_penalty, argnums=(0, 1))(q_data, q_s, ld)
    # softmax(0, ln 3) = (1/4, 3/4); softmax(1, 1) = (1/2, 1/2); each divided by B = 2
    np.testing.assert_allclose(np.asarray(g_data), [-0.5, -0.5], atol=1e-6)
    np.testing.assert_allclose(np.asarray(g_s), [[0.125, 0.375], [0.25, 0.25]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_targets_by_hand(script):
    m, c = load_script(script), conv(script)
    # min(5, 4) = 4: 1 + 0.9 * 4 = 4.6; min(-2, 3) = -2: 0.5 + 0.9 * (-2) = -1.3; terminal: r only.
    # A timeout row is passed with terminal 0 (the script reads "terminals", never "timeouts"): it bootstraps.
    target = m.conservative_target(
        c([1.0, 0.5, 2.0]), c([0.0, 0.0, 1.0]), c([5.0, -2.0, 7.0]), c([4.0, 3.0, 6.0]), 0.9
    )
    np.testing.assert_allclose(np.asarray(target), [4.6, -1.3, 2.0], atol=1e-6)
    # discrete: max(1, 3) = 3: 0.5 + 0.9 * 3 = 3.2; terminal: r = 1
    target = m.max_q_target(c([[1.0, 3.0], [2.0, 0.0]]), c([0.5, 1.0]), c([0.0, 1.0]), 0.9)
    np.testing.assert_allclose(np.asarray(target), [3.2, 1.0], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_critic_loss_adds_the_weighted_penalty(script):
    m, c = load_script(script), conv(script)
    # Bellman: ((1 - 2)^2 + (3 - 3)^2) / 2 = 0.5; penalty of Q_data (1, 3), samples (1, 1) and (3, 3),
    # log mu = 0: 0 -> total 0.5 + 5 * 0 = 0.5; then samples (1, 1 + ln 3) on state 1:
    # log((e + 3e) / 2) - 1 = ln 2, / 2 over the batch -> penalty ln 2 / 2, total 0.5 + 5 ln 2 / 2
    total, bellman, penalty = m.cql_critic_loss(
        c([1.0, 3.0]), c([2.0, 3.0]), c([[1.0, 1.0], [3.0, 3.0]]), c(np.zeros((2, 2))), 5.0
    )
    assert (float(total), float(bellman), abs(float(penalty))) == pytest.approx((0.5, 0.5, 0.0), abs=1e-5)
    total, _, penalty = m.cql_critic_loss(
        c([1.0, 3.0]), c([2.0, 3.0]), c([[1.0, 1.0 + math.log(3.0)], [3.0, 3.0]]), c(np.zeros((2, 2))), 5.0
    )
    assert float(penalty) == pytest.approx(math.log(2.0) / 2, abs=1e-5)
    assert float(total) == pytest.approx(0.5 + 5 * math.log(2.0) / 2, abs=1e-5)


def _lagrange_value_and_grad(script, m, log_cql_alpha, penalty, threshold):
    """lagrange_loss and its derivative in log cql_alpha, in the script's framework."""
    if is_torch(script):
        la = torch.tensor(log_cql_alpha, requires_grad=True)
        p = torch.tensor(penalty, requires_grad=True)
        loss = m.lagrange_loss(la, p, threshold)
        loss.backward()
        assert p.grad is None or float(p.grad) == 0.0, "the penalty is held fixed: no gradient reaches Q"
        return float(loss), float(la.grad)
    import jax
    import jax.numpy as jnp

    loss, (g_alpha, g_penalty) = jax.value_and_grad(m.lagrange_loss, argnums=(0, 1))(
        jnp.float32(log_cql_alpha), jnp.float32(penalty), threshold
    )
    assert float(g_penalty) == 0.0, "the penalty is held fixed: no gradient reaches Q"
    return float(loss), float(g_alpha)


@pytest.mark.parametrize("script", TWINS)
def test_lagrange_loss_by_hand(script):
    """cql_alpha = e^{ln 2} = 2, penalty 3, threshold 1: loss -2 (3 - 1) = -4, d/d log alpha = -4 (a
    descent step raises alpha: the penalty is above its budget); penalty 0.5 < threshold 1: loss
    -2 (0.5 - 1) = 1, derivative +1 (alpha falls); at the threshold the derivative is 0."""
    m = load_script(script)
    loss, grad = _lagrange_value_and_grad(script, m, math.log(2.0), 3.0, 1.0)
    assert (loss, grad) == pytest.approx((-4.0, -4.0), abs=1e-5)
    loss, grad = _lagrange_value_and_grad(script, m, math.log(2.0), 0.5, 1.0)
    assert (loss, grad) == pytest.approx((1.0, 1.0), abs=1e-5)
    assert _lagrange_value_and_grad(script, m, 0.3, 2.5, 2.5)[1] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_lagrange_weight_moves_the_penalty_towards_its_threshold(script, tmp_path):
    """--cql-lagrange end to end on the discrete variant (cartpole-expert, 1,000 steps; one action per
    state in the data lets the penalty approach 0, where uniform data would floor it at log 2): with a
    threshold below the penalty the tuned weight ends above its start (5) and the penalty below the
    fixed-weight run's (measured 11.1 and 0.12 against 0.14); with a threshold above it, the weight ends
    below 5 and the penalty above (2.2, 0.17). The fixed-weight run logs no cql_alpha."""
    m = load_script(script)
    common = dict(
        dataset="cartpole-expert",
        discrete=True,
        total_steps=1000,
        eval_every=1000,
        eval_episodes=1,
        log_dir=str(tmp_path),
        progress=False,
    )
    fixed = m.train(m.Args(**common))["losses"]
    assert "cql_alpha" not in fixed
    low = m.train(m.Args(cql_lagrange=True, lagrange_threshold=0.05, **common))["losses"]
    high = m.train(m.Args(cql_lagrange=True, lagrange_threshold=5.0, **common))["losses"]
    assert fixed["cql_penalty"] > 0.05
    assert low["cql_alpha"] > 5.0 and low["cql_penalty"] < fixed["cql_penalty"]
    assert high["cql_alpha"] < 5.0 and high["cql_penalty"] > fixed["cql_penalty"]


@pytest.mark.parametrize("script", TWINS)
def test_lagrange_weight_on_continuous_actions(script, tmp_path):
    """The continuous path of --cql-lagrange (the smoke run covers only the fixed weight): a threshold far
    above the penalty lowers the weight from its start at every step, by about q_lr per step in log space."""
    m = load_script(script)
    s = m.train(
        m.Args(
            total_steps=40,
            batch_size=32,
            hidden_size=16,
            num_sampled_actions=2,
            eval_every=40,
            eval_episodes=1,
            cql_lagrange=True,
            lagrange_threshold=100.0,
            log_dir=str(tmp_path),
            progress=False,
        )
    )
    assert {"cql_alpha", "cql_alpha_loss"} <= set(s["losses"])
    # Adam's first steps move log alpha by about the step size each: 40 steps of 1e-3
    assert s["losses"]["cql_alpha"] == pytest.approx(5.0 * math.exp(-40 * 1e-3), rel=2e-3)


@pytest.mark.parametrize("script", TWINS)
def test_tanh_log_det_jacobian_matches_direct_form(script):
    m, c = load_script(script), conv(script)
    u = np.array([[-3.0, 0.0], [0.5, 2.0]], np.float32)
    direct = np.log(1.0 - np.tanh(u.astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_allclose(np.asarray(m.tanh_log_det_jacobian(c(u))), direct, atol=1e-5)


def _refused(m, tmp_path, match, **overrides):
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not tmp_path.exists() or not any(tmp_path.iterdir()), (
        "refused before any run directory was written"
    )


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    _refused(m, tmp_path, "pendulum-replay", dataset="pendulum-nope")  # lists the valid names
    _refused(m, tmp_path, "--discrete", dataset="pendulum-replay", discrete=True)
    _refused(m, tmp_path, "--discrete", dataset="cartpole-replay")
    for name in ("total_steps", "batch_size", "num_sampled_actions", "eval_every", "eval_episodes"):
        _refused(m, tmp_path, "--" + name.replace("_", "-"), **{name: 0})
    _refused(m, tmp_path, "--cql-alpha", cql_alpha=-1.0)
    _refused(m, tmp_path, "cql-lagrange", cql_alpha=0.0, cql_lagrange=True)  # log(0): nothing to tune


@pytest.mark.parametrize("script", TWINS)
def test_discrete_variant_runs_and_reloads(script, tmp_path):
    """The --discrete path end to end (the smoke test runs the continuous default): a few steps on
    cartpole-replay, the curve's shape, the saved model reloaded and evaluated."""
    m = load_script(script)
    args = m.Args(
        dataset="cartpole-replay",
        discrete=True,
        total_steps=30,
        batch_size=32,
        hidden_size=16,
        eval_every=15,
        eval_episodes=2,
        save_model=True,
        log_dir=str(tmp_path),
        progress=False,
    )
    s = m.train(args)
    assert [step for step, _ in s["episodic_returns"]] == [15, 15, 30, 30]
    assert s["final_mean_return"] == pytest.approx(np.mean([r for _, r in s["episodic_returns"][-2:]]))
    assert set(s["losses"]) == {"qf_loss", "bellman_error", "cql_penalty", "q_values"}
    assert s["eval_mean_return"] == pytest.approx(s["final_mean_return"])  # same weights, same seeds
    assert s["behaviour_return"] == pytest.approx(41.09, abs=0.1)
