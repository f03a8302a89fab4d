"""Tier 1 for DAgger: the worked problem (the beta schedule and the aggregate's size after k
iterations on hand numbers), the mixture's choice of action, the expert labelling every visited
state (the learner's included), the aggregate growing by exactly labels_per_iteration pairs per
iteration in order, the losses on hand numbers, and the bad-input checks."""

import math

import numpy as np
import pytest

from helpers import all_finite, conv, load_script, run_train

TWINS = ["algos/dagger_torch.py", "algos/dagger_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_beta_schedule_by_hand(script):
    m = load_script(script)
    # beta_i = decay^i: decay 0.5 -> 1, 0.5, 0.25, 0.125; the classic decay 0 -> 1, 0, 0, 0 (0^0 = 1);
    # decay 1 keeps the expert acting forever (that is the BC baseline's schedule)
    assert [m.beta_schedule(i, 0.5) for i in range(4)] == [1.0, 0.5, 0.25, 0.125]
    assert [m.beta_schedule(i, 0.0) for i in range(4)] == [1.0, 0.0, 0.0, 0.0]
    assert [m.beta_schedule(i, 1.0) for i in range(4)] == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("script", TWINS)
def test_mixture_takes_the_expert_where_the_coin_is_below_beta(script):
    m = load_script(script)
    # beta 0.5, coins 0.1, 0.6, 0.3, 0.5: expert, learner, expert, learner (0.5 is not below 0.5)
    out = m.mixture_actions(
        np.array([[1.0], [2.0], [3.0], [4.0]]),
        -np.array([[1.0], [2.0], [3.0], [4.0]]),
        np.array([0.1, 0.6, 0.3, 0.5]),
        0.5,
    )
    np.testing.assert_array_equal(out, [[1.0], [-2.0], [3.0], [-4.0]])
    out = m.mixture_actions(np.array([1, 1, 1]), np.array([0, 0, 0]), np.array([0.0, 0.99, 0.2]), 0.25)
    np.testing.assert_array_equal(out, [1, 0, 1])


@pytest.mark.parametrize("script", TWINS)
def test_losses_by_hand(script):
    m, c = load_script(script), conv(script)
    # cross-entropy: logits (0, ln 3) -> pi = (1/4, 3/4); labels 1 and 0: (-ln 0.75 + ln 4) / 2 = 0.836988
    loss = m.bc_cross_entropy_loss(c([[0.0, math.log(3.0)]] * 2), conv(script, np.int64)([1, 0]))
    assert float(loss) == pytest.approx(0.836988, abs=1e-5)
    # MSE: (0.25 + 0 + 1 + 1) / 4 = 0.5625
    assert float(m.bc_mse_loss(c([[0.5, -1.0], [2.0, 0.0]]), c([[1.0, -1.0], [1.0, 1.0]]))) == pytest.approx(
        0.5625
    )


@pytest.mark.parametrize("script", TWINS)
def test_the_expert_labels_every_visited_state(script):
    m = load_script(script)
    offline_data = m.offline_data  # the module the script imports
    expert = offline_data.expert_policy("Pendulum-v1")
    env = offline_data.make_env("Pendulum-v1")
    # beta = 0: the learner (full torque +2, a bad policy) acts at every step, the expert only labels
    obs, labels, _ = m.rollout_and_label(
        env, lambda o: np.full((1, 1), 2.0, np.float32), expert, 0.0, 50, np.random.default_rng(0), 7
    )
    assert obs.shape == (50, 3) and labels.shape == (50, 1)
    np.testing.assert_array_equal(labels, expert(obs))
    # the learner's states: the first action +2 is applied, so the state after it is not the expert's
    expert_obs, _, _ = m.rollout_and_label(env, None, expert, 1.0, 50, np.random.default_rng(0), 7)
    np.testing.assert_array_equal(obs[0], expert_obs[0])  # same seed, same start
    assert not np.allclose(obs[1:], expert_obs[1:])
    # beta = 1 never asks the learner (None would fail if it were called)


@pytest.mark.parametrize("script", TWINS)
def test_episodes_restart_and_the_budget_is_exact(script):
    m = load_script(script)
    offline_data = m.offline_data  # the module the script imports
    expert = offline_data.expert_policy("CartPole-v1")
    env = offline_data.make_env("CartPole-v1")
    # always pushing left drops the pole within ~10 steps: several episodes in 60 steps, the last one cut
    obs, labels, returns = m.rollout_and_label(
        env, lambda o: np.zeros(1, np.int64), expert, 0.0, 60, np.random.default_rng(0), 3
    )
    assert len(obs) == len(labels) == 60
    assert len(returns) >= 3 and sum(returns) < 60  # the finished episodes; the cut one is not counted
    np.testing.assert_array_equal(labels, expert(obs))


@pytest.mark.parametrize("script", TWINS)
def test_aggregate_after_k_iterations(script):
    m = load_script(script)
    # worked problem: labels_per_iteration L = 40, 3 iterations -> |D| = 40, 80, 120, in order
    offline_data = m.offline_data
    expert = offline_data.expert_policy("Pendulum-v1")
    env = offline_data.make_env("Pendulum-v1")
    L, K = 40, 3
    buffer_obs, buffer_labels = np.zeros((K * L, 3), np.float32), np.zeros((K * L, 1), np.float32)
    size, batches, rng = 0, [], np.random.default_rng(1)
    learner = lambda o: np.full((1, 1), -1.0, np.float32)
    for i in range(K):
        obs, labels, _ = m.rollout_and_label(env, learner, expert, m.beta_schedule(i, 0.0), L, rng, 100 * i)
        size = m.aggregate(buffer_obs, buffer_labels, size, obs, labels)
        batches.append(obs)
        assert size == (i + 1) * L
        # the earlier pairs are kept unchanged; the new ones follow them
        np.testing.assert_array_equal(buffer_obs[:size], np.concatenate(batches))
        np.testing.assert_array_equal(buffer_labels[:size], expert(buffer_obs[:size]))


@pytest.mark.parametrize("script", TWINS)
def test_train_grows_d_as_specified(script, tmp_path):
    summary = run_train(
        script,
        tmp_path,
        env_id="Pendulum-v1",
        iterations=3,
        labels_per_iteration=40,
        gradient_steps=3,
        batch_size=8,
        hidden_size=8,
        eval_episodes=1,
    )
    assert summary["dataset_sizes"] == [40, 80, 120] and summary["global_step"] == 120
    assert [n for n, _ in summary["dagger_curve"]] == [n for n, _ in summary["bc_curve"]] == [40, 80, 120]
    # iteration 0 is the same for both learners: the expert's rollout, the same seeds and minibatches
    assert summary["dagger_curve"][0] == summary["bc_curve"][0]
    assert summary["final_mean_return"] == summary["dagger_return"] == summary["dagger_curve"][-1][1]
    assert summary["dagger_minus_bc"] == pytest.approx(summary["dagger_return"] - summary["bc_return"])
    assert all_finite(summary)


@pytest.mark.parametrize("script", TWINS)
def test_discrete_env_and_no_baseline(script, tmp_path):
    summary = run_train(
        script,
        tmp_path,
        env_id="CartPole-v1",
        iterations=2,
        labels_per_iteration=30,
        beta_decay=0.5,
        gradient_steps=2,
        batch_size=8,
        hidden_size=8,
        eval_episodes=1,
        bc_baseline=False,
        warm_start=True,
    )
    assert summary["dataset_sizes"] == [30, 60] and summary["bc_curve"] == []
    assert math.isnan(summary["bc_return"]) and math.isfinite(summary["dagger_return"])


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(env_id="MountainCar-v0"), "no scripted expert"),
        (dict(iterations=0), "--iterations"),
        (dict(labels_per_iteration=0), "--labels-per-iteration"),
        (dict(gradient_steps=0), "--gradient-steps"),
        (dict(beta_decay=1.5), "--beta-decay"),
        (dict(beta_decay=-0.1), "--beta-decay"),
    ],
)
def test_bad_input_is_refused_before_any_run_directory(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
