"""The seed sweep (benchmarks/sweep.py): finds registered specs, runs seeds on each engine with the same
figures, and writes the learning suite's files. Value iteration on FrozenLake is the cheap spec
(seconds per seed)."""

import csv
import sys

import pytest

from helpers import ROOT, run_train

sys.path.insert(0, str(ROOT / "benchmarks"))
import sweep  # noqa: E402

SPEC = "value_iteration_torch"


def read_runs(path):
    with open(path) as f:
        return {int(r["seed"]): float(r["greedy_mean_return"]) for r in csv.DictReader(f)}


def test_find_specs():
    assert [s.name for s in sweep.find_specs("algos/ppo_torch.py")] == ["ppo_torch-CartPole-v1"]
    assert [s.name for s in sweep.find_specs("ppo_torch")] == ["ppo_torch-CartPole-v1"]
    names = [s.name for s in sweep.find_specs("ppo_rlhf_torch")]
    assert "ppo_rlhf_torch-default-beta0" in names and len(names) == 2  # both specs of one script
    assert [s.name for s in sweep.find_specs("ppo_rlhf_torch-default-beta0")] == [
        "ppo_rlhf_torch-default-beta0"
    ]
    with pytest.raises(SystemExit, match="no registered learning run"):
        sweep.find_specs("no_such_algo")


def test_serial_sweep_writes_the_learning_suite_files(tmp_path):
    sweep.main(
        [
            SPEC,
            "--seeds",
            "1-2",
            "--engine",
            "serial",
            "--out",
            str(tmp_path),
            "--log-dir",
            str(tmp_path / "runs"),
        ]
    )
    name = "value_iteration_torch-FrozenLake-v1"
    for suffix in (".csv", ".png", ".runs.csv", ".summary.csv"):
        assert (tmp_path / f"{name}{suffix}").exists(), suffix
    runs = read_runs(tmp_path / f"{name}.runs.csv")
    direct = {
        s: run_train("algos/value_iteration_torch.py", tmp_path / "direct", seed=s, env_id="FrozenLake-v1")
        for s in (1, 2)
    }
    assert runs == {s: pytest.approx(direct[s]["greedy_mean_return"], abs=1e-4) for s in (1, 2)}
    with open(tmp_path / f"{name}.summary.csv") as f:
        summary = {r["aggregate"]: float(r["value"]) for r in csv.DictReader(f)}
    # two runs: the mean, the median and the IQM (the middle 50% of two runs is both) coincide
    mean = sum(runs.values()) / 2
    assert summary["mean"] == pytest.approx(mean, abs=1e-4)
    assert summary["median"] == pytest.approx(mean, abs=1e-4)
    assert summary["iqm"] == pytest.approx(mean, abs=1e-4)


def test_ray_and_process_pool_give_the_serial_figures(tmp_path):
    """Each seed is the same computation wherever it runs: a process pool and (where installed) Ray
    reproduce the serial sweep's figures."""
    spec = sweep.find_specs(SPEC)[0]
    serial = sweep.run(spec, [1, 2], "serial", 1, tmp_path / "serial")
    pool = sweep.run(spec, [1, 2], "processes", 2, tmp_path / "pool")
    assert {s: pool[s]["greedy_mean_return"] for s in (1, 2)} == {
        s: serial[s]["greedy_mean_return"] for s in (1, 2)
    }
    pytest.importorskip("ray", reason="ray is optional (requirements-extra.txt)")
    on_ray = sweep.run(spec, [1, 2], "ray", 2, tmp_path / "ray")
    assert {s: on_ray[s]["greedy_mean_return"] for s in (1, 2)} == {
        s: serial[s]["greedy_mean_return"] for s in (1, 2)
    }
