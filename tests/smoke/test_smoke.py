"""Tier 3: every algorithm script under algos/ and llm/ runs its SMOKE_ARGS budget, writes
TensorBoard scalars, returns finite figures, and gives the same figures twice with the same seed.
On a machine with no CUDA GPU the second run passes --no-cuda, so the same comparison shows that the
default --cuda is harmless on the CPU, for every script. A new script is covered by being there:
nothing here names one."""

import ast
import math
from pathlib import Path

import pytest
import tyro
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import (
    ROOT,
    all_finite,
    as_json,
    canonical_params,
    load_script,
    run_train,
    smoke_run,
    twin_scripts,
)

SCRIPTS = twin_scripts()
# Keys of a summary that legitimately differ between two runs with the same seed.
RUN_SPECIFIC = {"sps", "wall_time", "run_dir", "model_path"}


def cuda_available():
    import torch

    return torch.cuda.is_available()


def test_scripts_are_found():
    assert "algos/ppo_torch.py" in SCRIPTS and "algos/ppo_jax.py" in SCRIPTS


def args_help(path):
    """{field: help string} of a script's Args, read from its source (the docstring under each field)."""
    tree = ast.parse(Path(path).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Args")
    helps = {}
    for field, doc in zip(cls.body, cls.body[1:]):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
        ):
            helps[field.target.id] = doc.value.value
    return helps


def test_anatomy_basics():
    """Every script, canonical edition or not: Args, train, SMOKE_ARGS, and tyro's defaults."""
    for script in SCRIPTS:
        m = load_script(script)
        assert hasattr(m, "Args") and callable(m.train) and isinstance(m.SMOKE_ARGS, dict), script
        assert tyro.cli(m.Args, args=[]) == m.Args(), script


@pytest.mark.parametrize("script", canonical_params(SCRIPTS))
def test_anatomy(script):
    m = load_script(script)
    assert hasattr(m, "Args") and callable(m.train), "an Args dataclass and train(args) -> dict"
    assert isinstance(m.SMOKE_ARGS, dict), "SMOKE_ARGS: the tiny budget this test runs"
    doc = m.__doc__ or ""
    twin = (
        script.replace("_torch.py", "_jax.py")
        if script.endswith("_torch.py")
        else script.replace("_jax", "_torch")
    )
    node = ast.parse((ROOT / script).read_text()).body[0]
    assert node.end_lineno - node.lineno + 1 <= 12 and "docs/algorithms/" in doc and twin in doc, (
        "the docstring, at most 12 lines with its quotes, names the algorithm, its twin and its docs page"
    )
    helps = args_help(ROOT / script)
    long = {name: text for name, text in helps.items() if "\n" in text or len(text) > 100}
    assert not long, f"help strings over one line of 100 characters: {long}"
    # tyro builds the defaults from the command line with no arguments
    assert tyro.cli(m.Args, args=[]) == m.Args()


@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_run(script, tmp_path):
    m = load_script(script)
    first = smoke_run(script)  # the session's one SMOKE_ARGS run of this script (helpers.smoke_run)
    assert all_finite(first), f"non-finite figure in {first}"
    for key in ("sps", "wall_time", "run_dir"):
        assert key in first
    assert first["sps"] > 0 and math.isfinite(first["sps"])

    events = EventAccumulator(first["run_dir"])
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "charts/SPS" in tags
    assert any(t.startswith(("losses/", "loss/")) for t in tags), tags  # loss/: TRL's PPOTrainer names
    assert "hyperparameters/text_summary" in events.Tags()["tensors"]
    if m.SMOKE_ARGS.get("save_model"):
        assert "eval/episodic_return" in tags
        assert math.isfinite(first["eval_mean_return"])

    # Seeding: the same seed on the CPU gives the same run, figure for figure. With no CUDA GPU the
    # second run pins the CPU (cuda=False), so the default cuda=True must change nothing either.
    second = run_train(script, tmp_path / "b", seed=1, **{**m.SMOKE_ARGS, "cuda": cuda_available()})
    strip = lambda s: {k: v for k, v in s.items() if k not in RUN_SPECIFIC}
    assert strip(first) == strip(as_json(second))
