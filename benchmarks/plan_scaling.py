"""Benchmark: how the plan of a config grows with its runs (6,000 and 60,000 by default).

A config of N runs (the four synthetic sets, FedProx and Upcycled-FL at N/24 values of mu, three seeds; the rest of
config/config.yaml as it is) is planned twice, each in a fresh process: the parse's own parts
(``upfl.pipeline.plan.build_plan``, ``bundles.form_bundles``, ``specs.workflow_specs``) and the whole
``snakemake -n`` in a copy of the workflow (the parse, the rules, Snakemake's DAG of jobs). Each gives wall time,
CPU-seconds and peak memory (the process's maximum resident set). ``--runs-per-job`` sets ``job_defaults``'
``runs_per_job`` (the config's 200 by default; 1 plans one job per run).

Run: python benchmarks/plan_scaling.py [--runs 6000 60000] [--runs-per-job 200]
[--out benchmarks/results/plan_scaling.json]: prints the figures and writes the JSON (the machine's load average
recorded with them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - start
use = resource.getrusage(resource.RUSAGE_CHILDREN)
out = proc.stdout + proc.stderr
jobs = [line.split()[-1] for line in out.splitlines() if line.startswith("total ")]
print(json.dumps({"rc": proc.returncode, "wall_s": round(wall, 2), "cpu_s": round(use.ru_utime + use.ru_stime, 2),
                  "peak_mb": round(use.ru_maxrss / 1024, 1), "jobs": int(jobs[-1]) if jobs else None,
                  "tail": out[-600:]}))
"""

PARTS = """
import json, sys, time, yaml
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.config_errors import check_workflow_config
from upfl.pipeline.plan import build_plan
from upfl.pipeline.specs import workflow_specs
config = yaml.safe_load(open(sys.argv[1]))
check_workflow_config(config, sys.argv[2])
times = {}
t = time.process_time(); plan = build_plan(config); times["plan_cpu_s"] = time.process_time() - t
t = time.process_time(); bundles = form_bundles(plan.runs); times["bundles_cpu_s"] = time.process_time() - t
t = time.process_time(); workflow_specs(config, plan, bundles); times["specs_cpu_s"] = time.process_time() - t
print(json.dumps({"runs": len(plan.runs), "bundles": len(bundles), **{k: round(v, 2) for k, v in times.items()}}))
"""

DATASETS = ["synthetic_iid", "synthetic_0_0", "synthetic_0.5_0.5", "synthetic_1_1"]


def scaled_config(runs: int, runs_per_job: int | None) -> dict:
    """config/config.yaml with one experiment of ``runs`` runs (a multiple of 24) in place of the paper's."""
    per = runs // 24
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mus = [round(0.001 * (i + 1), 6) for i in range(per)]
    config["experiments"] = {
        "scale": {
            "groups": [
                {
                    "datasets": DATASETS,
                    "runs": [
                        {"algorithm": "fedprox", "rounds": 10, "mu": mus},
                        {"algorithm": "upcycled", "rounds": 20, "mu": mus, "lam": [0.43] * per},
                    ],
                }
            ],
            "outputs": [{"kind": "table1", "name": "table1"}],
        }
    }
    config.pop("claims", None)
    if runs_per_job is not None:
        config.setdefault("job_defaults", {})["runs_per_job"] = runs_per_job
    return config


def measure(cmd: list[str], cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[6000, 60000])
    ap.add_argument("--runs-per-job", type=int, default=None, help="job_defaults.runs_per_job (default: the config's)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "plan_scaling.json")
    args = ap.parse_args(argv)
    from results_file import publish

    rows = []
    with tempfile.TemporaryDirectory(prefix="upfl-plan-scaling-") as tmp:
        for runs in args.runs:
            wd = Path(tmp) / f"wf{runs}"
            wd.mkdir()
            for folder in ("workflow", "config", "profiles"):
                shutil.copytree(ROOT / folder, wd / folder)
            config = wd / "config" / "config.yaml"
            config.write_text(yaml.safe_dump(scaled_config(runs, args.runs_per_job)))
            load = os.getloadavg()[0]
            parts = measure(
                [sys.executable, "-c", PARTS, str(config), str(wd / "workflow" / "schemas" / "config.schema.yaml")], wd
            )
            parts.update(json.loads(parts.pop("tail").strip().splitlines()[-1]))
            dag = measure([sys.executable, "-m", "snakemake", "-n", "--workflow-profile", "none"], wd)
            tail = dag.pop("tail")
            if dag["rc"] != 0:
                raise SystemExit(f"snakemake -n of {runs} runs failed:\n{tail}")
            parts.pop("jobs", None)
            rows.append(
                {
                    "runs": runs,
                    "load_average": round(load, 2),
                    "parse_parts": parts,
                    "snakemake_n": dag,
                }
            )
    first, last = rows[0], rows[-1]
    ratio = {
        "runs": last["runs"] / first["runs"],
        "snakemake_n_cpu": round(last["snakemake_n"]["cpu_s"] / max(first["snakemake_n"]["cpu_s"], 1e-9), 2),
        "snakemake_n_wall": round(last["snakemake_n"]["wall_s"] / max(first["snakemake_n"]["wall_s"], 1e-9), 2),
        "snakemake_n_peak_memory": round(
            last["snakemake_n"]["peak_mb"] / max(first["snakemake_n"]["peak_mb"], 1e-9), 2
        ),
    }
    publish(
        {
            "command": "python benchmarks/plan_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "runs_per_job": args.runs_per_job or "config default",
            "rows": rows,
            "ratio_last_to_first": ratio,
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
