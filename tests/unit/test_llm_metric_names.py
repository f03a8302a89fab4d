"""The LLM scripts log TRL's metric names: one TensorBoard tag for one quantity across methods.

Read from each script's source (the literal `add_scalar` tags): no script keeps the old CleanRL-style
names for the quantities TRL names; the GRPO family logs GRPOTrainer's names, the preference methods
DPOTrainer's, PPO-RLHF PPOTrainer's; and the torch and JAX twins of a pair log the same tags.
"""

import pytest

from helpers import literal_tags, twin_scripts

LLM_SCRIPTS = [s for s in twin_scripts() if s.startswith("llm/")]
PAIRS = sorted({s[: -len("_torch.py")] for s in LLM_SCRIPTS if s.endswith("_torch.py")})

# The old names of quantities that TRL names (reward, accuracy, length, KL, entropy, clip, value loss).
OLD_NAMES = {
    "charts/reward",
    "charts/accuracy",
    "charts/completion_length",
    "losses/kl",
    "losses/entropy",
    "losses/clip_ratio",
    "losses/value_loss",
    "losses/approx_kl",
}
GRPO_FAMILY = ("grpo", "grpo_ddp", "dr_grpo", "dapo", "rloo")
GRPO_TAGS = {"reward", "kl", "entropy", "completions/mean_length"}
PREFERENCE = ("dpo", "ipo", "simpo", "orpo", "kto")
PREFERENCE_TAGS = {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"}
PPO_RLHF_TAGS = {
    "objective/scores",
    "objective/kl",
    "objective/rlhf_reward",
    "policy/clipfrac_avg",
    "loss/value_avg",
}


def both_twins(names):
    return [f"llm/{name}_{fw}.py" for name in names for fw in ("torch", "jax")]


def test_the_families_are_scripts():
    for script in both_twins(GRPO_FAMILY + PREFERENCE + ("ppo_rlhf",)):
        assert script in LLM_SCRIPTS, f"{script} is not an llm/ twin script"


@pytest.mark.parametrize("script", LLM_SCRIPTS)
def test_no_old_names(script):
    tags = literal_tags(script)
    assert tags, f"{script}: no literal add_scalar tags found"
    assert not tags & OLD_NAMES, f"{script} logs old names: {sorted(tags & OLD_NAMES)}"


@pytest.mark.parametrize("script", both_twins(GRPO_FAMILY))
def test_grpo_family_names(script):
    tags = literal_tags(script)
    assert GRPO_TAGS <= tags, f"{script} lacks {sorted(GRPO_TAGS - tags)}"
    assert any(t == "clip_ratio" or t.startswith("clip_ratio/") for t in tags), f"{script}: no clip_ratio tag"


@pytest.mark.parametrize("script", both_twins(PREFERENCE))
def test_preference_names(script):
    tags = literal_tags(script)
    assert PREFERENCE_TAGS <= tags, f"{script} lacks {sorted(PREFERENCE_TAGS - tags)}"


@pytest.mark.parametrize("script", both_twins(("ppo_rlhf",)))
def test_ppo_rlhf_names(script):
    tags = literal_tags(script)
    assert PPO_RLHF_TAGS <= tags, f"{script} lacks {sorted(PPO_RLHF_TAGS - tags)}"


@pytest.mark.parametrize("pair", PAIRS)
def test_twins_log_the_same_tags(pair):
    torch_tags, jax_tags = literal_tags(f"{pair}_torch.py"), literal_tags(f"{pair}_jax.py")
    assert torch_tags == jax_tags, (
        f"{pair}: torch only {sorted(torch_tags - jax_tags)}, jax only {sorted(jax_tags - torch_tags)}"
    )
