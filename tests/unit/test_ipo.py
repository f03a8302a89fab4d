"""Tier 1 for IPO: the loss on worked problem 5's log-probs at two betas, against TRL's documented
formula for loss_type="ipo"; the gradient (IPO also pulls a margin that is too large back); the fixed
point (gradient descent on the margin h alone: IPO settles at 1/(2 beta), DPO's h keeps growing);
the token-averaged log-probs of --average-logps; and the bad-input checks. Both twins throughout."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["llm/ipo_torch.py", "llm/ipo_jax.py"]
DPO = {"llm/ipo_torch.py": "llm/dpo_torch.py", "llm/ipo_jax.py": "llm/dpo_jax.py"}
tasks = load_script("llm/tasks.py")


def trl_ipo(pc, pr, rc, rr, beta):
    """TRL's documented IPO loss, written the way its docs write it: logits = (pi log-ratio chosen vs
    rejected) - (ref log-ratio chosen vs rejected), loss = (logits - 1 / (2 beta))^2, batch mean."""
    logits = (np.asarray(pc) - np.asarray(pr)) - (np.asarray(rc) - np.asarray(rr))
    return float(np.mean((logits - 1 / (2 * beta)) ** 2))


def ipo(script, pc, pr, rc, rr, beta):
    m = load_script(script)
    if script.endswith("torch.py"):
        loss, c, r = m.ipo_loss(*(torch.tensor(x, dtype=torch.float32) for x in (pc, pr, rc, rr)), beta)
        return loss.item(), c.numpy(), r.numpy()
    loss, c, r = m.ipo_loss(*(jnp.array(x, dtype=jnp.float32) for x in (pc, pr, rc, rr)), beta)
    return float(loss), np.asarray(c), np.asarray(r)


@pytest.mark.parametrize("script", TWINS)
def test_ipo_loss_on_hand_numbers_at_two_betas(script):
    # Worked problem 5's log-probs: policy -10 (chosen), -9 (rejected); reference -12, -8.
    # Log-ratios: chosen -10 - (-12) = +2, rejected -9 - (-8) = -1, so h = 2 - (-1) = 3.
    # beta 0.1: target 1 / (2 * 0.1) = 5,   loss (3 - 5)^2   = 4.0;  rewards 0.1 * 2 = 0.2, 0.1 * -1 = -0.1.
    # beta 1.0: target 1 / (2 * 1.0) = 0.5, loss (3 - 0.5)^2 = 6.25; rewards 2.0, -1.0.
    for beta, want, (rc_want, rr_want) in ((0.1, 4.0, (0.2, -0.1)), (1.0, 6.25, (2.0, -1.0))):
        loss, c, r = ipo(script, [-10.0], [-9.0], [-12.0], [-8.0], beta)
        assert loss == pytest.approx(want, abs=1e-5)
        assert loss == pytest.approx(trl_ipo([-10.0], [-9.0], [-12.0], [-8.0], beta), abs=1e-5)
        assert c[0] == pytest.approx(rc_want, abs=1e-6) and r[0] == pytest.approx(rr_want, abs=1e-6)
    # A batch of two: add a pair where policy = reference (h = 0), the start of every run.
    # beta 0.1: (0 - 5)^2 = 25, mean (4 + 25) / 2 = 14.5.
    # beta 1.0: (0 - 0.5)^2 = 0.25, mean (6.25 + 0.25) / 2 = 3.25.
    batch = ([-10.0, -3.0], [-9.0, -7.0], [-12.0, -3.0], [-8.0, -7.0])
    for beta, want in ((0.1, 14.5), (1.0, 3.25)):
        loss = ipo(script, *batch, beta)[0]
        assert loss == pytest.approx(want, abs=1e-5)
        assert loss == pytest.approx(trl_ipo(*batch, beta), abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_ipo_loss_on_token_averaged_log_probs(script):
    # --average-logps (TRL's IPO): the same sums over 4 completion tokens (chosen) and 2 (rejected):
    # chosen -10 / 4 = -2.5 against -12 / 4 = -3.0 (log-ratio +0.5); rejected -9 / 2 = -4.5 against
    # -8 / 2 = -4.0 (log-ratio -0.5); h = 0.5 - (-0.5) = 1.0. beta 0.1: (1 - 5)^2 = 16.
    loss = ipo(script, [-2.5], [-4.5], [-3.0], [-4.0], 0.1)[0]
    assert loss == pytest.approx(16.0, abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_gradient_pulls_margin_to_target_from_both_sides(script):
    """d loss / d logp_chosen = 2 (h - 1/(2 beta)) / B, d loss / d logp_rejected = the opposite.
    h = 3: at beta 0.1 (target 5) -4 and +4: raise the chosen, lower the rejected, as DPO would;
    at beta 1.0 (target 0.5) +5 and -5: the margin is too large and IPO pulls it back, which DPO's
    gradient (always of the first sign) never does. The implicit rewards are detached."""
    m = load_script(script)
    for beta, want in ((0.1, -4.0), (1.0, 5.0)):
        if script.endswith("torch.py"):
            pc, pr = torch.tensor([-10.0], requires_grad=True), torch.tensor([-9.0], requires_grad=True)
            loss, c, r = m.ipo_loss(pc, pr, torch.tensor([-12.0]), torch.tensor([-8.0]), beta)
            loss.backward()
            g = (pc.grad.item(), pr.grad.item())
            assert not c.requires_grad and not r.requires_grad
        else:
            f = lambda pc, pr: m.ipo_loss(pc, pr, jnp.array([-12.0]), jnp.array([-8.0]), beta)[0]
            g = tuple(float(x[0]) for x in jax.grad(f, argnums=(0, 1))(jnp.array([-10.0]), jnp.array([-9.0])))
            gc = jax.grad(
                lambda pc: m.ipo_loss(pc, jnp.array([-9.0]), jnp.array([-12.0]), jnp.array([-8.0]), beta)[
                    1
                ].sum()
            )
            assert float(gc(jnp.array([-10.0]))[0]) == 0.0
        assert g[0] == pytest.approx(want, abs=1e-5) and g[1] == pytest.approx(-want, abs=1e-5)


def descend_on_h(script, loss_name, beta, p=1.0, steps=2000, lr=0.1):
    """Plain gradient descent on the log-ratio margin h alone (the policy's chosen log-ratio; the other
    three log-probs 0), on the expected loss over labels: with probability p the pair is labelled
    (y_w, y_l), with 1 - p the other way round (margin -h). Returns h after steps/2 and after steps."""
    m = load_script(script)
    loss_fn = getattr(m, loss_name)
    zero = [0.0]
    if script.endswith("torch.py"):
        h = torch.zeros(1, requires_grad=True)
        z = torch.tensor(zero)
        out = []
        for step in range(1, steps + 1):
            loss = p * loss_fn(h, z, z, z, beta)[0] + (1 - p) * loss_fn(-h, z, z, z, beta)[0]
            (g,) = torch.autograd.grad(loss, h)
            with torch.no_grad():
                h -= lr * g
            if step in (steps // 2, steps):
                out.append(h.item())
        return out
    z = jnp.array(zero)
    grad = jax.jit(
        jax.grad(lambda h: p * loss_fn(h, z, z, z, beta)[0] + (1 - p) * loss_fn(-h, z, z, z, beta)[0])
    )
    h, out = jnp.zeros(1), []
    for step in range(1, steps + 1):
        h = h - lr * grad(h)
        if step in (steps // 2, steps):
            out.append(float(h[0]))
    return out


@pytest.mark.parametrize("script", TWINS)
def test_fixed_point_deterministic_preference(script):
    # One pair, always the same winner (p = 1), beta 0.5, 2,000 steps of gradient descent at lr 0.1
    # on h alone. IPO: d/dh (h - 1)^2 = 2 (h - 1), each step shrinks h - 1 by (1 - 0.2) = 0.8, so
    # h -> 1 / (2 beta) = 1 exactly. DPO: d/dh -log sigmoid(h / 2) = -sigmoid(-h / 2) / 2 is never 0:
    # h keeps growing, like (1 / beta) ln(beta^2 * lr * steps) = 2 ln 50 = 7.8 (measured 7.71 at
    # 2,000 steps, 6.26 at 1,000; its gradient there is still -sigmoid(-3.85) / 2 = -0.0104): the
    # optimum is at h = infinity.
    beta = 0.5
    h_half, h_end = descend_on_h(script, "ipo_loss", beta)
    assert h_half == pytest.approx(1 / (2 * beta), abs=1e-5) and h_end == pytest.approx(1.0, abs=1e-5)
    d_half, d_end = descend_on_h(DPO[script], "dpo_loss", beta)
    assert d_end > 7 * (1 / (2 * beta)) and d_end > d_half + 1.0  # far past IPO's 1 and still rising
    assert d_end == pytest.approx(7.71, abs=0.01)


@pytest.mark.parametrize("script", TWINS)
def test_fixed_point_with_label_noise(script):
    # The same pair labelled the right way with probability p = 0.9 (the scripts' label_noise 0.1).
    # Expected IPO loss 0.9 (h - 1)^2 + 0.1 (-h - 1)^2 is least at h = (2p - 1) / (2 beta) = 0.8;
    # expected DPO loss is least where sigmoid(beta h) = p: h = ln(0.9 / 0.1) / beta = 2 ln 9 = 4.394.
    beta = 0.5
    assert descend_on_h(script, "ipo_loss", beta, p=0.9)[1] == pytest.approx(0.8, abs=1e-4)
    assert descend_on_h(DPO[script], "dpo_loss", beta, p=0.9, steps=4000, lr=1.0)[1] == pytest.approx(
        2 * math.log(9), abs=1e-3
    )


@pytest.mark.parametrize("script", TWINS)
def test_pair_logps_average_divides_by_completion_tokens(script, tmp_path):
    """--average-logps: the sum over the completion tokens up to and including <eos>, divided by their
    number (here 2 tokens for the first completion, 4 for the second, which has no <eos>)."""
    m = load_script(script)
    lm = load_script("llm/tinylm_torch.py")
    torch.manual_seed(0)
    lm.save_checkpoint(lm.TinyLM(tasks.VOCAB_SIZE, 16, 32, 1, 2), tmp_path / "lm.npz")
    prompts = tasks.encode_prompts(tasks.make_splits(2, 2)[1], 2)
    completions = np.array([[3, tasks.EOS, 5, 6], [3, 4, 5, 6]])
    mask = tasks.completion_mask(completions)
    assert mask.sum(-1).tolist() == [2.0, 4.0]
    if script.endswith("torch.py"):
        model, T = lm.load_checkpoint(tmp_path / "lm.npz"), torch.as_tensor
        with torch.no_grad():
            total = m.pair_logps(model, T(prompts), T(completions), T(mask)).numpy()
            mean = m.pair_logps(model, T(prompts), T(completions), T(mask), average=True).numpy()
    else:
        model, params = load_script("llm/tinylm_jax.py").load_checkpoint(tmp_path / "lm.npz")
        J = jnp.asarray
        total = np.asarray(m.pair_logps(model, params, J(prompts), J(completions), J(mask)))
        mean = np.asarray(m.pair_logps(model, params, J(prompts), J(completions), J(mask), average=True))
    np.testing.assert_allclose(mean, total / np.array([2.0, 4.0]), rtol=1e-6)
    assert (total < 0).all()


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--samples-per-prompt"):
        m.train(m.Args(samples_per_prompt=1, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--label-noise"):
        m.train(m.Args(label_noise=0.5, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--beta"):
        m.train(m.Args(beta=0.0, log_dir=str(tmp_path), progress=False))
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(
            m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(tmp_path / "runs"), progress=False)
        )
    with pytest.raises(ValueError, match="block_size|context"):
        m.train(m.Args(digits=5, log_dir=str(tmp_path / "runs"), progress=False))
    assert not (tmp_path / "runs").exists()
