"""Tier 1 for BC: the worked problem (cross-entropy and MSE on hand numbers, the tanh squashing
inside the action bounds), the first-k-trajectories cut that the compounding-error study uses, the
bad-input checks that stop a run before any run directory is written, and both action kinds."""

import math

import numpy as np
import pytest

from helpers import all_finite, conv, load_script, run_train

TWINS = ["algos/bc_torch.py", "algos/bc_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_cross_entropy_by_hand(script):
    m, c = load_script(script), conv(script)
    # logits (0, ln 3): pi = (1/4, 3/4). Label 1: -ln(3/4) = 0.287682; label 0: -ln(1/4) = ln 4 = 1.386294;
    # the batch mean is 0.836988. Uniform logits over 3 actions: ln 3 = 1.098612 whatever the label.
    logits = c([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    loss = m.bc_cross_entropy_loss(logits, conv(script, np.int64)([1, 0]))
    assert float(loss) == pytest.approx(0.836988, abs=1e-5)
    assert float(m.bc_cross_entropy_loss(c([[0.0, 0.0, 0.0]]), conv(script, np.int64)([2]))) == pytest.approx(
        math.log(3.0), abs=1e-6
    )
    np.testing.assert_array_equal(np.asarray(m.greedy_actions(c([[0.0, 1.0], [2.0, -1.0]]))), [1, 0])


@pytest.mark.parametrize("script", TWINS)
def test_mse_by_hand(script):
    m, c = load_script(script), conv(script)
    # errors (0.5 - 1)^2 = 0.25, 0, (2 - 1)^2 = 1, (0 - 1)^2 = 1: mean over 4 entries = 2.25 / 4 = 0.5625
    loss = m.bc_mse_loss(c([[0.5, -1.0], [2.0, 0.0]]), c([[1.0, -1.0], [1.0, 1.0]]))
    assert float(loss) == pytest.approx(0.5625, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_squash_stays_in_the_box(script):
    m, c = load_script(script), conv(script)
    # Pendulum's Box [-2, 2]: scale 2, bias 0. tanh(0) = 0, tanh(atanh 0.5) = 0.5 -> 1.0.
    # A Box [0, 1]: scale 0.5, bias 0.5; x = 0 -> 0.5, x = +-30 -> the bounds 1 and 0.
    out = m.squash_actions(c([[0.0], [math.atanh(0.5)], [-1e3]]), c([2.0]), c([0.0]))
    np.testing.assert_allclose(np.asarray(out), [[0.0], [1.0], [-2.0]], atol=1e-6)
    out = m.squash_actions(c([[0.0, 30.0, -30.0]]), c([0.5, 0.5, 0.5]), c([0.5, 0.5, 0.5]))
    np.testing.assert_allclose(np.asarray(out), [[0.5, 1.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_training_rows_by_hand(script):
    m = load_script(script)
    bounds = [(0, 3), (3, 5), (5, 9)]
    returns = np.array([1.0, 5.0, 3.0])
    # the first k trajectories (0 = all): rows [0, 3), [0, 5), [0, 9)
    for k, end in ((1, 3), (2, 5), (3, 9), (0, 9)):
        np.testing.assert_array_equal(m.training_rows(bounds, returns, k, 1.0), np.arange(end))
    # ceil(0.34 * 3) = 2 trajectories: returns 5 and 3, kept in data order
    np.testing.assert_array_equal(m.training_rows(bounds, returns, 0, 0.34), [3, 4, 5, 6, 7, 8])
    # ceil(0.1 * 3) = 1: the best one
    np.testing.assert_array_equal(m.training_rows(bounds, returns, 0, 0.1), [3, 4])
    # within the first 2 trajectories (returns 1, 5), the better half: ceil(0.5 * 2) = 1 -> the second
    np.testing.assert_array_equal(m.training_rows(bounds, returns, 2, 0.5), [3, 4])
    tied = np.array([2.0, 2.0, 1.0])
    np.testing.assert_array_equal(m.training_rows(bounds, tied, 0, 0.3), [0, 1, 2])  # a tie: the earlier
    # 0.5 of 3 is 1.5: rounded up to 2, never down to a single trajectory
    np.testing.assert_array_equal(m.training_rows(bounds, tied, 0, 0.5), [0, 1, 2, 3, 4])


@pytest.mark.parametrize("script", TWINS)
def test_top_fraction_keeps_the_best_trajectories(script, tmp_path):
    # pendulum-learner's first 10 trajectories (200 steps each), the best 3 of them: 600 pairs
    summary = run_train(
        script,
        tmp_path,
        dataset="pendulum-learner",
        dataset_episodes=10,
        top_fraction=0.3,
        total_steps=3,
        batch_size=8,
        hidden_size=8,
        eval_every=3,
        eval_episodes=1,
    )
    assert summary["dataset_size"] == 600
    assert all_finite(summary)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(dataset="pendulum-expret"), "pendulum-expert"),  # the error lists the valid names
        (dict(dataset_episodes=-1), "--dataset-episodes"),
        (dict(dataset_episodes=10_000), "trajectories"),
        (dict(top_fraction=0.0), "--top-fraction"),
        (dict(top_fraction=1.5), "--top-fraction"),
        (dict(total_steps=0), "--total-steps"),
        (dict(batch_size=0), "--batch-size"),
        (dict(eval_every=0), "--eval-every"),
    ],
)
def test_bad_input_is_refused_before_any_run_directory(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"


@pytest.mark.parametrize("script", TWINS)
def test_first_k_trajectories_are_used(script, tmp_path):
    # pendulum-expert's trajectories are 200 steps (Pendulum's time limit): 3 of them are 600 pairs
    summary = run_train(
        script,
        tmp_path,
        dataset="pendulum-expert",
        dataset_episodes=3,
        total_steps=3,
        batch_size=8,
        hidden_size=8,
        eval_every=3,
        eval_episodes=1,
    )
    assert summary["dataset_size"] == 600
    assert all_finite(summary)


@pytest.mark.parametrize("script", TWINS)
def test_discrete_dataset_and_eval_every(script, tmp_path):
    summary = run_train(
        script,
        tmp_path,
        dataset="cartpole-expert",
        dataset_episodes=1,
        total_steps=5,
        batch_size=8,
        hidden_size=8,
        eval_every=2,
        eval_episodes=2,
    )
    # evaluations at steps 2, 4 and the last step 5, two episodes each
    assert [step for step, _ in summary["episodic_returns"]] == [2, 2, 4, 4, 5, 5]
    assert summary["final_mean_return"] == pytest.approx(
        np.mean([r for _, r in summary["episodic_returns"][-2:]])
    )
    assert all_finite(summary)
