"""The SLURM profile for real: a tiny workflow submitted through `--workflow-profile profiles/slurm` to a
single-node SLURM cluster on localhost (tests/slurm_cluster.py): one bundled CPU job training three runs and
one GPU job training two runs at once (`runs_per_gpu: 2`), two submissions for five runs.

Needs root and `apt-get install slurmctld slurmd slurm-client munge` (.ci/run installs them). Without them the
tests are skipped with that reason, except under CI (`CI=true`), where a missing cluster is a failure. Run only
this test with `python -m pytest -m slurm`.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from slurm_cluster import PACKAGES, SlurmClusterError, missing_binaries, slurm_cluster
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slurm


def _why_no_cluster() -> str | None:
    """Why this machine cannot start the local SLURM cluster (None where it can)."""
    missing = missing_binaries()
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing): apt-get install {PACKAGES}"
    if os.geteuid() != 0:
        return "the local SLURM cluster runs its daemons as root"
    return None


if _why_no_cluster() and os.environ.get("CI") != "true":
    pytest.skip(_why_no_cluster(), allow_module_level=True)
TIMEOUT = 420  # seconds for snakemake, under `timeout -s INT` (snakemake ignores SIGTERM while it waits)

CONFIG = """\
preset: full
seeds: [0]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.3}
  evaluation: {every: 1}
  checkpoint: {every: 1}
job_defaults: {gpus: 0, threads: 1, runtime: 10, mem_mb: 400}
datasets:
  synthetic_iid: {source: synthetic}
experiments:
  cpu_runs:
    set: {devices.straggler: 0.9}
    job: {runs_per_job: 8}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedavg, rounds: 2}
          - {algorithm: fedprox, rounds: 2, mu: 1}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.43}
  gpu_runs:
    set: {devices.straggler: 0.5}
    job: {gpus: 1, runs_per_job: 8, runs_per_gpu: 2}
    groups:
      - datasets: [synthetic_iid]
        runs:
          - {algorithm: fedprox, rounds: 2, mu: 1}
          - {algorithm: fedavg, rounds: 2}
"""


@pytest.fixture(scope="module")
def cluster():
    try:
        with slurm_cluster() as c:
            pids = [p.pid for p in c.processes.values()]
            yield c
    except SlurmClusterError as e:
        pytest.fail(f"local SLURM cluster: {e}", pytrace=False)
    time.sleep(0.5)
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not alive, f"SLURM daemons still running after the cluster stopped: {alive}"


def workflow_copy(tmp_path: Path) -> Path:
    wd = tmp_path / "wf"
    wd.mkdir()
    for folder in ("workflow", "config", "profiles"):
        shutil.copytree(ROOT / folder, wd / folder)
    (wd / "config" / "config.yaml").write_text(CONFIG)
    return wd


def test_slurm_profile_runs_bundled_training_jobs_on_slurm_with_a_gpu(cluster, tmp_path):
    wd = workflow_copy(tmp_path)
    plan = build_plan(yaml.safe_load(CONFIG))
    bundles = form_bundles(plan.runs)
    runs = sorted(plan.runs)
    assert len(runs) == 5 and len(bundles) == 2
    gpu_bundle = next(b for b in bundles.values() if b.job["gpus"] == 1)
    cpu_bundle = next(b for b in bundles.values() if b.job["gpus"] == 0)
    assert len(gpu_bundle.run_ids) == 2 and gpu_bundle.job["runs_per_gpu"] == 2 and len(cpu_bundle.run_ids) == 3
    targets = [f"results/runs/{r}/summary.json" for r in runs]
    # Jobs inherit the submitting environment (the plugin submits with `sbatch --export=ALL`): put this
    # interpreter's bin folder (upfl, snakemake) first on PATH so the jobs find them without an activated venv.
    env = {
        **cluster.env,
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cluster.env['PATH']}",
    }
    cmd = [
        "timeout",
        "-s",
        "INT",
        "-k",
        "30",
        str(TIMEOUT),
        sys.executable,
        "-m",
        "snakemake",
        "--workflow-profile",
        "profiles/slurm",
        "--jobs",
        "4",
        "--verbose",
        *targets,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True, timeout=TIMEOUT + 60)
    elapsed = time.monotonic() - start
    log = proc.stdout + proc.stderr
    (tmp_path / "snakemake.log").write_text(log)
    assert proc.returncode == 0, (
        f"snakemake exited {proc.returncode} after {elapsed:.0f} s:\n{log[-6000:]}\n{cluster.logs()}"
    )

    # Every run of every bundle finished, with its own result folder and log.
    for rid in runs:
        assert (wd / "results" / "runs" / rid / "summary.json").stat().st_size > 0, rid
        assert (wd / "results" / "runs" / rid / "metrics.csv").stat().st_size > 0, rid
        assert "final iteration" in (wd / "results" / "logs" / "train" / f"{rid}.log").read_text(), rid
    bundle_logs = {}
    for b in bundles.values():
        text = (wd / "results" / "logs" / "bundles" / f"{b.name}.log").read_text()
        bundle_logs[b.name] = text
        assert f"{len(b.run_ids)} trained, 0 restored, 0 failed" in text, text
        assert all(f"trained {rid} " in text for rid in b.run_ids), text
    assert "2 runs, 2 at a time" in bundle_logs[gpu_bundle.name]

    # One sbatch per bundle and one for the kernels' warm-up, which compiles for the nodes' CPU before the CPU
    # bundle (none ran locally), all on the profile's partition; only the GPU bundle asked for the GPU.
    calls = [line.strip() for line in log.splitlines() if "sbatch call:" in line]
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    assert len(calls) == len(bundles) + 1 and len(submitted) == len(bundles) + 1, log[-6000:]
    assert sum("--comment rule_warm_up_kernels " in c for c in calls) == 1, calls
    assert all(re.search(r" -p '?gpu'? ", c) for c in calls), calls
    gpu_calls = [c for c in calls if "--gpus=1" in c]
    assert len(gpu_calls) == 1, calls
    assert f"--comment rule_train_bundle_{gpu_bundle.name} " in gpu_calls[0], gpu_calls[0]

    # SLURM ran them: every job completed on the node; the GPU job asked SLURM for gres:gpu:1 and SLURM gave
    # it one (the gres plugin sets CUDA_VISIBLE_DEVICES in the job; the job step logs its environment).
    jobs = {jobid: cluster.job(jobid) for jobid in submitted.values()}
    assert all(j["JobState"] == "COMPLETED" and j["NodeList"] == cluster.node for j in jobs.values()), jobs
    gpu_jobs = [jobid for jobid, j in jobs.items() if j.get("TresPerJob") == "gres:gpu:1"]
    assert len(gpu_jobs) == 1, {jobid: j.get("TresPerJob") for jobid, j in jobs.items()}
    slurm_logs = {p.stem: p for p in (wd / ".snakemake" / "slurm_logs").rglob("*.log")}
    assert sorted(slurm_logs) == sorted(submitted.values()), slurm_logs
    assert slurm_logs[gpu_jobs[0]].parent.name == f"rule_train_bundle_{gpu_bundle.name}"
    for jobid, path in slurm_logs.items():
        text = path.read_text()
        assert "1 of 1 steps (100%) done" in text, text[-3000:]
        # SLURM_GPUS_ON_NODE is SLURM's own record of the GPUs it gave the job; CUDA_VISIBLE_DEVICES and
        # SLURM_JOB_GPUS are set only where the node's gres.conf names a device file.
        gpus_seen = "'SLURM_GPUS_ON_NODE': '1'" in text or (
            "'CUDA_VISIBLE_DEVICES': '0'" in text and "'SLURM_JOB_GPUS': '0'" in text
        )
        assert gpus_seen == (jobid in gpu_jobs), (jobid, text[-3000:])
    print(f"\nsnakemake through profiles/slurm: {elapsed:.1f} s")
    print("\n".join(re.sub(r" --wrap=.*", " --wrap=...", c) for c in calls))
    print("\n".join(line.strip() for line in log.splitlines() if "has been submitted with SLURM jobid" in line))
    for name, text in bundle_logs.items():
        print(f"results/logs/bundles/{name}.log:\n{text}")
    print(f"GPU job {gpu_jobs[0]}: TresPerJob={jobs[gpu_jobs[0]]['TresPerJob']}, a GPU in its environment")
