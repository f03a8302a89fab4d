"""Tier 1 for the Bradley-Terry reward model: the loss and pairwise accuracy by hand in both twins,
the zero-initialised head (every score 0, loss ln 2), and the bad-input checks."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["llm/reward_model_torch.py", "llm/reward_model_jax.py"]
tasks = load_script("llm/tasks.py")


@pytest.mark.parametrize("script", TWINS)
def test_bradley_terry_by_hand(script):
    m = load_script(script)
    conv = (lambda x: torch.tensor(x)) if script.endswith("torch.py") else jnp.asarray
    # margins +1 and -0.5: loss = (ln(1 + e^-1) + ln(1 + e^0.5)) / 2, one of two pairs ranked right
    loss, acc = m.bradley_terry_loss(conv([1.0, 0.0]), conv([0.0, 0.5]))
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(0.5))) / 2
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert float(acc) == pytest.approx(0.5)
    # equal scores: P(chosen preferred) = 1/2, loss ln 2
    loss, _ = m.bradley_terry_loss(conv([3.0]), conv([3.0]))
    assert float(loss) == pytest.approx(math.log(2), abs=1e-6)


@pytest.mark.parametrize("script", TWINS)
def test_last_index_points_at_eos(script):
    m = load_script(script)
    c = np.array([[5, 6, 7, tasks.EOS], [5, tasks.EOS, 0, 0], [5, 6, 7, 8]])
    np.testing.assert_array_equal(m.last_index(6, c), [9, 7, 9])


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--samples-per-prompt"):
        m.train(m.Args(samples_per_prompt=1, log_dir=str(tmp_path), progress=False))
    lm = load_script("llm/tinylm_torch.py")
    lm.save_checkpoint(lm.TinyLM(20, 16, 32, 1, 2), tmp_path / "vocab20.npz")
    with pytest.raises(ValueError, match="vocabulary"):
        m.train(
            m.Args(sft_path=str(tmp_path / "vocab20.npz"), log_dir=str(tmp_path / "runs"), progress=False)
        )
    assert not (tmp_path / "runs").exists()
