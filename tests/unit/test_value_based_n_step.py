"""Tier 1 for the value-based family's multi-step target (`--n-step`): the six pairs (DQN, Double DQN,
Dueling DQN, PER, C51, QR-DQN) default to the one-step target of the 2015 DQN (n = 1); `--n-step 3`
is the 3-step target of Rainbow and of their tuned recipe.

By hand: n_step_transition folds a window (termination and truncation inside it) exactly as
R = sum_t gamma^t r_t with the discount gamma^k; each pair's target uses per-sample discounts.
Through the scripts' own training loop (n_step_transition wrapped to record what it is given): every
env step starts exactly one stored transition, no window crosses an episode's end, a window is
shorter than n only at an episode's end (where every shorter tail is stored), and with n = 1 every
transition is a single step with discount gamma. Bad n_step is refused before any work."""

import gymnasium as gym
import numpy as np
import pytest

from helpers import conv, load_script, value_based_scripts

PAIRS = ["dqn", "double_dqn", "dueling_dqn", "per_dqn", "c51", "qr_dqn"]
SCRIPTS = [f"algos/{name}_{fw}.py" for name in PAIRS for fw in ("torch", "jax")]
# CartPole-v1 with a time limit that random play also reaches: truncations as well as terminations
SHORT_CARTPOLE = "CartPoleNStepLimit-v1"
SHORT_LIMIT = 9
if SHORT_CARTPOLE not in gym.registry:
    gym.register(
        SHORT_CARTPOLE, entry_point=gym.spec("CartPole-v1").entry_point, max_episode_steps=SHORT_LIMIT
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_n_step_defaults(script):
    """The 2015 DQN family by default: the one-step target, no LayerNorm, gamma 0.99, no advantage
    learning, a constant step size, a hard target copy every 500 steps; the rest are flags."""
    args = load_script(script).Args()
    assert args.n_step == 1 and args.layer_norm is False and args.gamma == 0.99
    assert args.al_alpha == 0.0 and args.anneal_lr is False
    assert args.target_network_frequency == 500
    if "c51" in script:
        # the support must hold CartPole's values: +1 a step, at most 1 / (1 - gamma) = 100
        assert args.v_min < 0.0 and args.v_max >= 1.0 / (1.0 - args.gamma) - 1e-9


@pytest.mark.parametrize("script", SCRIPTS)
def test_n_step_transition_by_hand(script):
    m = load_script(script)
    o = [np.full(2, k, dtype=np.float32) for k in range(5)]  # observation k is [k, k]
    window = [(o[0], 1, 1.0, o[1], False), (o[1], 0, 2.0, o[2], False), (o[2], 1, 3.0, o[3], False)]
    obs, action, ret, next_obs, done, discount = m.n_step_transition(window, 0.9)
    np.testing.assert_array_equal(obs, o[0])
    assert action == 1 and done == 0.0
    assert ret == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)  # 5.23
    np.testing.assert_array_equal(next_obs, o[3])  # bootstrap from s_3 ...
    assert discount == pytest.approx(0.729)  # ... with gamma^3
    # a termination after two steps: the sum stops there and done = 1 (no bootstrap)
    _, _, ret, _, done, discount = m.n_step_transition(
        [(o[1], 0, 2.0, o[2], False), (o[2], 1, 3.0, o[3], True)], 0.9
    )
    assert ret == pytest.approx(4.7) and done == 1.0 and discount == pytest.approx(0.81)
    # a one-step window is the 2015 DQN's transition: (s, a, r, s', terminated) with discount gamma
    _, _, ret, next_obs, done, discount = m.n_step_transition([(o[2], 1, 3.0, o[3], False)], 0.9)
    assert ret == 3.0 and done == 0.0 and discount == pytest.approx(0.9)
    np.testing.assert_array_equal(next_obs, o[3])


@pytest.mark.parametrize("script", [s for s in SCRIPTS if not s.startswith(("algos/c51", "algos/qr_dqn"))])
def test_target_with_per_sample_discounts_by_hand(script):
    m, c = load_script(script), conv(script)
    # next Q = [1, 4, 2]: max 4 (DQN); online argmax is action 2 (Double DQN), whose target value is 2
    next_q = c([[1.0, 4.0, 2.0]] * 3)
    rewards, dones, discounts = c([1.0, 2.71, 0.5]), c([0.0, 0.0, 1.0]), c([0.9, 0.729, 0.81])
    if "double_dqn" in script:
        y = m.double_q_target(c([[0.0, 1.0, 3.0]] * 3), next_q, rewards, dones, discounts)
        expected = [1.0 + 0.9 * 2.0, 2.71 + 0.729 * 2.0, 0.5]
    else:
        y = m.max_q_target(next_q, rewards, dones, discounts)
        expected = [1.0 + 0.9 * 4.0, 2.71 + 0.729 * 4.0, 0.5]  # a terminated transition: r only
    np.testing.assert_allclose(np.asarray(y), expected, atol=1e-6)


@pytest.mark.parametrize("script", ["algos/c51_torch.py", "algos/c51_jax.py"])
def test_projection_with_per_sample_discounts_by_hand(script):
    m, c = load_script(script), conv(script)
    atoms = c([-10.0, -5.0, 0.0, 5.0, 10.0])
    probs = c([[0, 0, 0, 1, 0], [0, 0, 0, 1, 0]])
    # z = 5 with discount 0.81, r = 0: 4.05 -> 0.19 at 0, 0.81 at 5;
    # discount 0.9, r = 1: 5.5 -> 0.9 at 5, 0.1 at 10
    out = np.asarray(m.categorical_projection(probs, c([0.0, 1.0]), c([0.0, 0.0]), c([0.81, 0.9]), atoms))
    np.testing.assert_allclose(out, [[0, 0, 0.19, 0.81, 0], [0, 0, 0, 0.9, 0.1]], atol=1e-6)


@pytest.mark.parametrize("script", ["algos/qr_dqn_torch.py", "algos/qr_dqn_jax.py"])
def test_quantile_target_with_per_sample_discounts_by_hand(script):
    m, c = load_script(script), conv(script)
    next_quantiles = c([[-1.0, 2.0], [-1.0, 2.0], [-1.0, 2.0]])
    y = np.asarray(
        m.quantile_target(next_quantiles, c([1.0, 0.5, 3.0]), c([0.0, 0.0, 1.0]), c([0.9, 0.729, 0.81]))
    )
    # r + gamma^k * theta_j; a termination leaves r alone in every quantile
    np.testing.assert_allclose(y, [[0.1, 2.8], [-0.229, 1.958], [3.0, 3.0]], atol=1e-6)
    y = np.asarray(
        m.quantile_target(next_quantiles, c([1.0, 0.5, 3.0]), c([0.0, 0.0, 1.0]), 0.9)
    )  # a float gamma
    np.testing.assert_allclose(y, [[0.1, 2.8], [-0.4, 2.3], [3.0, 3.0]], atol=1e-6)


def record_windows(script, n_step, tmp_path, monkeypatch, num_envs=2, total_timesteps=400):
    """Run the script's own train() with n_step_transition wrapped; returns the (window, output) pairs
    it saw and the discount gamma of the run (the script's default)."""
    m = load_script(script)
    seen, real = [], m.n_step_transition

    def recording(window, gamma):
        out = real(window, gamma)
        seen.append(
            ([(np.array(o), int(a), float(r), np.array(n), bool(t)) for o, a, r, n, t in window], out)
        )
        return out

    monkeypatch.setattr(m, "n_step_transition", recording)
    args = m.Args(
        env_id=SHORT_CARTPOLE,
        num_envs=num_envs,
        total_timesteps=total_timesteps,
        learning_starts=200,
        batch_size=32,
        target_network_frequency=50,
        n_step=n_step,
        log_dir=str(tmp_path),
        progress=False,
    )
    m.train(args)
    return seen, args.gamma


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("script", value_based_scripts())
def test_the_training_loop_stores_n_step_windows(script, n_step, tmp_path, monkeypatch):
    seen, gamma = record_windows(script, n_step, tmp_path, monkeypatch)
    total_steps = 400
    # every env step starts one transition; at most n - 1 steps per env are still waiting at the end
    assert total_steps - 2 * (n_step - 1) <= len(seen) <= total_steps
    ends = 0
    for window, (obs, action, ret, next_obs, done, discount) in seen:
        k = len(window)
        assert 1 <= k <= n_step
        for (_, _, _, step_next, step_term), (step_obs, _, _, _, _) in zip(window, window[1:]):
            np.testing.assert_array_equal(step_next, step_obs)  # consecutive steps of one episode ...
            assert not step_term  # ... never past a termination
        assert discount == pytest.approx(gamma**k)
        assert done == float(window[-1][4])
        if n_step == 1:
            assert k == 1 and ret == window[0][2]
        ends += k < n_step
    if n_step == 3:
        # each episode end stores its tails of length 2 and 1 (an episode of >= 3 steps): 400 env steps
        # in episodes of at most 9 steps end at least 44 episodes, less the two still running
        assert ends >= 2 * (total_steps // SHORT_LIMIT - 2)


@pytest.mark.parametrize("script", SCRIPTS)
def test_bad_n_step_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="n[-_]step"):
        m.train(m.Args(n_step=0, log_dir=str(tmp_path), progress=False))
