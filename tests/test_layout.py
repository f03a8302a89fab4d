"""tests/ holds the harness and the tests; experiments that assert nothing live in benchmarks/."""

from helpers import ROOT

HARNESS = {"conftest.py", "helpers.py", "registry.py", "evaluation.py"}


def test_tests_top_level_is_harness_or_tests():
    modules = {p.name for p in (ROOT / "tests").glob("*.py")}
    stray = sorted(m for m in modules - HARNESS if not m.startswith("test_"))
    assert not stray, f"not a test and not the harness: move {stray} to benchmarks/"


def test_benchmarks_are_not_collected_as_tests():
    tests = sorted(p.name for p in (ROOT / "benchmarks").glob("test_*.py"))
    assert not tests, f"benchmarks/ holds experiments, not tests: {tests}"
