"""Where a training bundle's CPU goes once its modules are imported: one bundle spec, trained by ``upfl run-many`` in
this process after it has imported numpy, pandas, torch, dp_accounting, upfl.cli and upfl.commands.bundle.

Prints one JSON line: the process CPU seconds of the ``upfl run-many`` call (``cpu``), the sum of its runs'
``time.total_s`` (``inside``, wall seconds: on a loaded machine it grows with the load) and ``parts``, the CPU seconds
of the functions below (outermost call only), among them ``T.training_round`` and ``T.evaluate``: the CPU of the runs'
timed training rounds and evaluations, so that ``cpu`` less those two is what lies outside the runs' work whatever the
load (the upcycling steps aside, a few milliseconds).

Run it in a copy of a finished workflow folder (``python benchmarks/pipeline.py --parts quick --layouts bundled
--keep``), with ``results/finished`` removed (else the runs are restored, not trained), once per bundle, each in its
own process, from the folder: ``for s in results/bundles/*.json; do python .../benchmarks/bundle_parts.py $s; done``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import time

import dp_accounting  # noqa: F401  (imported before the measurement, as a forked server would have it)
import numpy  # noqa: F401
import pandas  # noqa: F401
import torch  # noqa: F401

import upfl.cli
import upfl.commands.bundle  # noqa: F401
import upfl.config as cfgmod
import upfl.engine.checkpoints as checkpoints
import upfl.engine.simulation as simulation
import upfl.engine.store as store
import upfl.pipeline.bundle_trainer as bundle_trainer
import upfl.pipeline.specs as specs

PARTS: dict[str, float] = {}


def measured(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its CPU seconds (outermost call only) to ``PARTS[label]``."""
    inner = getattr(owner, name)
    depth = [0]

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        if depth[0]:
            return inner(*args, **kwargs)
        depth[0] += 1
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            PARTS[label] = PARTS.get(label, 0.0) + time.process_time() - start
            depth[0] -= 1

    setattr(owner, name, wrapper)


def main(spec: str) -> None:
    for owner, name in (
        (bundle_trainer, "load_data"),
        (bundle_trainer, "run_config"),
        (specs, "clear_results"),
        (store, "identity"),
        (store, "save"),
        (cfgmod, "validate"),
        (simulation, "privacy_report"),
        (simulation, "select_local_solver"),
        (simulation, "open_checkpoint"),
        (simulation, "check_out"),
        (simulation, "pooled_rows"),
        (simulation, "_run_loop"),
        (simulation, "_metrics_csv"),
        (simulation, "json_text"),
        (simulation, "record_text"),
        (simulation, "write_texts"),
        (checkpoints.Checkpoint, "acquire"),
        (checkpoints.Checkpoint, "remove"),
    ):
        measured(owner, name, f"{getattr(owner, '__name__', '').rpartition('.')[2]}.{name}")
    measured(simulation.Simulation, "__post_init__", "Simulation.__post_init__")
    measured(simulation.Simulation, "training_round", "T.training_round")
    measured(simulation.Simulation, "evaluate", "T.evaluate")
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        status = upfl.cli.main(["run-many", "--spec", spec, "--clear-results"])
    cpu = time.process_time() - start
    with open(spec, encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    inside = 0.0
    for run in runs:
        with open(os.path.join(run["out"], "summary.json"), encoding="utf-8") as f:
            inside += json.load(f)["time"]["total_s"]
    print(
        json.dumps(
            {
                "spec": os.path.basename(spec),
                "status": status,
                "runs": len(runs),
                "cpu": round(cpu, 3),
                "inside": round(inside, 3),
                "parts": {k: round(v, 3) for k, v in sorted(PARTS.items(), key=lambda kv: -kv[1])},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
