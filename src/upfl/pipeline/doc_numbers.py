"""The counts and times the docs state, each computed from its one source: run and job counts from the plan
(``config/config.yaml``), times and speed-ups from ``benchmarks/results/``. ``python tools/doc_numbers.py`` writes
``docs/numbers.md`` and the README's time table from here; ``tests/pipeline/test_doc_numbers.py`` checks both and
that no other page states these counts differently."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .bundles import form_bundles
from .plan import build_plan, resolve_preset

REAL_SOURCES = ("femnist", "sent140")
README_SECTION = "## Requirements and time"
TESTING_SECTION = "## Duration and needs"


def machine_description() -> dict[str, Any]:
    """This machine as the benchmarks name it: CPU model, widest vector unit, cores."""
    model, flags = "unknown CPU", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return {"cpu": model, "vector": vector, "cores": os.cpu_count()}


def machine_text(machine: dict[str, Any]) -> str:
    return f"{machine['cores']} cores of an {machine['cpu']} ({machine['vector']})"


def plan_counts(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per preset: runs (distinct: a run several experiments ask for counts once), runs on the real data sets and on
    the synthetic ones, training jobs (bundles) of each, experiments and report outputs."""
    counts = {}
    for preset in ["full", *config.get("presets", {})]:
        selected = {**config, "preset": preset}
        plan, resolved = build_plan(selected), resolve_preset(selected)
        source = {name: d["source"] for name, d in resolved["datasets"].items()}
        real = {k: r for k, r in plan.runs.items() if source[r.dataset] in REAL_SOURCES}
        synthetic = {k: r for k, r in plan.runs.items() if k not in real}
        counts[preset] = {
            "runs": len(plan.runs),
            "real_runs": len(real),
            "synthetic_runs": len(synthetic),
            "training_jobs": len(form_bundles(plan.runs)),
            "real_jobs": len(form_bundles(real)),
            "synthetic_jobs": len(form_bundles(synthetic)),
            "experiments": len(plan.experiments),
            "outputs": len(plan.outputs),
            "per_experiment": {e: len(ids) for e, ids in plan.experiments.items()},
        }
    return counts


def load(benchmarks: Path, name: str) -> dict[str, Any]:
    path = benchmarks / name
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def seconds_range(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[0]:.0f} s" if round(values[0]) == round(values[-1]) else f"{values[0]:.0f}-{values[-1]:.0f} s"


def started_quiet(measurement: dict[str, Any]) -> bool:
    """Whether a measurement started on a quiet machine: a one-minute load average under half its cores."""
    return measurement["load_average_before"][0] < measurement["machine"]["cores"] / 2


def latest_commit(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measurements made at the commit of the most recent one (older code's times are history)."""
    newest = max(measurements, key=lambda m: m.get("measured_at", ""))
    return [m for m in measurements if m.get("commit") == newest.get("commit")]


def quick_start_times(benchmarks: Path, name: str = "quick_start.json", quiet: bool = False) -> list[dict[str, Any]]:
    """`make quick` (or, from test_suite.json, `make test`) per machine and numba cache state: wall and
    CPU-seconds as ranges, load averages. ``quiet``: per machine and cache state, only the measurements that
    started on a quiet machine (:func:`started_quiet`) where there are any, of the latest commit measured
    (:func:`latest_commit`)."""
    groups: dict[tuple, list[dict]] = {}
    for m in load(benchmarks, name).get("measurements", []):
        groups.setdefault((machine_text(m["machine"]), m["numba_cache"]), []).append(m)
    if quiet:
        groups = {key: latest_commit([m for m in ms if started_quiet(m)] or ms) for key, ms in groups.items()}
    rows = []
    for (machine, cache), ms in sorted(groups.items()):
        loads = [x for m in ms for x in (m["load_average_before"][0], m["load_average_after"][0])]
        kernels = [m["kernels_warm_up"]["seconds"] for m in ms if m["kernels_warm_up"].get("seconds") is not None]
        rows.append(
            {
                "machine": machine,
                "cache": cache,
                "n": len(ms),
                "wall": seconds_range([m["wall_s"] for m in ms]),
                "cpu": seconds_range([m["cpu_s"] for m in ms]),
                "kernels": seconds_range(kernels) if kernels else "",
                "load": f"{min(loads):.1f}-{max(loads):.1f}",
            }
        )
    return rows


def synthetic_half_times(benchmarks: Path, name: str = "synthetic") -> dict[str, str]:
    """A part of benchmarks/pipeline.py's file, bundled (the full config's synthetic half, or ``quick``: the
    workflow without the report): wall and busy core-seconds."""
    doc = load(benchmarks, "pipeline.json")
    part = doc.get("parts", {}).get(name, {}).get("bundled")
    if not part or not part.get("completed"):
        return {}
    machine = doc.get("machine", {})
    cpus = machine.get("cpus", "?")
    return {
        "wall": seconds_range([part["wall_s"]]),
        "cpu": seconds_range([part["timeline"]["busy_core_s"]]),
        "machine": machine_text(machine) if {"cpu", "vector", "cores"} <= set(machine) else f"{cpus} cores",
        "runs": str(part["runs"]),
        "cache": part.get("numba_cache_before", "?"),
        "load": f"{min(part['load_average_before'][0], part['load_average_after'][0]):.1f}-"
        f"{max(part['load_average_before'][0], part['load_average_after'][0]):.1f}",
    }


def solver_speedup(benchmarks: Path) -> str:
    """The compiled (numba) solver against the batched torch solver per training round on W1 (engine.json)."""
    value = load(benchmarks, "engine.json").get("numba_speedup_vs_torch_per_training_round")
    return f"{value:.0f}x" if value else ""


def numbers(config: dict[str, Any], benchmarks: Path) -> dict[str, Any]:
    return {
        "plan": plan_counts(config),
        "quick_start": quick_start_times(benchmarks),
        "quick_start_quiet": quick_start_times(benchmarks, quiet=True),
        "test_suite": quick_start_times(benchmarks, "test_suite.json"),
        "test_suite_quiet": quick_start_times(benchmarks, "test_suite.json", quiet=True),
        "synthetic_half": synthetic_half_times(benchmarks),
        "quick_workflow": synthetic_half_times(benchmarks, "quick"),
        "solver_speedup": solver_speedup(benchmarks),
        "real_half_cpu": real_half_estimate(config, benchmarks),
    }


def longest(text: str) -> str:
    """The upper end of a range of seconds ('40-45 s' -> '45 s'; '42 s' as it is)."""
    return text.rsplit("-", 1)[-1] if "-" in text else text


def readme_section(n: dict[str, Any]) -> str:
    """The README's "Requirements and time" section: one number per cell (a fresh clone's `make quick`, numba's
    cache cold; the upper end of the latest quiet measurements), the ranges, machines and busy runs in
    docs/numbers.md."""
    full, quick, half = n["plan"]["full"], n["plan"]["quick"], n["synthetic_half"]
    quick_rows = n["quick_start_quiet"]
    quick_row = next((r for r in quick_rows if r["cache"] == "cold"), quick_rows[0] if quick_rows else None)
    suite = n["test_suite_quiet"][0] if n["test_suite_quiet"] else None
    real = n.get("real_half_cpu")
    machines = {r["machine"] for r in (quick_row, suite, half or None) if r}
    where = f"on {machines.pop()}" if len(machines) == 1 else "on 2-core machines (docs/numbers.md names each)"
    half_time = f"{half['wall']}¹" if half else "not measured yet"
    quick_time = longest(quick_row["wall"]) if quick_row else "not measured yet"
    lines = [
        README_SECTION,
        f"Wall time {where}, quiet, numba's cache cold for `make quick` (a fresh clone); measured by "
        "`python benchmarks/quick_start.py` and `python benchmarks/pipeline.py`. Every range, machine and busy run: "
        "[docs/numbers.md](docs/numbers.md); a busy or slower machine takes a multiple.",
        "",
        "| Part | Needs | Runs (training jobs) | Time |",
        "|---|---|---|---|",
        f"| `make quick` (synthetic, our generator) | Python >= 3.10, 2 CPU cores, no network | "
        f"{quick['runs']} ({quick['training_jobs']}) | {quick_time} |",
        f"| Synthetic half of the paper (authors' released draws) | internet once (6.6 MB) | "
        f"{full['synthetic_runs']} ({full['synthetic_jobs']}) | {half_time} |",
        f"| Real-data half (FEMNIST, Sent140) | internet (2.5 GB of LEAF archives and GloVe), a GPU | "
        f"{full['real_runs']} ({full['real_jobs']} GPU jobs) | not yet timed on a GPU"
        f"{real_half_cell(real)} |",
        f"| `make test` (the whole suite) | `make install`, 2 cores | | "
        f"{longest(suite['wall']) if suite else 'not measured yet'} |",
        "",
    ]
    if half:
        grid = "all but the sensitivity grid's and its held-out seeds'"
        lines += [f"¹ for {half['runs']} of its runs ({grid}), numba's cache warm.", ""]
    if real:
        lines += [real_half_note(real), ""]
    return "\n".join(lines)


def real_half_cell(estimate: dict[str, Any] | None) -> str:
    """The real-data half's CPU estimate in the README's time table (one number), or nothing where no round was
    measured."""
    return f"; about {estimate['core_hours']:.0f} core-hours on the CPU²" if estimate else ""


def real_half_note(estimate: dict[str, Any]) -> str:
    """The footnote of :func:`real_half_cell`: the machine and how the estimate was made."""
    return (
        f"² estimated on {estimate['machine']} from one measured round of each model at the paper's sizes "
        "(`python benchmarks/real_data.py --paper-sized`) times each run's rounds; no GPU has been lent to this "
        "project yet. The workflow prints its own machine's estimate before it starts."
    )


def real_half_estimate(config: dict[str, Any], benchmarks: Path) -> dict[str, Any]:
    """The full config's real-data runs' estimated core-hours on the CPU
    (:func:`upfl.pipeline.costs.real_half_core_hours`) and the machine of the measured rounds (``real_data.json``)."""
    from .costs import real_half_core_hours

    plan, resolved = build_plan({**config, "preset": "full"}), resolve_preset({**config, "preset": "full"})
    source = {name: d["source"] for name, d in resolved["datasets"].items()}
    real = {k: r for k, r in plan.runs.items() if source[r.dataset] in REAL_SOURCES}
    hours = real_half_core_hours(real, benchmarks)
    floor = load(benchmarks, "real_data.json").get("round_paper_sized", {}).get("floor", {})
    if hours is None or not floor:
        return {}
    vector = floor.get("isa", "?")
    return {"core_hours": hours, "machine": f"one core of an {floor.get('cpu_model', '?')} ({vector})"}


def suite_text(n: dict[str, Any], rows: str = "test_suite_quiet") -> str:
    return (
        "; ".join(f"{r['wall']} wall, {r['cpu']} CPU on {r['machine']} (load average {r['load']})" for r in n[rows])
        or "not measured yet"
    )


def testing_section(n: dict[str, Any]) -> str:
    """docs/testing.md's "Duration and needs" section."""
    return "\n".join(
        [
            TESTING_SECTION,
            f"`make test` in a fresh copy (`python benchmarks/quick_start.py --target test --runs cold "
            f"--out benchmarks/results/test_suite.json`): {suite_text(n)}. It needs the install of "
            "`make install` (Python >= 3.10, CPU torch, the `test` and `flower` extras) and 2 cores; the "
            "`install` test makes a second virtual environment (about 2 GB of disk, as `.venv` itself); "
            "no GPU and no network beyond pip's package sources for that test. Without SLURM (and root) "
            "`tests/workflow/test_slurm.py` is skipped with that reason; `.ci/run` installs it.",
            "",
        ]
    )


def numbers_page(n: dict[str, Any]) -> str:
    """docs/numbers.md: every count and time the docs state, with its source."""
    lines = [
        "# Numbers",
        "",
        "Every run count, job count, time and speed-up the documentation states, generated by "
        "`python tools/doc_numbers.py` from the plan of `config/config.yaml` and from `benchmarks/results/` "
        "(`tests/pipeline/test_doc_numbers.py` checks that this page and the README match them). A run that "
        "several experiments ask for counts once.",
        "",
        "## Runs and training jobs (from the plan)",
        "",
        "| Preset | Runs | Synthetic runs (jobs) | Real-data runs (jobs) | Training jobs | Experiments | "
        "Report outputs |",
        "|---|---|---|---|---|---|---|",
    ]
    for preset, c in n["plan"].items():
        lines.append(
            f"| `{preset}` | {c['runs']} | {c['synthetic_runs']} ({c['synthetic_jobs']}) | "
            f"{c['real_runs']} ({c['real_jobs']}) | {c['training_jobs']} | {c['experiments']} | "
            f"{c['outputs']} |"
        )
    presets = list(n["plan"])
    lines += [
        "",
        "Runs per experiment (a run shared by experiments is listed under each):",
        "",
        "| Experiment | " + " | ".join(f"`{p}`" for p in presets) + " |",
        "|---" * (len(presets) + 1) + "|",
    ]
    experiments = dict.fromkeys(e for p in presets for e in n["plan"][p]["per_experiment"])
    lines += [
        f"| `{e}` | " + " | ".join(str(n["plan"][p]["per_experiment"].get(e, "")) for p in presets) + " |"
        for e in experiments
    ]
    lines += [
        "",
        "## `make quick` (benchmarks/quick_start.py)",
        "",
        "A fresh copy of the repository, `make quick` (the quick preset and its report); numba's cache empty "
        "(cold, as on a fresh clone: the kernels compile) or filled by the run before (warm). CPU: the "
        "CPU-seconds of every process it started.",
        "",
        "| Machine | numba cache | Runs measured | Wall | CPU | Kernels' warm-up job | Load average |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['machine']} | {r['cache']} | {r['n']} | {r['wall']} | {r['cpu']} | {r['kernels'] or 'n/a'} | "
        f"{r['load']} |"
        for r in n["quick_start"]
    ]
    half = n["synthetic_half"]
    lines += ["", "## The synthetic half of the paper (benchmarks/pipeline.py)", ""]
    lines.append(
        f"{half['runs']} runs, bundled, numba's cache {half['cache']}, on {half['machine']}: {half['wall']} wall, "
        f"{half['cpu']} of busy cores (load average {half['load']})."
        if half
        else "Not measured yet."
    )
    lines += [
        "",
        "## `make test` (benchmarks/quick_start.py --target test)",
        "",
        suite_text(n, "test_suite") + ".",
        "",
        "## The compiled solver (benchmarks/engine.py)",
        "",
        f"The numba solver against the batched torch solver, per training round on W1 (Synthetic(1,1), "
        f"FedProx mu = 1, E = 20): {n['solver_speedup'] or 'not measured yet'} faster.",
        "",
    ]
    return "\n".join(lines)


def replace_section(text: str, heading: str, section: str) -> str:
    """``text`` with the Markdown section starting at ``heading`` (up to the next ``## ``) replaced."""
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[:start] + section.rstrip("\n") + "\n" + (text[end:] if end >= 0 else "")
