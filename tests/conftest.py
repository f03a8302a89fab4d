"""Shared pytest set-up: tests/ on sys.path (for helpers.py and registry.py), CPU-only JAX, one torch
thread per worker."""
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One intra-op thread per process for torch (read when torch is imported, after this file): the suite
# runs one worker per core, and extra threads per worker spin against each other (the off-policy
# torch scripts were 14x slower with two threads each under that load; algos/sac_torch.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
