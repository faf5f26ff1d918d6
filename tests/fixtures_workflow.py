"""Helpers of the tests that run Snakemake (tests/workflow/ and the workflow-marked tests elsewhere): a copy of the
workflow or of the repository in a temp folder, Snakemake run there, and the jobs and runs its output lists."""

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def workflow_copy(tmp_path: Path) -> Path:
    """A copy of the workflow (workflow/: Snakefile and rules; config, profiles) in a temp folder."""
    wd = tmp_path / "wf"
    wd.mkdir()
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / folder, wd / folder)
    return wd


def snakemake(
    wd: Path, *args: str, timeout: int = 600, check: bool = True, profile: bool = False
) -> subprocess.CompletedProcess:
    """Run Snakemake in `wd`; without `profile` the workflow's default profile is switched off."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    profile_args = [] if profile else ["--workflow-profile", "none"]
    proc = subprocess.run(
        SNAKEMAKE + profile_args + list(args), cwd=wd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def assert_nothing_to_be_done(proc: subprocess.CompletedProcess) -> None:
    """A dry run's output says there is nothing to be done; otherwise the error names each job and its reason."""
    out = proc.stdout + proc.stderr
    if "Nothing to be done" in out:
        return
    said = [line.strip() for line in out.splitlines() if line.startswith("rule ") or "reason:" in line]
    raise AssertionError("Snakemake would run jobs:\n" + "\n".join(said or out.splitlines()[-40:]))


def job_counts(output: str) -> dict[str, int]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats:"))
    counts = {}
    for line in lines[start + 3 :]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def trained_runs(counts: dict[str, int], config: dict) -> int:
    """Runs the listed jobs train: one per `train` job, a bundle's runs per `train_bundle_<name>` job."""
    bundles = form_bundles(build_plan(config).runs)
    return counts.get("train", 0) + sum(
        len(bundles[name[len("train_bundle_") :]].run_ids) * n
        for name, n in counts.items()
        if name.startswith("train_bundle_")
    )


def expected_training_runs(config: dict) -> int:
    """Distinct runs of the config (data set, model, algorithm, mu, lam, step, other settings, iterations, seed)."""
    preset = config.get("preset", "full")
    preset_seeds = False
    if preset != "full":
        preset_seeds = "seeds" in config["presets"][preset]
        config = {**config, **config["presets"][preset]}
    scale = config.get("round_scale", 1)
    excluded = set(config.get("exclude_sources", []))
    runs = set()
    skipped = set(config.get("exclude_experiments", []))
    for name, exp in config["experiments"].items():
        if name in skipped:
            continue
        settings = dict(exp.get("set", {}))
        for group in exp["groups"]:
            # a preset's seeds win over the experiment's and the group's
            seeds = config["seeds"] if preset_seeds else group.get("seeds", exp.get("seeds", config["seeds"]))
            # a group's vary: each item every combination of its lists, each a setting beside the group's own runs
            settings_of_group = [{}]
            for item in group.get("vary", []):
                keys = list(item)
                for values in itertools.product(*([v] if not isinstance(v, list) else v for v in item.values())):
                    if dict(zip(keys, values, strict=True)) not in settings_of_group:
                        settings_of_group.append(dict(zip(keys, values, strict=True)))
            for entry, vary in itertools.product(group["runs"], settings_of_group):
                lists = [entry[k] for k in ("mu", "lam", "step") if isinstance(entry.get(k), list)]
                n = len(lists[0]) if lists else 1
                own = {**settings, **entry.get("set", {}), **{k: v for k, v in vary.items() if "." in k}}
                own.pop("evaluation.last", None)  # one run whatever its evaluation schedule (the widest is taken)
                model = entry.get("model", own.pop("model.name", "logreg"))
                upcycled = entry["algorithm"].startswith("upcycled")
                for i in range(n):
                    pick = {
                        k: (entry[k][i] if isinstance(entry.get(k), list) else entry.get(k))
                        for k in ("mu", "lam", "step")
                    }
                    pick["mu"] = vary.get("mu", pick["mu"])
                    for key, other in (("lam", "step"), ("step", "lam")):
                        if key in vary and upcycled:
                            pick.update({key: vary[key], other: None})
                    # protocol: authors runs the authors' loss, and upcycled runs with the scalar step 0.7 unless
                    # they name a step
                    authors = group.get("protocol", exp.get("protocol", "paper")) == "authors"
                    if authors and upcycled:
                        pick.update(lam=None, step=pick["step"] if pick["step"] is not None else 0.7)
                    rounds = max(1, round(entry["rounds"] * vary.get("round_scale", 1)))
                    for ds in group["datasets"]:
                        if config["datasets"][ds]["source"] in excluded:
                            continue
                        for seed in seeds:
                            runs.add(
                                (
                                    ds,
                                    model,
                                    authors,
                                    entry["algorithm"],
                                    pick["mu"],
                                    pick["lam"],
                                    pick["step"],
                                    entry.get("schedule", "const"),
                                    tuple(sorted(own.items())),
                                    max(1, round(rounds * scale)),
                                    seed,
                                )
                            )
    return len(runs)


BUILT = {".git", ".venv", ".snakemake", "__pycache__", ".pytest_cache"}
"""Folders a checkout outside git leaves out of its copy (environments, caches, built data)."""


def fresh_copy(dest: Path) -> Path:
    """The repository's tracked files (a fresh clone without .git); outside git (a copy such as
    benchmarks/quick_start.py makes) every file but built folders, results/ and resources/ (their READMEs kept)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    files = listed.stdout.split() if listed.returncode == 0 else []
    if not files:
        files = [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file()
            and not BUILT & set(p.relative_to(ROOT).parts[:-1])
            and (
                p.relative_to(ROOT).parts[0] not in ("results", "resources", ".test")
                or p.name == "README.md"
                or p.relative_to(ROOT).parts[:2] == (".test", "config")
            )
        ]
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest
