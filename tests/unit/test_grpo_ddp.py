"""Data-parallel GRPO: the loss gradient and the update of 2 workers, each holding
half of a fixed batch of groups, equal those of 1 worker on the concatenated batch within 1e-5.

- torch: two gloo processes on localhost (a free port) wrap a tiny random TinyLM in
  DistributedDataParallel, take one backward (the all-reduced, averaged gradient) and then
  grpo_update on their half; this process does the same, no process group, on the whole batch.
  As every rank holds as many completions, the mean of the ranks' per-completion means is the
  1-process mean: the same gradient up to float summation order.
- JAX: a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=2 takes jax.grad of
  grpo_batch_loss and runs grpo_update jitted on the batch sharded over a 2-device Mesh and on one
  device.
- torchrun with 2 processes runs the script end to end from a missing SFT checkpoint (rank 0 trains
  it, rank 1 waits at a barrier) for a tiny budget.
The single-process runs of both scripts are the generic smoke test's (tests/smoke/test_smoke.py).
"""

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import ROOT, load_script, run_gloo_ranks

TORCH, JAX = "llm/grpo_ddp_torch.py", "llm/grpo_ddp_jax.py"
B, T, PROMPT = 16, 12, 6  # 4 groups of 4 completions; each of the 2 workers holds 2 groups
UPDATE = dict(
    update_epochs=2,
    clip_coef=0.2,
    kl_coef=0.04,
    temperature=1.0,
    max_grad_norm=1.0,
    learning_rate=3e-4,
    warmup_steps=1,
)
# The script's learning rate. Adam's first steps move every weight by about the learning rate,
# whatever the size of its gradient: a weight whose gradient is ~1e-8 (float noise) moves by
# +-lr on a sign flip, so the parameter check needs lr well below the tolerance's scale; the
# gradients themselves agree to ~4e-8 (measured).


def fixed_batch(seed=0):
    """Token sequences, a completion mask with some early ends, group advantages of random 0/1
    rewards, and the offsets of the old and reference log-probs from the initial policy's."""
    tasks = load_script("llm/tasks.py")
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, tasks.VOCAB_SIZE, (B, T + 1))
    mask = np.zeros((B, T), dtype=np.float32)
    mask[:, PROMPT - 1 :] = 1.0
    mask[rng.random(B) < 0.4, T - 2 :] = 0.0
    rewards = (rng.random((B // 4, 4)) < 0.5).astype(np.float32)
    centred = rewards - rewards.mean(1, keepdims=True)
    advantages = (centred / (rewards.std(1, keepdims=True) + 1e-4)).reshape(-1).astype(np.float32)
    return {
        "inputs": tokens[:, :-1],
        "labels": tokens[:, 1:],
        "mask": mask,
        "advantages": advantages,
        "old_offset": (0.2 * rng.normal(size=(B, T))).astype(np.float32),
        "ref_offset": (0.2 * rng.normal(size=(B, T))).astype(np.float32),
    }


# ----------------------------------------------------------------------------- torch
TORCH_COMMON = """
import numpy as np, torch
from dataclasses import replace
def torch_run(m, tinylm, data, rows, update):
    # the initial policy: a tiny random TinyLM, the same on every process (seed 0)
    torch.manual_seed(0)
    policy = tinylm.TinyLM(**tinylm.default_config())
    b = {k: torch.as_tensor(v[rows]) for k, v in data.items()}
    with torch.no_grad():
        logp0 = tinylm.token_logps(policy(b["inputs"]), b["labels"])
    batch = dict(inputs=b["inputs"], labels=b["labels"], mask=b["mask"], advantages=b["advantages"],
                 old_logp=logp0 + b["old_offset"], ref_logp=logp0 + b["ref_offset"])
    args = replace(m.Args(), **update)
    ddp = torch.distributed.is_initialized()
    model = torch.nn.parallel.DistributedDataParallel(policy) if ddp else policy
    logp = tinylm.token_logps(model(batch["inputs"]), batch["labels"], args.temperature)
    loss = m.grpo_loss(logp, batch["old_logp"], batch["ref_logp"], batch["advantages"], batch["mask"],
                       args.clip_coef, args.kl_coef)[0]
    loss.backward()  # DDP: the averaged gradient
    grads = {n: p.grad.numpy().copy() for n, p in policy.named_parameters()}
    policy.zero_grad()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate)
    m.grpo_update(model, optimizer, batch, args)
    return grads, {n: p.detach().numpy().copy() for n, p in policy.named_parameters()}
"""

TORCH_WORKER = """
import sys
import torch.distributed as dist
sys.path.insert(0, {tests!r})
from helpers import load_script
m, tinylm = load_script({script!r}), load_script("llm/tinylm_torch.py")
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data = dict(np.load({batch!r}))
half = {B} // world
grads, params = torch_run(m, tinylm, data, slice(rank * half, (rank + 1) * half), {update!r})
grads = {{"grad." + k: v for k, v in grads.items()}}
np.savez({out!r}.format(rank), **grads, **{{"param." + k: v for k, v in params.items()}})
dist.destroy_process_group()
"""


def test_torch_two_gloo_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    np.savez(tmp_path / "batch.npz", **fixed_batch())
    code = TORCH_COMMON + TORCH_WORKER.format(
        tests=str(ROOT / "tests"),
        script=TORCH,
        batch=str(tmp_path / "batch.npz"),
        B=B,
        update=UPDATE,
        out=str(tmp_path / "rank{}.npz"),
    )
    run_gloo_ranks(code)
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]

    namespace = {}
    exec(TORCH_COMMON, namespace)
    m, tinylm = load_script(TORCH), load_script("llm/tinylm_torch.py")
    grads, params = namespace["torch_run"](
        m, tinylm, dict(np.load(tmp_path / "batch.npz")), slice(None), UPDATE
    )
    torch.manual_seed(0)
    start = {n: p.detach().numpy() for n, p in tinylm.TinyLM(**tinylm.default_config()).named_parameters()}
    for name in grads:
        for r in (0, 1):
            np.testing.assert_allclose(ranks[r]["grad." + name], grads[name], atol=1e-5, rtol=0, err_msg=name)
        np.testing.assert_array_equal(ranks[0]["param." + name], ranks[1]["param." + name])  # lockstep
        np.testing.assert_allclose(ranks[0]["param." + name], params[name], atol=1e-5, rtol=0, err_msg=name)
    assert max(np.abs(g).max() for g in grads.values()) > 1e-3  # a gradient worth comparing
    assert max(np.abs(params[n] - start[n]).max() for n in params) > 3e-4  # the update moved (2 x lr)


def test_bad_input_stops_before_work(tmp_path):
    for script in (TORCH, JAX):
        m = load_script(script)
        with pytest.raises(ValueError, match="at least 2 completions"):
            m.train(replace(m.Args(), group_size=1, log_dir=str(tmp_path)))
    assert not any(tmp_path.iterdir())


def test_torchrun_two_processes_end_to_end(tmp_path):
    """2 ranks, 4 prompts x 4 completions per step (2 prompts each), 2 steps, from a missing SFT
    checkpoint: rank 0 trains it while rank 1 waits; rank 0 alone writes the GRPO run directory."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        TORCH,
        "--sft-steps",
        "4",
        "--num-test",
        "16",
        "--total-steps",
        "2",
        "--prompts-per-step",
        "4",
        "--group-size",
        "4",
        "--eval-every",
        "1",
        "--log-dir",
        str(tmp_path),
        "--no-progress",
        "--no-cuda",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dirs = [p for p in tmp_path.iterdir() if "grpo_ddp_torch" in p.name]
    assert len(run_dirs) == 1, list(tmp_path.iterdir())  # only rank 0 logs
    events = EventAccumulator(str(run_dirs[0]))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("reward", "charts/SPS", "losses/grpo_loss", "charts/test_accuracy"):
        assert tag in tags, tags
    assert [e.step for e in events.Scalars("losses/grpo_loss")] == [1, 2]


# ----------------------------------------------------------------------------- JAX
JAX_WORKER = """
import json, sys
from dataclasses import replace
from functools import partial
import jax, numpy as np
assert len(jax.devices()) == 2, jax.devices()
sys.path.insert(0, {tests!r})
from helpers import load_script
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
m, tinylm = load_script({script!r}), load_script("llm/tinylm_jax.py")
data = dict(np.load({batch!r}))
args = replace(m.Args(), **{update!r})
model = tinylm.TinyLM(**tinylm.default_config())
params = model.init(jax.random.PRNGKey(0), np.zeros((1, 1), dtype=np.int32))
logp0 = np.asarray(tinylm.token_logps(model.apply(params, data["inputs"]), data["labels"]))
batch = dict(inputs=data["inputs"].astype(np.int32), labels=data["labels"].astype(np.int32),
             mask=data["mask"], advantages=data["advantages"],
             old_logp=logp0 + data["old_offset"], ref_logp=logp0 + data["ref_offset"])
optimizer = m.make_optimizer(args)
grad_fn = jax.jit(jax.grad(lambda p, b: m.grpo_batch_loss(model, args, p, b)[0]))
update = jax.jit(partial(m.grpo_update, model, optimizer, args))
mesh = Mesh(np.array(jax.devices()), ("batch",))
out = {{}}
for name, (batch_sharding, param_sharding) in {{
        "sharded": (NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())),
        "one_device": (jax.devices()[0], jax.devices()[0])}}.items():
    p = jax.device_put(params, param_sharding)
    b = jax.device_put(batch, batch_sharding)
    out[name + "_grads"] = [np.asarray(x).tolist() for x in jax.tree.leaves(grad_fn(p, b))]
    new, _, _ = update(p, optimizer.init(p), b)
    out[name + "_params"] = [np.asarray(x).tolist() for x in jax.tree.leaves(new)]
    out[name + "_devices"] = [len(x.sharding.device_set) for x in jax.tree.leaves(b)]
out["start"] = [np.asarray(x).tolist() for x in jax.tree.leaves(params)]
print(json.dumps(out))
"""


def test_jax_sharded_over_two_devices_equals_one_device(tmp_path):
    np.savez(tmp_path / "batch.npz", **fixed_batch())
    code = JAX_WORKER.format(
        tests=str(ROOT / "tests"), script=JAX, batch=str(tmp_path / "batch.npz"), update=UPDATE
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(out["sharded_devices"]) == {2} and set(out["one_device_devices"]) == {1}
    for kind in ("grads", "params"):
        for sharded, single in zip(out[f"sharded_{kind}"], out[f"one_device_{kind}"]):
            np.testing.assert_allclose(np.array(sharded), np.array(single), atol=1e-5, rtol=0, err_msg=kind)
    assert max(np.abs(np.array(g)).max() for g in out["one_device_grads"]) > 1e-3
    assert (
        max(np.abs(np.array(a) - np.array(b)).max() for a, b in zip(out["one_device_params"], out["start"]))
        > 3e-4
    )
