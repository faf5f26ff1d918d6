"""The pipeline benchmark's timeline: jobs' start and end read from a Snakemake log, and where the wall time goes."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pipeline_benchmark():
    spec = importlib.util.spec_from_file_location("pipeline_benchmark", ROOT / "benchmarks" / "pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snakemake_log(jobs: list[tuple[str, int, int, int | None]]) -> str:
    """A Snakemake log of (rule, jobid, start second, end second or None) jobs, as Snakemake prints them."""
    events = [
        (
            start,
            f"{'rule' if rule.startswith('train') else 'localrule'} {rule}:\n    output: x\n"
            f"    jobid: {jobid}\n    reason: Missing output files: x",
        )
        for rule, jobid, start, _ in jobs
    ]
    events += [(end, f"Finished jobid: {jobid} (Rule: {rule})") for rule, jobid, _, end in jobs if end is not None]
    lines = ["Building DAG of jobs...", "Job stats:"]
    for second, text in sorted(events, key=lambda e: (e[0], e[1].startswith("Finished"))):
        lines += [f"[Sat Dec  5 10:{second // 60:02d}:{second % 60:02d} 2026]", text]
    return "\n".join(lines) + "\n"


def test_timeline_reads_each_jobs_start_and_end():
    bench = pipeline_benchmark()
    log = snakemake_log(
        [
            ("synthetic_dataset", 3, 0, 2),
            ("train_bundle_fig8_0a", 1, 2, 70),
            ("train_bundle_table1_0b", 2, 2, 40),
            ("experiment_runs", 5, 70, None),
        ]
    )
    assert bench.job_timeline(log) == [
        {"rule": "synthetic_dataset", "start": 0.0, "end": 2.0},
        {"rule": "train_bundle_fig8_0a", "start": 2.0, "end": 70.0},
        {"rule": "train_bundle_table1_0b", "start": 2.0, "end": 40.0},
        {"rule": "experiment_runs", "start": 70.0, "end": None},
    ]


def test_timeline_figures_show_the_report_tail_and_idle_cores():
    bench = pipeline_benchmark()
    jobs = bench.job_timeline(
        snakemake_log(
            [
                ("synthetic_dataset", 1, 0, 2),
                ("train_bundle_a", 2, 2, 60),
                ("train_bundle_b", 3, 2, 30),
                ("figure", 4, 30, 35),
                ("figure", 5, 60, 64),
                ("claims", 6, 64, 66),
            ]
        )
    )
    assert bench.timeline_figures(jobs, cores=2) == {
        "span_s": 66.0,
        "last_training_start_s": 2.0,
        "last_training_end_s": 60.0,
        "tail_s": 6.0,
        "jobs_in_tail": 2,
        "busy_core_s": 2 + 58 + 28 + 5 + 4 + 2,
        "idle_core_s": 2 * 66 - 99,
    }
    assert bench.timeline_figures([], cores=2) == {}
