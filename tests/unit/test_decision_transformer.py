"""Tier 1 for Decision Transformer: the returns-to-go and the left-padded context windows on hand
numbers, the interleaved (R, s, a) tokens, the attention mask and the masked action loss, in both
twins; padding invariance and causality of the transformer; the evaluation's return-to-go falling by
each reward received; and the bad-input checks (before any run directory is written)."""

import numpy as np
import pytest

from helpers import conv, is_torch, load_script

TWINS = ["algos/decision_transformer_torch.py", "algos/decision_transformer_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_returns_to_go_by_hand(script):
    m = load_script(script)
    # two trajectories [0, 3) and [3, 5) with rewards (1, 0, 2 | 3, -1):
    # R_0 = 1 + 0 + 2 = 3, R_1 = 0 + 2 = 2, R_2 = 2 | R_3 = 3 - 1 = 2, R_4 = -1 (no leak across the cut)
    rtg = m.returns_to_go(np.array([1.0, 0.0, 2.0, 3.0, -1.0], np.float32), [(0, 3), (3, 5)])
    np.testing.assert_allclose(rtg, [3.0, 2.0, 2.0, 2.0, -1.0])


@pytest.mark.parametrize("script", TWINS)
def test_primary_target_by_hand(script):
    m = load_script(script)
    targets = (-150.0, -400.0, -800.0)
    assert m.primary_target(targets, -254.0) == -400.0  # medium's best trajectory: -150 was never reached
    assert m.primary_target(targets, -400.0) == -400.0  # reached exactly counts
    assert m.primary_target(targets, 0.0) == -150.0  # expert data
    assert m.primary_target(targets, -900.0) == -800.0  # none reached: the lowest
    assert m.primary_target((0.0, 1.0, 0.5), 1.0) == 1.0  # any order
    # the datasets' own: -400 where no trajectory reached -150, -150 on expert data, 1 on the maze
    import offline_data

    for name, expected in (
        ("pendulum-medium", -400.0),
        ("pendulum-replay", -400.0),
        ("pendulum-learner", -400.0),
        ("pendulum-expert", -150.0),
        ("pendulum-medium-expert", -150.0),
        ("pointmaze-stitch", 1.0),
    ):
        best = offline_data.episode_returns(offline_data.load_dataset(name)).max()
        assert (
            m.primary_target(m.TARGET_RETURNS[offline_data.dataset_info(name)["env_id"]], best) == expected
        ), name


@pytest.mark.parametrize("script", TWINS)
def test_windows_are_left_padded_by_hand(script):
    m = load_script(script)
    x = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]], np.float32)  # trajectories [0, 3) and [3, 5)
    starts, ends, firsts = np.array([0, 0, 3]), np.array([3, 3, 5]), np.array([0, 1, 3])
    out = m.gather_windows({"x": x}, starts, ends, firsts, 3)
    # first 0: the whole trajectory; first 1: steps 1, 2 then the end, so one pad on the LEFT;
    # first 3: steps 3, 4 of the second trajectory, timesteps counted from its start (0, 1)
    np.testing.assert_allclose(out["x"][..., 0], [[1, 2, 3], [0, 2, 3], [0, 4, 5]])
    np.testing.assert_allclose(out["mask"], [[1, 1, 1], [0, 1, 1], [0, 1, 1]])
    np.testing.assert_array_equal(out["timesteps"], [[0, 1, 2], [0, 1, 2], [0, 0, 1]])


@pytest.mark.parametrize("script", TWINS)
def test_tokens_mask_and_loss_by_hand(script):
    m, c = load_script(script), conv(script)
    tokens = m.interleave_tokens(c([[[1.0], [2.0]]]), c([[[10.0], [20.0]]]), c([[[100.0], [200.0]]]))
    np.testing.assert_allclose(np.asarray(tokens)[0, :, 0], [1, 10, 100, 2, 20, 200])
    # mask (0, 1): the 3 tokens of timestep 0 are padding; token i sees token j iff j <= i and j >= 3
    allowed = np.asarray(m.attention_allowed(c([[0.0, 1.0]])))[0, 0]
    expected = np.tril(np.ones((6, 6), bool)) & (np.arange(6) >= 3)[None, :]
    np.testing.assert_array_equal(allowed, expected)
    # per-step MSE over the action dims: ((1-0)^2 + 0) / 2 = 0.5 and (0 + (2-0)^2) / 2 = 2
    predicted, actions = c([[[1.0, 1.0], [0.0, 2.0]]]), c([[[0.0, 1.0], [0.0, 0.0]]])
    assert float(m.dt_action_loss(predicted, actions, c([[1.0, 0.0]]))) == pytest.approx(0.5)
    assert float(m.dt_action_loss(predicted, actions, c([[1.0, 1.0]]))) == pytest.approx(1.25)


def _model_fn(script, obs_dim=3, action_dim=2, embed_dim=16, n_layer=2, n_head=2, max_timestep=50):
    """A randomly initialised model of the twin as a numpy function of a batch dict."""
    m = load_script(script)
    scale, bias = np.array([2.0, 0.5], np.float32), np.array([0.0, 0.25], np.float32)
    if is_torch(script):
        import torch

        torch.manual_seed(0)
        model = m.DecisionTransformer(
            obs_dim, action_dim, embed_dim, n_layer, n_head, max_timestep, scale, bias
        )

        def fn(b):
            with torch.no_grad():
                t = {k: torch.as_tensor(v) for k, v in b.items()}
                return model(t["returns_to_go"], t["states"], t["actions"], t["timesteps"], t["mask"]).numpy()

        return fn
    import jax

    model = m.DecisionTransformer(
        obs_dim,
        action_dim,
        embed_dim,
        n_layer,
        n_head,
        max_timestep,
        tuple(map(float, scale)),
        tuple(map(float, bias)),
    )
    b0 = _batch(np.random.default_rng(0), 1, 2)
    params = model.init(
        jax.random.PRNGKey(0), b0["returns_to_go"], b0["states"], b0["actions"], b0["timesteps"], b0["mask"]
    )
    return lambda b: np.asarray(
        model.apply(params, b["returns_to_go"], b["states"], b["actions"], b["timesteps"], b["mask"])
    )


def _batch(rng, B, K, obs_dim=3, action_dim=2):
    return {
        "returns_to_go": rng.normal(size=(B, K, 1)).astype(np.float32),
        "states": rng.normal(size=(B, K, obs_dim)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(B, K, action_dim)).astype(np.float32),
        "timesteps": rng.integers(0, 50, size=(B, K)),
        "mask": np.ones((B, K), np.float32),
    }


@pytest.mark.parametrize("script", TWINS)
def test_padding_invariance(script):
    fn = _model_fn(script)
    rng = np.random.default_rng(1)
    short = _batch(rng, 2, 3)  # 3 real timesteps
    pad = _batch(rng, 2, 4)  # 4 timesteps of garbage (not even zeros) on the left, masked out
    pad["mask"][:] = 0.0
    padded = {k: np.concatenate([pad[k], short[k]], axis=1) for k in short}
    np.testing.assert_allclose(fn(padded)[:, 4:], fn(short), atol=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_causality(script):
    fn = _model_fn(script)
    b = _batch(np.random.default_rng(2), 2, 5)
    before = fn(b)
    changed = {k: v.copy() for k, v in b.items()}
    changed["actions"][:, 2] += 1.0  # a_2 comes after s_2: predictions at t <= 2 must not move
    changed["returns_to_go"][:, 3] += 1.0
    changed["states"][:, 4] -= 1.0
    after = fn(changed)
    np.testing.assert_allclose(after[:, :3], before[:, :3], atol=1e-6)
    assert np.abs(after[:, 3:] - before[:, 3:]).max() > 1e-4, "the later predictions do see the change"


@pytest.mark.parametrize("script", TWINS)
def test_embedding_layernorm_erases_the_return_scale(script):
    # The return token is w R + b + e_t, a linear map of ONE number. A LayerNorm of w R alone gives
    # (w R - mean(w R)) / std(w R) = sign(R) LN(w) (up to the epsilon): asking for -0.3 or for -1.2
    # would be the same token; only b and e_t keep the scale. Each twin's own LayerNorm, w = (1, 2, 4, -3):
    # mean 1, std sqrt((0 + 1 + 9 + 16) / 4) = sqrt(6.5), so LN(w) = (0, 1, 3, -4) / sqrt(6.5).
    m, c = load_script(script), conv(script)
    w = np.array([1.0, 2.0, 4.0, -3.0], np.float32)
    if is_torch(script):
        import torch

        ln = lambda x: torch.nn.LayerNorm(4)(c(x)).detach().numpy()  # noqa: E731 (gain 1, bias 0)
    else:
        import jax

        layer = m.LayerNorm()
        ln = lambda x: np.asarray(layer.apply(layer.init(jax.random.PRNGKey(0), c(x)), c(x)))  # noqa: E731
    expected = np.array([0.0, 1.0, 3.0, -4.0]) / np.sqrt(6.5)
    np.testing.assert_allclose(ln(-0.3 * w), -expected, atol=1e-3)
    np.testing.assert_allclose(ln(-1.2 * w), -expected, atol=1e-4)
    np.testing.assert_allclose(ln(0.3 * w), expected, atol=1e-3)  # the sign is all that is left
    b = np.array(
        [0.5, -0.5, 0.25, 0.0], np.float32
    )  # a bias the size of the paper code's init keeps some scale
    assert np.abs(ln(-0.3 * w + b) - ln(-1.2 * w + b)).max() > 0.1


@pytest.mark.parametrize("script", TWINS)
def test_embedding_layernorm_is_a_flag_and_off_by_default(script):
    m = load_script(script)
    assert m.Args().embed_layernorm is False
    b = _batch(np.random.default_rng(3), 1, 2)
    names = {}
    for flag in (False, True):
        if is_torch(script):
            model = m.DecisionTransformer(3, 2, 16, 1, 1, 50, np.ones(2), np.zeros(2), flag)
            names[flag] = {n.split(".")[0] for n, _ in model.named_parameters()}
        else:
            import jax

            model = m.DecisionTransformer(3, 2, 16, 1, 1, 50, (1.0, 1.0), (0.0, 0.0), flag)
            names[flag] = set(
                model.init(
                    jax.random.PRNGKey(0),
                    b["returns_to_go"],
                    b["states"],
                    b["actions"],
                    b["timesteps"],
                    b["mask"],
                )["params"]
            )
    assert "embed_ln" not in names[False] and "embed_ln" in names[True]
    assert names[True] - names[False] == {"embed_ln"}


@pytest.mark.parametrize("script", TWINS)
def test_modality_embeddings_start_as_in_the_paper_code(script):
    # return / state / action embeddings: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's
    # default nn.Linear); everything else GPT-2's N(0, 0.02^2) with zero biases
    m = load_script(script)
    obs_dim, action_dim, embed_dim = 3, 2, 256
    if is_torch(script):
        import torch

        torch.manual_seed(0)
        model = m.DecisionTransformer(obs_dim, action_dim, embed_dim, 1, 1, 50, np.ones(2), np.zeros(2))
        get = {name: p.detach().numpy() for name, p in model.named_parameters()}
    else:
        import jax

        model = m.DecisionTransformer(obs_dim, action_dim, embed_dim, 1, 1, 50, (1.0, 1.0), (0.0, 0.0))
        b0 = _batch(np.random.default_rng(0), 1, 2)
        params = model.init(
            jax.random.PRNGKey(0),
            b0["returns_to_go"],
            b0["states"],
            b0["actions"],
            b0["timesteps"],
            b0["mask"],
        )["params"]
        get = {
            f"{mod}.{'weight' if leaf in ('kernel', 'embedding') else leaf}": np.asarray(v)
            for mod, leaves in params.items()
            if not mod.startswith("h_")
            for leaf, v in leaves.items()
        }
    for name, fan_in in (("embed_return", 1), ("embed_state", obs_dim), ("embed_action", action_dim)):
        bound = 1.0 / np.sqrt(fan_in)
        for leaf in ("weight", "bias"):
            x = get[f"{name}.{leaf}"]
            assert np.abs(x).max() <= bound and np.abs(x).max() > 0.8 * bound, (name, leaf)
            assert abs(x.std() - bound / np.sqrt(3)) < 0.25 * bound / np.sqrt(3), (
                name,
                leaf,
            )  # U(-b, b): std b/sqrt(3)
    assert abs(get["embed_timestep.weight"].std() - 0.02) < 0.002
    np.testing.assert_array_equal(get["predict_action.bias"], 0.0)


@pytest.mark.parametrize("script", TWINS)
def test_evaluation_return_to_go_falls_by_each_reward(script):
    m = load_script(script)
    seen = []

    def policy(batch):  # records the return token at the latest real step, pushes with +1
        seen.append(batch["returns_to_go"][:, -1, 0].copy())
        assert batch["mask"][:, -1].all()
        return np.ones((len(batch["mask"]), 1), np.float32)

    returns = m.run_episodes(
        policy, "Pendulum-v1", (-100.0, -500.0), 1, 7, 4, 1000.0, np.zeros(3), np.ones(3)
    )
    seen = np.array(seen)  # (steps, targets)
    assert seen.shape == (200, 2)
    np.testing.assert_allclose(seen[0], [-0.1, -0.5], atol=1e-7)
    # same seed, same actions: both targets see the same rewards, so the return tokens stay 0.4 apart
    np.testing.assert_allclose(seen[:, 0] - seen[:, 1], 0.4, atol=1e-5)
    # the last token is (target - rewards before the last step) / 1000, so it ends near target - return
    assert returns[0, 0] == pytest.approx(returns[1, 0])
    assert seen[-1, 0] * 1000 == pytest.approx(-100.0 - returns[0, 0], abs=20.0)


@pytest.mark.parametrize("script", TWINS)
@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(dataset="hopper-medium"), "pendulum-replay"),  # unknown: the valid names are listed
        (dict(dataset="cartpole-medium"), "bc_"),  # discrete actions: the right scripts are named
        (dict(embed_dim=30, n_head=4), "divisible"),
        (dict(context_len=0), "--context-len"),
        (dict(return_scale=-1.0), "--return-scale"),
    ],
)
def test_bad_input_is_refused_before_a_run_directory(script, overrides, match, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match=match):
        m.train(m.Args(log_dir=str(tmp_path), progress=False, **overrides))
    assert not any(tmp_path.iterdir()), "refused before any run directory was written"
