"""Helpers for the test tiers: load a script as a module, list the twin scripts, run train()."""

import importlib.util
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
# Modules under llm/ (and algos/) that are substrate, not algorithms: no Args/train of their own.
SUBSTRATE = {"tasks", "tinylm_torch", "tinylm_jax", "offline_data", "mazes"}
_cache = {}


def load_script(relpath):
    """Import a script by repo-relative path (e.g. "algos/ppo_torch.py") without running main.
    Its folder goes on sys.path, as when it is run as `python algos/ppo_torch.py`."""
    path = (ROOT / relpath).resolve()
    if path not in _cache:
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = f"_script_{path.parent.name}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _cache[path] = module
    return _cache[path]


# Scripts not yet brought to the canonical edition (a docstring of at most 12 lines, one-line help
# strings, a range rule for every numeric flag): their anatomy and bad-input tests must fail until they
# are (strict xfail), and then their name comes off this list.
NOT_YET_CANONICAL = set()


def canonical_params(scripts):
    """pytest params of `scripts`, each one in NOT_YET_CANONICAL marked as a strict expected failure."""
    import pytest

    reason = "not yet brought to the canonical edition (tests/helpers.py NOT_YET_CANONICAL)"
    return [
        pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=reason)) if s in NOT_YET_CANONICAL else s
        for s in scripts
    ]


def twin_scripts():
    """Every algorithm script: algos/*_{torch,jax}.py and llm/*_{torch,jax}.py, substrate excluded."""
    scripts = []
    for folder in ("algos", "llm"):
        for path in sorted((ROOT / folder).glob("*.py")):
            if path.stem in SUBSTRATE or not path.stem.endswith(("_torch", "_jax")):
                continue
            scripts.append(f"{folder}/{path.name}")
    return scripts


# The value-based family: the pairs that share the replay/target-network/annealed-lr skeleton.
VALUE_BASED = ("dqn", "double_dqn", "dueling_dqn", "per_dqn", "c51", "qr_dqn", "rainbow")


def value_based_scripts():
    """Both twins of every value-based pair, e.g. "algos/dqn_torch.py"."""
    return [f"algos/{name}_{fw}.py" for name in VALUE_BASED for fw in ("torch", "jax")]


def run_train(relpath, log_dir, **overrides):
    """train(Args(**overrides)) quietly, logging under log_dir; returns the summary dict."""
    module = load_script(relpath)
    args = replace(module.Args(), log_dir=str(log_dir), progress=False, **overrides)
    return module.train(args)


def _plain(value):
    """JSON's view of a summary value: numpy scalars and arrays as Python numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def as_json(summary):
    """A summary as JSON gives it back (tuples become lists), to compare a cached run with a fresh one."""

    return json.loads(json.dumps(summary, default=_plain))


def smoke_run(script):
    """The summary of a script's SMOKE_ARGS run with seed 1, trained once per test session and shared by
    every test and xdist worker that asks: the run is cached as JSON under $SMOKE_RUN_CACHE (set by
    tests/conftest.py), one lock per script, and its run folder stays there until the session ends."""

    module = load_script(script)
    cache = os.environ.get("SMOKE_RUN_CACHE")
    if cache is None:  # outside pytest: just run it
        return as_json(run_train(script, tempfile.mkdtemp(), seed=1, **module.SMOKE_ARGS))
    stem = Path(script).stem
    path = Path(cache) / f"{stem}.json"
    with FileLock(str(Path(cache) / f"{stem}.lock")):
        if not path.exists():
            summary = run_train(script, Path(cache) / stem, seed=1, **module.SMOKE_ARGS)
            path.write_text(json.dumps(summary, default=_plain))
    return json.loads(path.read_text())


def finite_numbers(value):
    """All numbers nested in a summary (dicts, lists, tuples), for finiteness checks."""
    if isinstance(value, dict):
        for v in value.values():
            yield from finite_numbers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from finite_numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def all_finite(summary):
    return all(math.isfinite(x) for x in finite_numbers(summary))


def is_torch(script):
    """True for the PyTorch twin of a pair ("..._torch.py"), False for the JAX twin."""
    return script.endswith("torch.py")


def conv(script, dtype=np.float32):
    """A converter from array-likes to the script's framework: a torch tensor or a jax array."""
    if is_torch(script):
        import torch

        return lambda x: torch.as_tensor(np.asarray(x, dtype=dtype))
    import jax.numpy as jnp

    return lambda x: jnp.asarray(np.asarray(x, dtype=dtype))


def gae_on_column(script, rewards, values, dones, last_value, gamma, lam):
    """Call a twin's compute_gae on one environment's (T,) lists, as (T, 1) arrays of its
    framework; return numpy (advantages, returns) of shape (T,)."""
    m = load_script(script)
    to = conv(script)
    col = lambda x: to(np.asarray(x, dtype=np.float32)[:, None])
    adv, ret = m.compute_gae(col(rewards), col(values), col(dones), to([last_value]), gamma, lam)
    return np.asarray(adv)[:, 0], np.asarray(ret)[:, 0]


def torch_dense(layer):
    """One torch Linear layer as a flax Dense's params (kernel = weight transposed)."""
    import jax.numpy as jnp

    return {
        "kernel": jnp.asarray(layer.weight.detach().numpy().T),
        "bias": jnp.asarray(layer.bias.detach().numpy()),
    }


def torch_to_flax_params(t_net):
    """A torch network's Linear and LayerNorm layers, in module order, as the flax pytree of a
    compact module that creates them in the same order: Dense_0, Dense_1, ... and LayerNorm_0, ...
    (kernel = weight transposed; LayerNorm scale = weight)."""
    import jax.numpy as jnp
    import torch

    params, dense, norm = {}, 0, 0
    for layer in t_net.modules():
        if isinstance(layer, torch.nn.Linear):
            params[f"Dense_{dense}"] = torch_dense(layer)
            dense += 1
        elif isinstance(layer, torch.nn.LayerNorm):
            params[f"LayerNorm_{norm}"] = {
                "scale": jnp.asarray(layer.weight.detach().numpy()),
                "bias": jnp.asarray(layer.bias.detach().numpy()),
            }
            norm += 1
    return {"params": params}


def tiny_policy_and_reference(tmp_path):
    """The tiny-LM twins' modules, and two torch-initialised checkpoints in tmp_path: policy.npz (seed 0)
    and ref.npz (seed 1), for the LLM parity tests that run both twins on the same weights."""
    import torch

    lm_t, lm_j = load_script("llm/tinylm_torch.py"), load_script("llm/tinylm_jax.py")
    vocab = load_script("llm/tasks.py").VOCAB_SIZE
    for seed, name in ((0, "policy.npz"), (1, "ref.npz")):
        torch.manual_seed(seed)
        lm_t.save_checkpoint(lm_t.TinyLM(vocab, 16, 128, 2, 4), tmp_path / name)
    return lm_t, lm_j


def prompt_completion_tokens(pairs, completions, digits=2):
    """(inputs, labels, loss mask over the completion tokens, completion mask) of prompts + completions,
    the next-token layout the LLM scripts train on."""
    tasks = load_script("llm/tasks.py")
    comp_mask = tasks.completion_mask(completions)
    prompts = tasks.encode_prompts(pairs, digits)
    full = np.concatenate([prompts, completions], axis=1)
    prompt_mask = np.zeros((len(full), prompts.shape[1] - 1), dtype=np.float32)
    return full[:, :-1], full[:, 1:], np.concatenate([prompt_mask, comp_mask], axis=1), comp_mask


def run_gloo_ranks(code, world_size=2, timeout=180):
    """Run `code` (a python -c program) as `world_size` torch.distributed ranks on this machine, with
    the environment torchrun would give them (RANK, LOCAL_RANK, WORLD_SIZE, a free loopback port), and
    assert that every rank exits 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world_size):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out


def literal_tags(script):
    """The literal TensorBoard tags a script writes, read from its source (f-string tags are not)."""

    return set(re.findall(r"add_scalar\(\s*\"([^\"{}]+)\"", (ROOT / script).read_text()))


def pairs_defining(pattern):
    """(torch, JAX) script paths of every pair whose torch twin's source matches `pattern` (a regex,
    multiline), for the parity tests of functions that several pairs define with one signature."""

    return [
        (script, script.replace("_torch.py", "_jax.py"))
        for script in twin_scripts()
        if script.endswith("_torch.py") and re.search(pattern, (ROOT / script).read_text(), re.M)
    ]


def pair_id(pair):
    """The pair's name for a test id: ("algos/ppo_torch.py", ...) -> "ppo"."""
    return Path(pair[0]).stem.removesuffix("_torch")
