"""Data-parallel PPO: the 2-worker update equals the 1-worker update on the
concatenated batch within 1e-5, in both twins.

- torch: two gloo processes on localhost (a free port), each holding half of a fixed batch, run
  ppo_update through DistributedDataParallel; this process runs the same ppo_update, no process
  group, on the whole batch with the same global minibatches (draw_minibatches with num_shards=2).
  Advantage normalisation is global (all-reduced), so the two are the same computation up to float
  summation order.
- JAX: a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=2 (read when jax is
  imported, so never in this process) runs ppo_update jitted on the batch sharded over a 2-device
  Mesh and on the same batch on one device.
- torchrun with 2 processes runs the script end to end for a tiny budget (a few tens of seconds on
  the loaded 2-core machine), and only rank 0 writes a run directory.
The single-process runs of both scripts are the generic smoke test's (tests/smoke/test_smoke.py).
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import ROOT, load_script, run_gloo_ranks

TORCH, JAX = "algos/ppo_ddp_torch.py", "algos/ppo_ddp_jax.py"
N, OBS_DIM, NUM_ACTIONS = 256, 4, 2  # the whole batch; each of the 2 workers holds 128
UPDATE = dict(
    num_minibatches=4,
    update_epochs=2,
    norm_adv=True,
    clip_coef=0.2,
    clip_vloss=True,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    learning_rate=1e-3,
)


def fixed_batch(n=N, seed=0):
    """A batch that looks like a rollout's: advantages far from zero mean, so that the normalisation
    matters, log-probs of a 2-action policy, values and returns of CartPole's scale."""
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, dtype=np.float32)
    return {
        "obs": f32(rng.normal(size=(n, OBS_DIM))),
        "actions": rng.integers(0, NUM_ACTIONS, n),
        "logps": f32(np.log(rng.uniform(0.3, 0.7, n))),
        "advantages": f32(2.0 * rng.normal(size=n) + 0.7),
        "returns": f32(rng.normal(10.0, 3.0, n)),
        "values": f32(rng.normal(10.0, 3.0, n)),
    }


# ----------------------------------------------------------------------------- torch
TORCH_WORKER = """
import sys
from dataclasses import replace
import numpy as np, torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
from helpers import load_script
m = load_script({script!r})
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data = np.load({batch!r})
half = len(data["obs"]) // world
batch = {{k: torch.as_tensor(data[k][rank * half:(rank + 1) * half]) for k in data.files}}
args = replace(m.Args(), **{update!r})
torch.manual_seed(0)  # (DDP broadcasts rank 0's parameters anyway)
agent = m.Agent({obs_dim}, {num_actions})
model = torch.nn.parallel.DistributedDataParallel(agent)
optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
minibatches = m.draw_minibatches(
    torch.Generator().manual_seed(7), half, args.num_minibatches, args.update_epochs
)
m.ppo_update(model, optimizer, batch, minibatches, args)
np.savez({out!r}.format(rank), **{{k: v.detach().numpy() for k, v in agent.state_dict().items()}})
dist.destroy_process_group()
"""


def torch_one_process(m, batch, args, num_shards):
    torch.manual_seed(0)
    agent = m.Agent(OBS_DIM, NUM_ACTIONS)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    minibatches = m.draw_minibatches(
        torch.Generator().manual_seed(7),
        len(batch["obs"]),
        args.num_minibatches,
        args.update_epochs,
        num_shards=num_shards,
    )
    m.ppo_update(agent, optimizer, {k: torch.as_tensor(v) for k, v in batch.items()}, minibatches, args)
    return {k: v.detach().numpy() for k, v in agent.state_dict().items()}


def test_torch_two_gloo_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    m = load_script(TORCH)
    batch = fixed_batch()
    np.savez(tmp_path / "batch.npz", **batch)
    code = TORCH_WORKER.format(
        tests=str(ROOT / "tests"),
        script=TORCH,
        batch=str(tmp_path / "batch.npz"),
        update=UPDATE,
        obs_dim=OBS_DIM,
        num_actions=NUM_ACTIONS,
        out=str(tmp_path / "rank{}.npz"),
    )
    run_gloo_ranks(code)
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    args = replace(m.Args(), **UPDATE)
    one = torch_one_process(m, batch, args, num_shards=2)
    torch.manual_seed(0)
    start = {k: v.numpy() for k, v in m.Agent(OBS_DIM, NUM_ACTIONS).state_dict().items()}
    for name in one:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name])  # the ranks stay in lockstep
        np.testing.assert_allclose(ranks[0][name], one[name], atol=1e-5, rtol=0, err_msg=name)
    # the update moved the parameters far more than the tolerance: the equality is not vacuous
    assert max(np.abs(one[k] - start[k]).max() for k in one) > 1e-3


def test_torch_draw_minibatches_takes_the_same_positions_of_every_shard():
    m = load_script(TORCH)
    per_rank = m.draw_minibatches(torch.Generator().manual_seed(3), 8, 2, 2)
    joined = m.draw_minibatches(torch.Generator().manual_seed(3), 16, 2, 2, num_shards=2)
    assert len(per_rank) == len(joined) == 4  # epochs x minibatches
    for mb, mb2 in zip(per_rank, joined):
        assert mb.tolist() + (mb + 8).tolist() == mb2.tolist()
    for epoch in (0, 1):  # each epoch's minibatches cover the shard once
        assert sorted(torch.cat(per_rank[2 * epoch : 2 * epoch + 2]).tolist()) == list(range(8))


def test_torch_normalize_advantages_without_a_process_group_is_the_minibatch_normalisation():
    m = load_script(TORCH)
    adv = torch.tensor([1.0, 2.0, 3.0, 6.0])  # mean 3, unbiased std sqrt(14 / 3)
    np.testing.assert_allclose(
        m.normalize_advantages(adv).numpy(),
        (np.array([1, 2, 3, 6]) - 3.0) / (np.sqrt(14 / 3) + 1e-8),
        atol=1e-6,
    )


@pytest.mark.parametrize("script", [TORCH, JAX])
def test_bad_input_stops_before_work(script, tmp_path):
    m = load_script(script)
    with pytest.raises(ValueError, match="--num-minibatches must be a divisor"):
        m.train(replace(m.Args(), num_envs=3, num_steps=5, num_minibatches=4, log_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="Discrete actions"):
        m.train(replace(m.Args(), env_id="Pendulum-v1", log_dir=str(tmp_path)))
    assert not any(tmp_path.iterdir())


def test_torchrun_two_processes_end_to_end(tmp_path):
    """2 ranks x 2 envs x 128 steps, 4 rollouts: rank 0 alone writes the run directory, with the
    gathered episodes of both ranks, the losses and the evaluation of the saved model."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        TORCH,
        "--total-timesteps",
        "2048",
        "--num-envs",
        "2",
        "--save-model",
        "--eval-episodes",
        "2",
        "--log-dir",
        str(tmp_path),
        "--no-progress",
        "--no-cuda",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and "terminate called without an active exception" in out.stderr:
        # Seen once, under a load of ~6 on 2 cores: a rank aborted in the teardown after the run
        # (exit -6 from a C++ thread destructor, no Python traceback), not in the training. Not yet
        # understood (docs/algorithms/ppo_ddp.md says so); one fresh attempt, the failure stands if
        # it repeats.
        shutil.rmtree(tmp_path)
        tmp_path.mkdir()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dirs = list(tmp_path.iterdir())
    assert len(run_dirs) == 1, run_dirs  # only rank 0 logs
    events = EventAccumulator(str(run_dirs[0]))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("charts/episodic_return", "charts/SPS", "losses/policy_loss", "eval/episodic_return"):
        assert tag in tags, tags
    assert (run_dirs[0] / "model.pt").exists()
    steps = [e.step for e in events.Scalars("charts/SPS")]
    assert steps == [512, 1024, 1536, 2048]  # global steps: 2 ranks x 2 envs x 128 per rollout


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
m = load_script({script!r})
data = dict(np.load({batch!r}))
data["actions"] = data["actions"].astype(np.int32)
args = replace(m.Args(), **{update!r})
agent = m.Agent({obs_dim}, {num_actions})
optimizer = m.make_optimizer(args, num_iterations=1)
params = agent.init(jax.random.PRNGKey(0))
update = jax.jit(partial(m.ppo_update, agent, optimizer, args, 2))
mesh = Mesh(np.array(jax.devices()), ("batch",))
out = {{}}
for name, (batch_sharding, param_sharding) in {{
        "sharded": (NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())),
        "one_device": (jax.devices()[0], jax.devices()[0])}}.items():
    p = jax.device_put(params, param_sharding)
    b = jax.device_put(data, batch_sharding)
    new, _, stats, _ = update(p, optimizer.init(p), b, jax.device_put(jax.random.PRNGKey(7), param_sharding))
    leaves = jax.tree.leaves(new)
    out[name] = [np.asarray(x).tolist() for x in leaves]
    out[name + "_devices"] = [len(x.sharding.device_set) for x in jax.tree.leaves(b)]
out["start"] = [np.asarray(x).tolist() for x in jax.tree.leaves(params)]
print(json.dumps(out))
"""


def test_jax_sharded_over_two_devices_equals_one_device(tmp_path):
    batch = fixed_batch()
    np.savez(tmp_path / "batch.npz", **batch)
    code = JAX_WORKER.format(
        tests=str(ROOT / "tests"),
        script=JAX,
        batch=str(tmp_path / "batch.npz"),
        update=UPDATE,
        obs_dim=OBS_DIM,
        num_actions=NUM_ACTIONS,
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(out["sharded_devices"]) == {2} and set(out["one_device_devices"]) == {1}
    moved = 0.0
    for sharded, single, start in zip(out["sharded"], out["one_device"], out["start"]):
        np.testing.assert_allclose(np.array(sharded), np.array(single), atol=1e-5, rtol=0)
        moved = max(moved, np.abs(np.array(single) - np.array(start)).max())
    assert moved > 1e-3


def test_jax_shard_major_puts_each_devices_envs_in_one_block():
    m = load_script(JAX)
    T, D, n = 3, 2, 2  # 3 steps, 2 devices x 2 envs: env columns 0-1 are device 0's, 2-3 device 1's
    x = np.arange(T * D * n).reshape(T, D * n)
    flat = m.shard_major(x, D)
    # device 0's block: its (T, n) rollout flattened as a rank would flatten it (step-major)
    np.testing.assert_array_equal(flat[: T * n], x[:, :n].reshape(-1))
    np.testing.assert_array_equal(flat[T * n :], x[:, n:].reshape(-1))
