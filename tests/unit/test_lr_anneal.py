"""With `--anneal-lr` the value-based scripts decay the learning rate linearly to 0 over the run's
gradient steps (off by default in every one: the papers use a constant rate). The schedule's length
is `count_gradient_steps`; if it were wrong, the step size would either stop short of 0 or go negative
at the end of a run. Checked against a brute-force count of the training loop's own condition, and
against the number of updates a real run takes."""

import pytest

from helpers import VALUE_BASED, load_script, run_train, twin_scripts, value_based_scripts

SCRIPTS = value_based_scripts()


def brute_force(total_timesteps, num_envs, learning_starts, train_frequency):
    """The loop of train(): iteration i steps every env, so global_step = i * num_envs."""
    return sum(
        1
        for i in range(1, total_timesteps // num_envs + 1)
        if i * num_envs > learning_starts and i % train_frequency == 0
    )


def test_all_value_based_scripts_found():
    assert len(SCRIPTS) == 2 * len(VALUE_BASED) and set(SCRIPTS) <= set(twin_scripts())


@pytest.mark.parametrize("script", SCRIPTS)
def test_count_gradient_steps_matches_the_loop(script):
    count = load_script(script).count_gradient_steps
    assert count(100_000, 1, 1_000, 4) == 24_750  # the CartPole default: (100k - 1k) / 4
    for total in (0, 1, 999, 1_000, 1_001, 1_003, 1_004, 5_000, 7_777):
        for num_envs in (1, 2, 3, 8):
            for learning_starts in (0, 1, 10, 1_000, 1_001):
                for train_frequency in (1, 2, 4, 10):
                    assert count(total, num_envs, learning_starts, train_frequency) == brute_force(
                        total, num_envs, learning_starts, train_frequency
                    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_takes_exactly_that_many_updates(script, tmp_path):
    m = load_script(script)
    overrides = dict(
        m.SMOKE_ARGS,
        total_timesteps=1_200,
        learning_starts=1_001,
        num_envs=2,
        train_frequency=3,
        anneal_lr=True,
    )
    summary = run_train(script, tmp_path, seed=1, **overrides)
    expected = m.count_gradient_steps(1_200, 2, 1_001, 3)
    assert expected == brute_force(1_200, 2, 1_001, 3) == 34  # iterations 501..600 that 3 divides
    assert summary["num_updates"] == expected
