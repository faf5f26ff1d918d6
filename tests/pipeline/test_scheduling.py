"""The job-rate limiter is removed from a local Snakemake run (upfl.pipeline.scheduling), and only there."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from upfl.pipeline.scheduling import asked_for_limit, drop_local_rate_limit


def workflow_with(max_jobs=100, timespan=1, local=True):
    limiter = SimpleNamespace(max_jobs=max_jobs, timespan=timespan)
    return SimpleNamespace(local_exec=local, scheduler=SimpleNamespace(job_rate_limiter=limiter))


def test_the_default_limit_of_a_local_run_is_removed():
    wf = workflow_with()
    assert drop_local_rate_limit(wf, ["snakemake", "--cores", "2"])
    assert wf.scheduler.job_rate_limiter is None


@pytest.mark.parametrize(
    "wf, argv",
    [
        (workflow_with(local=False), ["snakemake", "--executor", "slurm"]),
        (workflow_with(max_jobs=10, timespan=60), ["snakemake"]),
        (workflow_with(), ["snakemake", "--max-jobs-per-timespan", "100/1s"]),
        (workflow_with(), ["snakemake", "--max-jobs-per-second=5"]),
    ],
    ids=["cluster", "limit-from-a-profile", "limit-on-the-command-line", "per-second-flag"],
)
def test_a_limit_that_paces_something_or_was_asked_for_is_kept(wf, argv):
    limiter = wf.scheduler.job_rate_limiter
    assert not drop_local_rate_limit(wf, argv)
    assert wf.scheduler.job_rate_limiter is limiter


def test_a_snakemake_without_these_attributes_is_left_alone():
    assert not drop_local_rate_limit(SimpleNamespace(), ["snakemake"])
    assert not drop_local_rate_limit(SimpleNamespace(scheduler=SimpleNamespace()), ["snakemake"])


def test_flags_are_recognised_in_both_spellings():
    assert asked_for_limit(["--max-jobs-per-timespan=10/1m"])
    assert asked_for_limit(["--max-jobs-per-second", "2"])
    assert not asked_for_limit(["--max-jobs", "3", "--cores", "2"])


SNAKEFILE = textwrap.dedent(
    """
    import sys
    from upfl.pipeline.scheduling import drop_local_rate_limit

    N = 4

    onstart:
        if config.get("drop"):
            drop_local_rate_limit(workflow, sys.argv)

    rule all:
        input:
            expand("out/{i}.txt", i=range(N)),

    rule one:
        output:
            "out/{i}.txt",
        shell:
            "sleep 1.5; echo {wildcards.i} > {output}"
    """
)


def scheduler_passes(tmp_path, drop: bool) -> int:
    """Passes of Snakemake's scheduler loop that looked at ready jobs (its debug line per pass), 4 jobs of 1.5 s on
    one core."""
    wd = tmp_path / ("dropped" if drop else "default")
    wd.mkdir()
    (wd / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--verbose", "--config", f"drop={int(drop)}"],
        cwd=wd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all((wd / "out" / f"{i}.txt").exists() for i in range(4))
    return proc.stderr.count("Resources before job selection")


def test_without_the_limiter_the_scheduler_wakes_once_per_finished_job(tmp_path):
    """With Snakemake's limiter the loop wakes every second on each timer chain, one more chain per finished job;
    without it, once at the start and once per finished job (the last one readies the target rule `all`)."""
    assert scheduler_passes(tmp_path, drop=True) <= 5
    assert scheduler_passes(tmp_path, drop=False) > 5
