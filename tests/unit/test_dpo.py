"""Tier 1 for DPO: worked problem 5 (docs/worked_problems.md) in both twins, exact numbers for
dpo_loss and its implicit rewards, the gradient's direction, and the bad-input checks."""

import math

import jax
import jax.numpy as jnp
import pytest
import torch

from helpers import load_script

TWINS = ["llm/dpo_torch.py", "llm/dpo_jax.py"]
tasks = load_script("llm/tasks.py")


def dpo(script, pc, pr, rc, rr, beta):
    m = load_script(script)
    if script.endswith("torch.py"):
        loss, c, r = m.dpo_loss(*(torch.tensor([x], dtype=torch.float32) for x in (pc, pr, rc, rr)), beta)
        return loss.item(), c.item(), r.item()
    loss, c, r = m.dpo_loss(*(jnp.array([x], dtype=jnp.float32) for x in (pc, pr, rc, rr)), beta)
    return float(loss), float(c[0]), float(r[0])


@pytest.mark.parametrize("script", TWINS)
def test_problem5_dpo_arithmetic(script):
    loss, chosen, rejected = dpo(script, -10.0, -9.0, -12.0, -8.0, 0.1)
    assert chosen == pytest.approx(0.2, abs=1e-6)  # 0.1 * (-10 - (-12))
    assert rejected == pytest.approx(-0.1, abs=1e-6)  # 0.1 * (-9 - (-8))
    assert chosen - rejected == pytest.approx(0.3, abs=1e-6)
    assert loss == pytest.approx(math.log1p(math.exp(-0.3)), abs=1e-6)
    assert loss == pytest.approx(0.5544, abs=1e-4)


@pytest.mark.parametrize("script", TWINS)
def test_problem5_policy_equal_to_reference_gives_ln2(script):
    loss, chosen, rejected = dpo(script, -3.0, -7.0, -3.0, -7.0, 0.1)
    assert loss == pytest.approx(math.log(2), abs=1e-6) and chosen == 0.0 and rejected == 0.0


@pytest.mark.parametrize("script", TWINS)
def test_gradient_raises_chosen_lowers_rejected(script):
    """d loss / d logp_chosen = -beta * sigmoid(-margin) < 0, d loss / d logp_rejected = the opposite;
    the implicit rewards are detached (logging only)."""
    m = load_script(script)
    beta, margin = 0.1, 0.3
    s = 1.0 / (1.0 + math.exp(margin))
    if script.endswith("torch.py"):
        pc, pr = torch.tensor([-10.0], requires_grad=True), torch.tensor([-9.0], requires_grad=True)
        loss, c, r = m.dpo_loss(pc, pr, torch.tensor([-12.0]), torch.tensor([-8.0]), beta)
        loss.backward()
        g = (pc.grad.item(), pr.grad.item())
        assert not c.requires_grad and not r.requires_grad
    else:
        f = lambda pc, pr: m.dpo_loss(pc, pr, jnp.array([-12.0]), jnp.array([-8.0]), beta)[0]
        g = tuple(float(x[0]) for x in jax.grad(f, argnums=(0, 1))(jnp.array([-10.0]), jnp.array([-9.0])))
        gc = jax.grad(
            lambda pc: m.dpo_loss(pc, jnp.array([-9.0]), jnp.array([-12.0]), jnp.array([-8.0]), beta)[1].sum()
        )
        assert float(gc(jnp.array([-10.0]))[0]) == 0.0
    assert g[0] == pytest.approx(-beta * s, abs=1e-6) and g[1] == pytest.approx(beta * s, abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--samples-per-prompt"):
        m.train(m.Args(samples_per_prompt=1, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--label-noise"):
        m.train(m.Args(label_noise=0.5, log_dir=str(tmp_path), progress=False))
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(
            m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(tmp_path / "runs"), progress=False)
        )
    with pytest.raises(ValueError, match="block_size|context"):
        m.train(m.Args(digits=5, log_dir=str(tmp_path / "runs"), progress=False))
    assert not (tmp_path / "runs").exists()
