"""Shared pytest set-up: tests/ on sys.path (for helpers.py and registry.py), CPU-only JAX."""
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))
