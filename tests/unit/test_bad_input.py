"""Bad input, fuzzed over every script: each numeric flag at its boundaries and out of range.

For every int field of every script's Args the fuzz tries 0 and -1; for every float field 0.0, -1.0,
1.5 and NaN (a float field that is Optional is fuzzed the same way). Each value, set alone on the
defaults, must either be refused by the script's `check_args` with a one-line ValueError that names
the flag (`--num-envs must be >= 1 (got 0)`), or be valid for a reason written in VALID below. The
command-line form is checked once per script in a subprocess: the same message, prefixed `error: `,
as the only line on stderr, and exit status 2, as tyro reports its own parse errors.

`python tests/unit/test_bad_input.py` prints the counts: values tried, refused, accepted by design.
"""

import dataclasses
import math
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import NOT_YET_CANONICAL, ROOT, canonical_params, load_script, twin_scripts  # noqa: E402

INT_VALUES = (0, -1)
FLOAT_VALUES = (0.0, -1.0, 1.5, math.nan)

# Values that a check accepts on purpose, keyed by field name: {value: reason}. A value listed here is
# valid wherever the field appears. Keys are compared with ==, so NaN can never be listed: every float
# rule must refuse NaN.
POS = "any positive value is well defined"
COEF = "a weight >= 0: 0 switches the term off"
VALID = {
    "seed": {0: "seed 0 is a seed"},
    "gamma": {0.0: "a discount of 0 optimises the immediate reward"},
    "gamma_int": {0.0: "a myopic intrinsic-return head"},
    "gae_lambda": {0.0: "lambda 0: one-step TD advantages"},
    "learning_rate": {1.5: POS},
    "policy_lr": {1.5: POS},
    "q_lr": {1.5: POS},
    "alpha_lr": {1.5: POS},
    "vf_learning_rate": {1.5: POS},
    "icm_learning_rate": {1.5: POS},
    "max_grad_norm": {1.5: "any positive gradient-norm clip"},
    "clip_coef": {1.5: "a wide clip range: the probability ratio is positive, any epsilon > 0 is defined"},
    "clip_high": {1.5: "a wide upper clip (DAPO's clip-higher); only > clip_low is required"},
    "ent_coef": {0.0: COEF, 1.5: COEF},
    "vf_coef": {0.0: COEF, 1.5: COEF},
    "value_loss_coef": {0.0: COEF, 1.5: COEF},
    "ext_coef": {0.0: "novelty only, no extrinsic advantage", 1.5: COEF},
    "bonus_scale": {0.0: "the bonus off: the baseline without exploration bonus", 1.5: COEF},
    "kl_coef": {0.0: "no KL penalty to the reference", 1.5: COEF},
    "cql_alpha": {0.0: "no conservative penalty: offline SAC", 1.5: COEF},
    "alpha": {0.0: "rainbow's PER exponent 0: uniform replay", 1.5: "a BC or penalty weight >= 0"},
    "beta": {0.0: "IQL's inverse temperature 0: uniform weights (BC)", 1.5: "a temperature > 0"},
    "beta_start": {0.0: "no importance-sampling correction at the start"},
    "beta_decay": {0.0: "DAgger's beta 0 after the first iteration: the learner alone"},
    "icm_beta": {0.0: "the inverse-model loss alone"},
    "al_alpha": {0.0: "the plain target: advantage learning off"},
    "end_e": {0.0: "a fully greedy policy after the anneal"},
    "epsilon": {0.0: "greedy behaviour"},
    "planning_steps": {0: "no planning: Dyna-Q becomes Q-learning"},
    "kappa": {0.0: "kappa 0: the quantile loss without the Huber part / no exploration bonus", 1.5: POS},
    "dataset_episodes": {0: "0 keeps every episode of the dataset"},
    "expert_episodes": {0: "0 keeps every expert trajectory"},
    "disc_learning_rate": {0.0: "a frozen discriminator: the control run", 1.5: POS},
    "slip": {0.0: "deterministic moves"},
    "exploration_noise": {0.0: "no action noise: the deterministic policy", 1.5: "a larger noise scale"},
    "real_ratio": {0.0: "every SAC batch from the model's rollouts"},
    "model_lr": {1.5: POS},
    "actor_lr": {1.5: POS},
    "critic_lr": {1.5: POS},
    "grad_clip": {1.5: "any positive gradient-norm clip"},
    "return_lambda": {0.0: "lambda 0: one-step TD targets"},
    "kl_balance": {0.0: "KL balancing's weight 0: only the posterior moves toward the prior"},
    "free_nats": {0.0: "no free nats: the KL is never clipped", 1.5: "a larger free-nats floor"},
    "kl_scale": {0.0: COEF, 1.5: COEF},
    "entropy_coef": {0.0: COEF, 1.5: COEF},
    "rollout_min_epoch": {0: "the schedule starts growing at once"},
    "rollout_max_epoch": {0: "max epoch <= min epoch: a step schedule, the max length from epoch 0"},
    "desirable_weight": {1.5: "KTO's class weight: any value > 0"},
    "undesirable_weight": {1.5: "KTO's class weight: any value > 0"},
    "lam": {0.0: "ORPO's odds-ratio term off: SFT alone", 1.5: COEF},
    "vf_clip_coef": {1.5: "a wide value clip; any epsilon > 0 is defined"},
    "target_kl": {1.5: "any positive KL target of the adaptive controller"},
    "max_per_prompt": {0: "0 keeps every accepted sample of a prompt"},
    "drop_carry": {0.0: "a demonstrator that never drops a carry"},
    "label_noise": {0.0: "noise-free preference labels"},
    "lagrange_threshold": {
        -1.0: "any real threshold tau of the Lagrange form",
        0.0: "any real threshold tau of the Lagrange form",
        1.5: "any real threshold tau of the Lagrange form",
    },
    "max_kl": {1.5: "a larger trust region"},
    "cg_damping": {0.0: "undamped Fisher-vector products", 1.5: POS},
    "max_weight": {1.5: "a lower cap on the advantage weights; only > 0 is required"},
    "min_q_range": {1.5: "a wider floor of the value range"},
    "pb_c_base": {1.5: POS},
    "pb_c_init": {0.0: "PUCT's log term alone", 1.5: POS},
    "dirichlet_alpha": {1.5: "a positive concentration"},
    "dirichlet_fraction": {0.0: "no root noise"},
    "noisy_std": {0.0: "noise-free linear layers", 1.5: "a larger initial noise"},
    "prior_eps": {1.5: "a larger priority floor"},
    "noise_clip": {0.0: "no target-policy smoothing", 1.5: "a wider smoothing clip"},
    "policy_noise": {0.0: "no target-policy smoothing", 1.5: "larger smoothing noise"},
    "return_scale": {0.0: "0 picks the environment's scale (RETURN_SCALE)", 1.5: "any positive scale"},
    "weight_decay": {0.0: "no weight decay", 1.5: "a coefficient >= 0"},
    "temperature": {1.5: "sampling temperature > 0"},
    "tol": {1.5: "a coarser stopping tolerance"},
    "v_min": {
        -1.0: "any support with v_min < v_max",
        0.0: "any support with v_min < v_max",
        1.5: "any support with v_min < v_max",
    },
    "v_max": {
        -1.0: "any support with v_min < v_max",
        0.0: "any support with v_min < v_max",
        1.5: "any support with v_min < v_max",
    },
}

# The same, for one script only: {script stem without _torch/_jax: {field: {value: reason}}}.
VALID_IN = {
    "simpo": {"gamma": {1.5: "SimPO's target reward margin: any value >= 0"}},
    "pets": {
        "logvar_bound_coef": {0.0: "the log-variance bound penalty off", 1.5: COEF},
        "cem_smoothing": {0.0: "no smoothing: CEM refits to the elite statistics alone"},
    },
}


def numeric_fields(args_cls):
    """(name, kind) of each int or float field of an Args dataclass; bool and str fields are skipped,
    and an Optional[int] / Optional[float] field counts as int / float."""
    hints = typing.get_type_hints(args_cls)
    fields = []
    for f in dataclasses.fields(args_cls):
        hint = hints[f.name]
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = inner[0] if len(inner) == 1 else None
        if hint is int:
            fields.append((f.name, int))
        elif hint is float:
            fields.append((f.name, float))
    return fields


def reason_valid(script, field, value):
    """The reason a fuzzed value is valid, or None."""
    stem = Path(script).stem.removesuffix("_torch").removesuffix("_jax")
    for table in (VALID_IN.get(stem, {}), VALID):
        if value in table.get(field, {}):
            return table[field][value]
    return None


def flag(field):
    return "--" + field.replace("_", "-")


def fuzz(script):
    """Try every fuzzed value of every numeric field on the script's check_args.

    Returns (refused, accepted): refused is a list of (field, value, message), accepted of
    (field, value)."""
    module = load_script(script)
    defaults = module.Args()
    refused, accepted = [], []
    for field, kind in numeric_fields(module.Args):
        for value in INT_VALUES if kind is int else FLOAT_VALUES:
            args = dataclasses.replace(defaults, **{field: value})
            try:
                module.check_args(args)
            except ValueError as err:
                refused.append((field, value, str(err)))
            else:
                accepted.append((field, value))
    return refused, accepted


SCRIPTS = twin_scripts()


@pytest.fixture(scope="module")
def fuzzed():
    """The fuzz of each script, computed once for the function-level and command-line tests."""
    cache = {}

    def get(script):
        if script not in cache:
            cache[script] = fuzz(script)
        return cache[script]

    return get


def test_the_defaults_pass_their_own_checks():
    """The fuzz starts from the defaults, so they must be valid themselves."""
    for script in SCRIPTS:
        module = load_script(script)
        module.check_args(module.Args())  # old or new form: the defaults must pass either


@pytest.mark.parametrize("script", canonical_params(SCRIPTS))
def test_every_bad_value_is_refused_naming_its_flag(script, fuzzed):
    refused, accepted = fuzzed(script)
    assert refused, f"{script}: no fuzzed value was refused"
    unnamed = [(f, v, m) for f, v, m in refused if not m.startswith(flag(f)) or "\n" in m]
    assert not unnamed, f"{script}: refusals that do not start with the fuzzed flag on one line: {unnamed}"
    unexplained = [(f, v) for f, v in accepted if reason_valid(script, f, v) is None]
    assert not unexplained, f"{script}: accepted without a reason in VALID / VALID_IN: {unexplained}"


def test_every_reason_is_used(fuzzed):
    """A reason that no script's check needs is stale: the check it excused has changed."""
    used = set()
    for script in SCRIPTS:
        if script in NOT_YET_CANONICAL:
            continue
        stem = Path(script).stem.removesuffix("_torch").removesuffix("_jax")
        for field, value in fuzzed(script)[1]:
            used.add(("*", field, value) if value in VALID.get(field, {}) else (stem, field, value))
    listed = {("*", f, v) for f, values in VALID.items() for v in values}
    listed |= {(s, f, v) for s, fields in VALID_IN.items() for f, values in fields.items() for v in values}
    assert listed <= used, f"stale reasons: {sorted(listed - used, key=str)}"


@pytest.mark.parametrize("script", canonical_params(SCRIPTS))
def test_the_command_line_prints_one_line_and_exits_2(script, fuzzed):
    """One bad flag on the command line: `error: <message>` alone on stderr, status 2, no traceback,
    before any environment step (the subprocess has seconds, not a training run's minutes)."""
    refused, _ = fuzzed(script)
    field, value, message = refused[0]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, script, f"{flag(field)}={value}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f"error: {message}"], proc.stderr[-2000:]


def counts():
    """(tried, refused, accepted by design) over every script."""
    tried = refused = accepted = 0
    for script in [s for s in SCRIPTS if s not in NOT_YET_CANONICAL]:
        r, a = fuzz(script)
        tried += len(r) + len(a)
        refused += len(r)
        accepted += len(a)
    return tried, refused, accepted


def count_line():
    tried, refused, accepted = counts()
    n = len([s for s in SCRIPTS if s not in NOT_YET_CANONICAL])
    return f"{n} scripts: {tried} bad values tried, {refused} refused, {accepted} accepted by design"


def test_contributing_states_the_current_counts():
    """docs/contributing.md quotes the fuzz's counts; they must be today's."""
    page = (ROOT / "docs" / "contributing.md").read_text()
    assert count_line() in " ".join(page.split()), f"docs/contributing.md: quote `{count_line()}`"


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    print(count_line())
