"""Experiments that are not tests: speed benchmarks, seed sweeps, the comparison tables, the figures'
drivers and probes. Each runs from the repository root as `python -m benchmarks.<name>`; they use the
test harness (tests/helpers.py, tests/registry.py, tests/evaluation.py) but assert nothing."""
