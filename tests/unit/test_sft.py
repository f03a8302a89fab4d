"""Tier 1 for SFT: the masked next-token loss by hand in both twins, and the bad-input checks."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from helpers import load_script

TWINS = ["llm/sft_torch.py", "llm/sft_jax.py"]


@pytest.mark.parametrize("script", TWINS)
def test_sft_loss_is_cross_entropy_on_completion_tokens(script):
    m = load_script(script)
    conv = torch.as_tensor if script.endswith("torch.py") else jnp.asarray
    logits = np.zeros((2, 3, 4), dtype=np.float32)  # uniform: every token costs ln 4
    logits[0, 0, 1] = 100.0  # a masked prompt position: must not count
    labels = np.zeros((2, 3), dtype=np.int64)
    mask = np.array([[0, 1, 1], [0, 0, 1]], dtype=np.float32)
    assert float(m.sft_loss(conv(logits), conv(labels), conv(mask))) == pytest.approx(np.log(4), abs=1e-5)


@pytest.mark.parametrize("script", TWINS)
def test_bad_input_is_refused(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--digits must be at most what --block-size 12 holds"):
        m.train(m.Args(digits=4, block_size=12, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--n-head must be a divisor"):
        m.train(m.Args(d_model=30, n_head=4, log_dir=str(tmp_path), progress=False))
    with pytest.raises(ValueError, match="--drop-carry"):
        m.train(m.Args(drop_carry=1.5, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())
