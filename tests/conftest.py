"""Shared pytest set-up: tests/ on sys.path (for helpers.py and registry.py), CPU-only JAX, one torch
thread per worker, and one JAX compilation cache for the whole session."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One intra-op thread per process for torch (read when torch is imported, after this file): the suite
# runs one worker per core, and extra threads per worker spin against each other (the off-policy
# torch scripts were 14x slower with two threads each under that load; algos/sac_torch.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# One persistent XLA compilation cache for the session, shared by the xdist workers and the scripts the
# tests start as subprocesses (they inherit the environment; the workers are started after this file
# runs in the controller). Much of a JAX smoke run is compilation, and the suite compiles the same
# programs many times: each smoke test runs its script twice (the determinism check), and every JAX
# LLM script first trains the same small SFT model: with the cache a second smoke run mostly loads
# its programs instead of compiling them, with the same figures. The cache is keyed on the program,
# the compile options and the XLA flags, so a hit is the executable a fresh compile gave
# (tests/unit/test_determinism.py: a run from a fresh compile and one from the cache agree
# to the bit). A fresh folder per session (removed at exit): the suite never reads a stale one.
# A cache the user set (JAX_COMPILATION_CACHE_DIR) is left as it is.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache_dir = tempfile.mkdtemp(prefix="jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
# The smoke runs' summaries, shared the same way (helpers.smoke_run): a unit test that reads the summary
# of a script's SMOKE_ARGS run gets the smoke test's run instead of training it again.
if "SMOKE_RUN_CACHE" not in os.environ:
    _smoke_dir = tempfile.mkdtemp(prefix="smoke-runs-")
    os.environ["SMOKE_RUN_CACHE"] = _smoke_dir
    atexit.register(shutil.rmtree, _smoke_dir, ignore_errors=True)
# Cache every compile, not only those over JAX's default 1 s: most of the suite's small programs take less.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _pair_of(test_file):
    """(torch, JAX) script paths of the pair a test file is named after: tests/<tier>/test_<name>.py."""
    name = Path(str(test_file)).stem.removeprefix("test_")
    root = Path(__file__).resolve().parents[1]
    for folder in ("algos", "llm"):
        if (root / folder / f"{name}_torch.py").exists():
            return f"{folder}/{name}_torch.py", f"{folder}/{name}_jax.py"
    return None


@pytest.fixture(scope="module")
def twins(request):
    """The two modules of the pair the test file is named after, (torch, JAX): tests/parity/test_ppo.py
    gets (algos/ppo_torch.py, algos/ppo_jax.py)."""
    from helpers import load_script

    pair = _pair_of(request.path)
    if pair is None:
        raise LookupError(f"{request.path.name} names no pair in algos/ or llm/: define its own `twins`")
    return tuple(load_script(p) for p in pair)
