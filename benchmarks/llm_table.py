"""The LLM comparison table (docs/algorithms/llm.md): every llm/ method on the same task, from the same
SFT checkpoints, over the same seeds, at its default budget.

For each method and twin, one sweep of `tests/evaluation.py` (seeds 1-3 by default) is stored as JSON in
--dir; the table reads those files: the held-out greedy accuracy gain over the SFT start as IQM with its
95% stratified-bootstrap CI, the per-seed gains, the median KL to the SFT policy (`kl_to_ref`, nats per
completion, Monte Carlo on the test prompts) and the median wall time of the method's own run (the SFT,
shared by every method, is not counted). With --run, missing sweeps are run first, one process at a
time (the SFT checkpoints of each seed are trained once in --dir/<seed>/ and reused by every method).

    python -m benchmarks.llm_table --run            # run what is missing, print the table, write the CSV
    python -m benchmarks.llm_table                  # the table from the stored sweeps only
"""

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from evaluation import read_sweep, run_sweep_process, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (method, family) in the order of the table: offline preference methods, then online RL.
METHODS = [
    ("dpo", "preference pairs"),
    ("ipo", "preference pairs"),
    ("kto", "unpaired labels"),
    ("simpo", "preference pairs, no reference"),
    ("orpo", "preference pairs, no reference"),
    ("rejection_sampling", "verifier-filtered SFT"),
    ("grpo", "online, verifier"),
    ("dr_grpo", "online, verifier"),
    ("dapo", "online, verifier"),
    ("rloo", "online, verifier"),
    ("ppo_rlhf", "online, learned reward model"),
    ("prm", "best-of-n with a process reward model"),
]


def sweep_path(folder, method, framework):
    return Path(folder) / f"{method}_{framework}.json"


def run_sweep(folder, method, framework, seeds):
    run_sweep_process(
        f"llm/{method}_{framework}.py",
        seeds,
        sweep_path(folder, method, framework),
        folder,
        metric="accuracy_gain",
    )


def load(folder, method, framework):
    sweep = read_sweep(sweep_path(folder, method, framework))
    if sweep is None:
        return None
    return {
        "gains": sweep["scores"],
        "kl": np.array([x.get("kl_to_ref", np.nan) for x in sweep["scalars"]]),
        "wall": sweep["wall"],
        "seeds": sweep["seeds"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", default="runs/llm_sweep", help="where the sweeps (JSON) and SFT checkpoints live"
    )
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--run", action="store_true", help="run the missing sweeps first")
    parser.add_argument("--csv", default="docs/assets/curves/llm_comparison.csv")
    opts = parser.parse_args()
    folder = ROOT / opts.dir
    rows = []
    for method, family in METHODS:
        if not (ROOT / "llm" / f"{method}_torch.py").exists():
            continue
        cells = {}
        for fw in ("torch", "jax"):
            if opts.run and load(folder, method, fw) is None:
                run_sweep(folder, method, fw, opts.seeds)
            cells[fw] = load(folder, method, fw)
        rows.append((method, family, cells))

    print(
        "| method | data | gain, torch: IQM [95% CI] (seeds) | gain, JAX: IQM [95% CI] (seeds) "
        "| KL to SFT, nats (torch / JAX) | wall s (torch / JAX) |"
    )
    print("|---|---|---|---|---|---|")
    out = []
    for method, family, cells in rows:
        text = []
        for fw in ("torch", "jax"):
            c = cells[fw]
            if c is None:
                text.append("not measured")
                continue
            iqm = summarize(c["gains"])["iqm"]
            per_seed = " / ".join(f"{g:+.3f}" for g in c["gains"])
            text.append(f"{iqm[0]:+.3f} [{iqm[1]:+.3f}, {iqm[2]:+.3f}] ({per_seed})")
            out.append(
                {
                    "method": method,
                    "framework": fw,
                    "seeds": " ".join(c["seeds"]),
                    "gain_iqm": iqm[0],
                    "gain_ci_low": iqm[1],
                    "gain_ci_high": iqm[2],
                    "gains": " ".join(f"{g:.4f}" for g in c["gains"]),
                    "kl_to_ref_median": float(np.median(c["kl"])),
                    "wall_time_median_s": float(np.median(c["wall"])),
                }
            )
        kl = " / ".join(
            "-" if cells[f] is None else f"{np.median(cells[f]['kl']):.2f}" for f in ("torch", "jax")
        )
        wall = " / ".join(
            "-" if cells[f] is None else f"{np.median(cells[f]['wall']):.0f}" for f in ("torch", "jax")
        )
        print(f"| {method} | {family} | {text[0]} | {text[1]} | {kl} | {wall} |")
    if out:
        path = ROOT / opts.csv
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(out[0]))
            writer.writeheader()
            writer.writerows(out)
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
