"""Devices: every script takes `--cuda` (default on, CleanRL's convention).

- Every twin script has an Args field `cuda` defaulting to True, in both twins, and reads it
  (a tabular script may instead say that its table stays on the CPU whatever --cuda says).
- With a CUDA GPU, each torch script runs its SMOKE_ARGS with cuda=True and puts something on the
  GPU; with a JAX GPU backend, each JAX twin does the same in a fresh interpreter (the test suite
  pins JAX to the CPU in tests/conftest.py). Without one these tests are skipped, with the reason.
- On a CPU-only machine the flag is harmless: cuda=True and cuda=False give the same run, figure
  for figure. tests/smoke/test_smoke.py checks it for every script (its second run is --no-cuda).
- The GPU runner reads the device each JAX twin selected, whether it set jax_default_device or used a
  `with jax.default_device(...)` block (the data-parallel twins); that logic is checked on the CPU.
"""

import dataclasses
import functools
import json
import os
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, all_finite, is_torch, load_script, run_train, twin_scripts

SCRIPTS = twin_scripts()
TORCH_SCRIPTS = [s for s in SCRIPTS if is_torch(s)]
JAX_SCRIPTS = [s for s in SCRIPTS if not is_torch(s)]
# Keys of a summary that legitimately differ between two runs with the same seed (as in tests/smoke).
RUN_SPECIFIC = {"sps", "wall_time", "run_dir", "model_path"}
# The comment a tabular script carries when its Q table stays on the host whatever --cuda says.
HOST_TABLE = "whatever --cuda says"
NO_CUDA = "needs a CUDA GPU (torch.cuda.is_available() is False)"


@pytest.mark.parametrize("script", SCRIPTS)
def test_cuda_field_defaults_on_and_is_read(script):
    m = load_script(script)
    fields = {f.name: f for f in dataclasses.fields(m.Args)}
    assert "cuda" in fields, f"{script}: Args has no `cuda` field (every script takes --cuda)"
    assert fields["cuda"].default is True, f"{script}: `cuda` must default to True (CleanRL's convention)"
    source = (ROOT / script).read_text()
    assert "args.cuda" in source or HOST_TABLE in source, (
        f"{script}: Args.cuda is declared but never read (and no comment says the table stays on the CPU)"
    )


def strip(summary):
    return {k: v for k, v in summary.items() if k not in RUN_SPECIFIC}


# ----------------------------------------------------------------------------- torch on a CUDA GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("script", TORCH_SCRIPTS)
def test_torch_smoke_on_cuda(script, tmp_path):
    m = load_script(script)
    torch.cuda.reset_peak_memory_stats()
    summary = run_train(script, tmp_path, seed=1, cuda=True, **m.SMOKE_ARGS)
    assert all_finite(summary), f"non-finite figure in {summary}"
    if HOST_TABLE not in (ROOT / script).read_text():
        assert torch.cuda.max_memory_allocated() > 0, (
            f"{script} ran with cuda=True but put nothing on the GPU"
        )


# ----------------------------------------------------------------------------- JAX on a GPU backend
def _env_without_cpu_pin():
    return {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}


@functools.lru_cache(maxsize=1)
def jax_gpu_backend():
    """The default JAX backend of a fresh interpreter that is not pinned to the CPU."""
    out = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.default_backend())"],
        env=_env_without_cpu_pin(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "none"


RUNNER = """
import json, math, sys
sys.path.insert(0, {tests!r})
import jax
from helpers import all_finite, load_script, run_train
# Record the device a script selects: either jax.config.update("jax_default_device", d), or a
# `with jax.default_device(d):` block, after which the config reads None again.
selected = []
_update, _block = jax.config.update, jax.default_device
def update(name, value):
    if name == "jax_default_device" and value is not None:
        selected.append(value.platform)
    return _update(name, value)
def block(device):
    selected.append(device.platform)
    return _block(device)
jax.config.update, jax.default_device = update, block
m = load_script({script!r})
s = run_train({script!r}, {log_dir!r}, seed=1, cuda={cuda!r}, **m.SMOKE_ARGS)
print(json.dumps({{"finite": all_finite(s), "backend": jax.default_backend(),
                  "device": selected[-1] if selected else jax.default_backend()}}))
"""


def run_jax_runner(script, log_dir, cuda, env):
    code = RUNNER.format(tests=str(ROOT / "tests"), script=script, log_dir=str(log_dir), cuda=cuda)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("script", JAX_SCRIPTS)
def test_jax_smoke_on_gpu(script, tmp_path):
    if jax_gpu_backend() != "gpu":
        pytest.skip(
            f"needs a JAX GPU backend (jax.default_backend() is {jax_gpu_backend()!r}; "
            f'pip install "jax[cuda12]==0.10.2")'
        )
    result = run_jax_runner(script, tmp_path, True, _env_without_cpu_pin())
    assert result["finite"], result
    if HOST_TABLE not in (ROOT / script).read_text():
        assert result["device"] == "gpu", f"{script} ran with cuda=True on {result['device']}"


# ----------------------------------------------------------------------------- the runner, on the CPU
def test_the_gpu_runner_reads_the_selected_device_on_the_cpu(tmp_path):
    """The runner of test_jax_smoke_on_gpu, pinned to the CPU, on a DDP twin: it must report the
    device that the script's `with jax.default_device(...)` block chose, not fail once the block ends."""
    result = run_jax_runner("algos/ppo_ddp_jax.py", tmp_path, False, {**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result == {"finite": True, "backend": "cpu", "device": "cpu"}
