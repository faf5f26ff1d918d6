"""Check the paper's released data end to end: serve a mirror on 127.0.0.1, fetch through the real code path,
assert Table 2's synthetic rows and FEMNIST's device counts exactly.

Usage: python tools/check_paper_data.py [MIRROR_DIR]   (default: ../shared/upstream beside the repository)

MIRROR_DIR holds the authors' files in the layout of raw.githubusercontent.com
(``osu-srml/Upcycled-FL/<commit>/data/...``). It is served on a free port of 127.0.0.1 and
``upfl data fetch paper_synthetic paper_femnist --url paper=http://127.0.0.1:PORT/`` runs in a temporary
folder (the installed command: download with resume and retries, the pinned sha256, the weights_only
loader, the index checks, the LEAF conversion). Each converted set's Table 2 row (samples (test),
devices, per-device mean +- std of train + test samples, population std, rounded as the paper prints
them) must equal the paper's (src/upfl/report/paper_values/table2.csv); so must FEMNIST's row computed
from the per-device counts our FEMNIST procedure takes from the authors' index (training samples). The mirror is not
part of the repository, so `.ci/run` runs this only where it exists; it is a check of the real files, not a test.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from upfl.data.femnist import FemnistSpec, device_sizes
from upfl.data.leaf import load_leaf
from upfl.data.mirror import MirrorFetchError, fetched_from_mirror
from upfl.data.paper import femnist_device_counts
from upfl.data.sources import PAPER_SYNTHETIC_SETS, dataset_folder
from upfl.data.stats import dataset_stats
from upfl.report.paper_numbers import paper_values


def half_up(x: float) -> int:
    """Round as a table prints: 349.77 -> 350, 0.5 -> 1."""
    return int(math.floor(x + 0.5))


def table2_rows(resources: Path) -> list[tuple[str, dict, dict]]:
    """(set, ours, paper's) with keys samples, test, devices, mean, std."""
    pv = paper_values("table2").set_index("dataset")
    rows = []
    for setting in PAPER_SYNTHETIC_SETS:
        st = dataset_stats(load_leaf(dataset_folder(resources, "paper", setting)))
        ours = {
            "samples": st["samples_total"],
            "test": st["samples_test"],
            "devices": st["devices"],
            "mean": half_up(st["per_device_total_mean"]),
            "std": half_up(st["per_device_total_std"]),
        }
        paper = {k: int(pv.loc[setting, k]) for k in ours}
        rows.append((setting, ours, paper))
    train, test, _ = femnist_device_counts(resources)
    n_train, n_test = device_sizes(FemnistSpec(num_devices=len(train), train_counts=train, test_counts=test))
    ours = {
        "samples": int(n_train.sum()),
        "test": int(n_test.sum()),
        "devices": len(n_train),
        "mean": half_up(float(np.mean(n_train))),
        "std": half_up(float(np.std(n_train))),
    }
    rows.append(("femnist", ours, {k: int(pv.loc["femnist", k]) for k in ours}))
    return rows


def main(argv: list[str] | None = None) -> int:
    default = Path(__file__).resolve().parents[2] / "shared" / "upstream"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirror", nargs="?", default=str(default), help=f"mirror folder (default: {default})")
    args = parser.parse_args(argv)
    mirror = Path(args.mirror).resolve()
    if not mirror.is_dir():
        print(f"check_paper_data: {mirror}: no such folder", file=sys.stderr)
        return 2
    try:
        with fetched_from_mirror(mirror, ["paper_synthetic", "paper_femnist"], "upfl-paper-data-") as (base, tmp):
            rows = table2_rows(tmp)
    except MirrorFetchError as e:
        print(f"check_paper_data: {e}", file=sys.stderr)
        return 1
    bad = 0
    print(f"Table 2 from the paper's files ({mirror} via {base}); FEMNIST: the device counts our procedure uses:")
    for setting, ours, paper in rows:
        same = ours == paper
        bad += not same

        def text(r):
            return f"{r['samples']} ({r['test']}), {r['devices']} devices, {r['mean']} +- {r['std']}"

        print(f"  {setting:18s} ours {text(ours):36s} paper {text(paper):36s} {'ok' if same else 'DIFFERS'}")
    print(f"{len(rows) - bad} of {len(rows)} rows equal the paper's")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
