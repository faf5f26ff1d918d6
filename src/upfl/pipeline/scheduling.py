"""Snakemake's scheduler on one machine: the job-rate limiter switched off where it limits nothing.

Snakemake's command line always sets a job-rate limiter (``--max-jobs-per-timespan``, default 100 jobs per second).
With one, every pass of its scheduler loop ends by arming a timer that wakes the loop again one timespan later,
and every finished job wakes it once more: each wake-up arms a new timer, so the chains add up, one per finished
job, for as long as the workflow runs. Each pass re-reads the size of every ready job's inputs. In the synthetic
half of the paper (94 jobs in 2.5 minutes) the loop made about 15,000 passes for 75 job starts, and these passes
were most of Snakemake's own CPU time (docs/benchmarks.md, "Snakemake's scheduler").

On the local executor the jobs run on this machine's cores, which the scheduler already counts; no queue or
submission system is there to protect. :func:`drop_local_rate_limit` (the workflow's ``onstart`` handler) removes the
limiter there, unless the command line or a profile asked for a limit other than the default. A cluster executor
(SLURM) keeps it: there it paces submissions to the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_LIMIT = (100, 1)
"""Snakemake's command-line default for ``--max-jobs-per-timespan``: 100 jobs per 1 second."""

LIMIT_FLAGS = ("--max-jobs-per-timespan", "--max-jobs-per-second")


def asked_for_limit(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (Snakemake's command line) names a job-rate limit itself."""
    return any(a == flag or a.startswith(flag + "=") for a in argv for flag in LIMIT_FLAGS)


def drop_local_rate_limit(workflow: Any, argv: Sequence[str]) -> bool:
    """Remove the job-rate limiter of ``workflow``'s scheduler where it runs jobs locally with Snakemake's default
    limit and ``argv`` asks for none; True when it was removed. A Snakemake without these attributes (another
    version) is left as it is."""
    scheduler: Any = getattr(workflow, "scheduler", None)
    limiter = getattr(scheduler, "job_rate_limiter", None)
    if limiter is None or not getattr(workflow, "local_exec", False) or asked_for_limit(argv):
        return False
    if (getattr(limiter, "max_jobs", None), getattr(limiter, "timespan", None)) != DEFAULT_LIMIT:
        return False
    scheduler.job_rate_limiter = None
    return True
