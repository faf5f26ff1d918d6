"""A data set's content, not its clock, decides what is stale: replacing a data file with other bytes (its
modification time kept) retrains exactly the runs that read it; a file touched with the same bytes retrains nothing.

Each run records the digest of its data (summary.json ``data_digest``), runs.csv carries it and each table's
provenance line names the digests it was built from.
"""

import json
import os
from pathlib import Path

import pytest

from fixtures_workflow import assert_nothing_to_be_done, job_counts, snakemake, workflow_copy

pytestmark = pytest.mark.workflow

CONFIG = """\
preset: full
seeds: [0]
run_defaults:
  device: cpu
  solver: {epochs: 1, batch_size: 32, lr: 0.05}
  devices: {frac: 0.5}
  evaluation: {every: 1}
job_defaults: {runs_per_job: 4}
datasets:
  synthetic_iid: {source: synthetic}
  synthetic_1_1: {source: synthetic}
experiments:
  table1:
    groups:
      - datasets: [synthetic_iid, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: 2}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
"""


def summaries(wd: Path) -> dict[str, bytes]:
    return {
        str(p.parent.relative_to(wd / "results" / "runs")): p.read_bytes()
        for p in sorted((wd / "results" / "runs").rglob("summary.json"))
    }


def shift_labels(folder: Path) -> None:
    """Every training label y -> (y + 1) mod the number of classes, each file's modification time kept."""
    classes = json.loads((folder / "meta.json").read_text())["num_classes"]
    for path in sorted((folder / "train").glob("*.json")):
        st = path.stat()
        data = json.loads(path.read_text())
        for user in data["user_data"].values():
            user["y"] = [(int(y) + 1) % classes for y in user["y"]]
        path.write_text(json.dumps(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_replaced_data_retrains_exactly_the_runs_that_read_it(tmp_path):
    wd = workflow_copy(tmp_path)
    (wd / "config" / "config.yaml").write_text(CONFIG)
    snakemake(wd, "--cores", "2")
    before = summaries(wd)
    assert len(before) == 4
    data = wd / "resources" / "data" / "generated" / "synthetic_iid"
    digest_file = Path(f"{data}.digest.json")
    old_digest = json.loads(digest_file.read_text())["digest"]
    assert all(json.loads(s)["data_digest"] for s in before.values())
    assert {json.loads(s)["data_digest"] for r, s in before.items() if r.startswith("synthetic_iid/")} == {old_digest}

    # Touched, same bytes: the digest is made again and no run is trained (the bundle, which a dry run cannot tell
    # from one whose data changed, restores its runs from the store); then nothing is to be done.
    for path in (data / "train").glob("*.json"):
        os.utime(path)
    dry = snakemake(wd, "-n")
    assert job_counts(dry.stdout).get("data_digest") == 1, dry.stdout[-3000:]
    snakemake(wd, "--cores", "2")
    assert summaries(wd) == before
    assert json.loads(digest_file.read_text())["digest"] == old_digest
    logs = "".join(p.read_text() for p in (wd / "results" / "logs" / "bundles").glob("*.log"))
    assert ": 0 trained, 4 restored, 0 failed" in logs, logs[-2000:]
    assert_nothing_to_be_done(snakemake(wd, "-n"))

    # Other bytes, same modification times: exactly the runs of synthetic_iid are trained again.
    shift_labels(data)
    dry = snakemake(wd, "-n")
    counts = job_counts(dry.stdout)
    assert counts.get("data_digest") == 1 and any(n.startswith("train_bundle_") for n in counts), dry.stdout[-3000:]
    assert "synthetic_dataset" not in " ".join(counts)  # the data stays as it was replaced
    snakemake(wd, "--cores", "2")
    after = summaries(wd)
    new_digest = json.loads(digest_file.read_text())["digest"]
    assert new_digest != old_digest
    for run, text in after.items():
        summary = json.loads(text)
        assert summary["numpy_version"] and summary["numba_version"] and "torch" in summary["kernel_isa"]
        if run.startswith("synthetic_iid/"):
            assert summary["data_digest"] == new_digest
            assert summary["final"] != json.loads(before[run])["final"], run
        else:
            assert text == before[run], f"{run} read other data but changed"
    logs = "".join(p.read_text() for p in (wd / "results" / "logs" / "bundles").glob("*.log"))
    assert ": 2 trained, 2 restored, 0 failed" in logs, logs[-2000:]  # synthetic_1_1's runs: from the store
    runs_csv = (wd / "results" / "runs.csv").read_text()
    assert new_digest in runs_csv and old_digest not in runs_csv
    table = (wd / "results" / "tables" / "table1.md").read_text()
    assert f"synthetic_iid {new_digest}" in table, table[-1500:]
    assert_nothing_to_be_done(snakemake(wd, "-n"))
