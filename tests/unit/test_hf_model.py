"""`--model PATH` of the llm/ torch scripts (llm/hf_model.py): a tiny random GPT-2 saved in a temp folder
is fine-tuned by SFT, DPO, GRPO and data-parallel GRPO (in one process, and under torchrun with 2 gloo
processes) for a few steps; a missing folder and the JAX twins refuse cleanly.
Skipped when transformers is not installed (it is an optional requirement)."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from helpers import ROOT, load_script

transformers = pytest.importorskip(
    "transformers", reason="--model needs transformers (pip install transformers==5.25.0)"
)

TOKENIZER_WORDS = ["<unk>", "a", "b", "<eos>"] + list("0123456789+=") + ["x"]


def make_gpt2(folder, tokenizer=True):
    """A 2-layer GPT-2 (width 32, 64 tokens, 32 positions) with random weights, saved with
    save_pretrained; with a character-level tokenizer built offline (WordLevel) when tokenizer."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32, bos_token_id=3, eos_token_id=3
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    if tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(TOKENIZER_WORDS)}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
        transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>"
        ).save_pretrained(folder)
    return str(folder)


def weights(folder):
    return {
        k: v.clone()
        for k, v in transformers.AutoModelForCausalLM.from_pretrained(folder).state_dict().items()
    }


def changed(before, after):
    return any(not torch.equal(before[k], after[k]) for k in before)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return make_gpt2(tmp_path_factory.mktemp("gpt2"))


def test_token_map_with_and_without_tokenizer(gpt2, tmp_path):
    hf_model = load_script("llm/hf_model.py")
    tasks = load_script("llm/tasks.py")
    model = hf_model.load(gpt2)
    # <pad>: the tokenizer has none, so the smallest id no other symbol uses (0, "<unk>"); <eos>: its eos (3);
    # "0".."9", "+", "=": their own tokens (4..15)
    assert model.token_ids.tolist() == [0, 3] + list(range(4, 16))
    assert model.config == {"vocab_size": tasks.VOCAB_SIZE, "block_size": 32, "d_model": 32}
    assert not model.training  # dropout off
    tokens = torch.as_tensor(tasks.encode_prompts(np.array([[12, 34]]), 2))
    full = model.hf(input_ids=model.token_ids[tokens]).logits
    assert torch.allclose(model(tokens), full[..., model.token_ids])  # the model's logits at the task's ids
    assert model.features(tokens).shape == (1, 6, 32)
    bare = hf_model.load(make_gpt2(tmp_path / "bare", tokenizer=False))
    assert bare.token_ids.tolist() == list(range(tasks.VOCAB_SIZE))  # no tokenizer: ids 0..V-1


@pytest.mark.parametrize("name", ["sft", "dpo", "grpo", "grpo_ddp"])
def test_scripts_fine_tune_a_gpt2(name, gpt2, tmp_path, monkeypatch):
    m = load_script(f"llm/{name}_torch.py")
    common = dict(model=gpt2, num_test=8, log_dir=str(tmp_path), progress=False, cuda=False)
    budget = {
        "sft": dict(total_steps=3, batch_size=8, eval_every=3, save_path=str(tmp_path / "sft_out")),
        "dpo": dict(
            num_prompts=16, samples_per_prompt=4, epochs=1, batch_size=8, eval_every=2, label_noise=0.0
        ),
        "grpo": dict(total_steps=2, prompts_per_step=4, group_size=4, eval_every=2),
        "grpo_ddp": dict(total_steps=2, prompts_per_step=4, group_size=4, eval_every=2),
    }[name]
    before = weights(gpt2)
    if name == "sft":
        out = m.train(m.Args(**common, **budget))
        assert out["model_path"] == str(tmp_path / "sft_out")
        assert changed(before, weights(out["model_path"]))  # the saved folder holds the fine-tuned weights
        assert np.isfinite(out["losses"]["sft_loss"])
        return
    loaded = []
    load = m.hf_model.load

    def keep(*a, **k):  # the policy the script builds from the folder
        loaded.append(load(*a, **k))
        return loaded[-1]

    monkeypatch.setattr(m.hf_model, "load", keep)
    if name.startswith(
        "grpo"
    ):  # a random model never answers right: every group ties and GRPO has no gradient.
        # Reward odd first tokens instead, so that groups differ.
        monkeypatch.setattr(
            m.tasks,
            "verify",
            lambda pairs, completions, digits: (np.asarray(completions)[:, 0] % 2).astype(np.float32),
        )
    out = m.train(m.Args(**common, **budget))
    assert out.get("world_size", 1) == 1  # grpo_ddp without torchrun: one process, no process group
    assert all(np.isfinite(v) for v in out["losses"].values())
    assert np.isfinite(out["kl_to_ref"])
    assert len(loaded) == 1 and changed(before, loaded[0].hf.state_dict())  # the policy was trained
    assert not changed(before, weights(gpt2))  # the source folder is never written to


# Run by torchrun in each rank: grpo_ddp_torch.py with the test's odd-first-token reward (as above), then the
# rank's trained GPT-2 weights and summary saved for the test to compare.
TORCHRUN_WORKER = """
import json, sys
import numpy as np, torch, tyro
sys.path.insert(0, {tests!r})
from helpers import load_script
m = load_script("llm/grpo_ddp_torch.py")
loaded, load = [], m.hf_model.load
m.hf_model.load = lambda *a, **k: loaded.append(load(*a, **k)) or loaded[-1]
m.tasks.verify = lambda pairs, completions, digits: (np.asarray(completions)[:, 0] % 2).astype(np.float32)
out = m.train(tyro.cli(m.Args))
torch.save(loaded[0].hf.state_dict(), {out_dir!r} + f"/rank{{out['rank']}}.pt")
with open({out_dir!r} + f"/rank{{out['rank']}}.json", "w") as f:
    json.dump({{"losses": out["losses"], "world_size": out["world_size"]}}, f)
"""


def test_grpo_ddp_torchrun_two_processes_fine_tune_a_gpt2(gpt2, tmp_path):
    """2 gloo ranks, 4 prompts x 4 completions per step (2 prompts each), 2 steps: each rank loads the
    same folder, DDP keeps them in lockstep, and the policy moves; only rank 0 writes a run directory."""
    (tmp_path / "out").mkdir()
    worker = tmp_path / "worker.py"
    worker.write_text(TORCHRUN_WORKER.format(tests=str(ROOT / "tests"), out_dir=str(tmp_path / "out")))
    runs = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(worker),
        "--model",
        gpt2,
        "--num-test",
        "8",
        "--total-steps",
        "2",
        "--prompts-per-step",
        "4",
        "--group-size",
        "4",
        "--eval-every",
        "2",
        "--log-dir",
        str(runs),
        "--no-progress",
        "--no-cuda",
    ]
    before = weights(gpt2)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and "terminate called without an active exception" in out.stderr:
        # The teardown abort of tests/unit/test_ppo_ddp.py (a rank exits -6 after the run, no Python
        # traceback; not yet understood): one fresh attempt, the failure stands if it repeats.
        shutil.rmtree(runs, ignore_errors=True)
        for f in (tmp_path / "out").iterdir():
            f.unlink()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list(runs.iterdir())) == 1  # only rank 0 logs
    ranks = [torch.load(tmp_path / "out" / f"rank{r}.pt") for r in (0, 1)]
    assert all(torch.equal(ranks[0][k], ranks[1][k]) for k in ranks[0])  # the same Adam step on every rank
    assert changed(before, ranks[0])  # the policy was trained
    summary = json.loads((tmp_path / "out" / "rank0.json").read_text())
    assert summary["world_size"] == 2 and all(np.isfinite(v) for v in summary["losses"].values())
    assert not changed(before, weights(gpt2))  # the source folder is never written to


def test_reward_model_head_on_a_gpt2(gpt2, tmp_path):
    m = load_script("llm/reward_model_torch.py")
    out = m.train(
        m.Args(
            model=gpt2,
            num_test=16,
            num_prompts=16,
            epochs=1,
            batch_size=8,
            eval_every=2,
            log_dir=str(tmp_path),
            progress=False,
            cuda=False,
        )
    )
    assert np.isfinite(out["losses"]["bt_loss"])
    rm = m.load_reward_model(out["model_path"])  # a folder: the GPT-2 and value_head.npz
    assert rm.head.weight.shape == (1, 32)  # nn.Linear(hidden size, 1) on the last hidden state
    assert rm.head.weight.abs().sum() > 0  # trained from its zero start


def test_missing_folder_is_a_clear_error(tmp_path):
    for name in ["sft", "dpo", "grpo", "grpo_ddp"]:
        m = load_script(f"llm/{name}_torch.py")
        with pytest.raises(ValueError, match="no such folder"):
            m.train(m.Args(model=str(tmp_path / "nowhere"), log_dir=str(tmp_path / "runs"), progress=False))
    assert not (tmp_path / "runs").exists()  # refused before any run directory


@pytest.mark.parametrize("name", ["sft", "dpo", "grpo", "grpo_ddp", "reward_model", "ppo_rlhf"])
def test_jax_twins_refuse_model(name, gpt2, tmp_path):
    m = load_script(f"llm/{name}_jax.py")
    with pytest.raises(ValueError, match=f"PyTorch twin only \\(llm/{name}_torch.py.*Real models"):
        m.train(m.Args(model=gpt2, log_dir=str(tmp_path), progress=False))
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)
@pytest.mark.parametrize("name", ["sft", "dpo", "grpo", "grpo_ddp", "reward_model"])
def test_gpt2_on_cuda(name, gpt2, tmp_path):
    m = load_script(f"llm/{name}_torch.py")
    out = m.train(
        m.Args(**{**m.SMOKE_ARGS, "model": gpt2, "log_dir": str(tmp_path), "progress": False, "cuda": True})
    )
    assert all(np.isfinite(v) for v in out["losses"].values())
