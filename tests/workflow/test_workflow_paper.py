"""The paper's released synthetic sets through the workflow: `sources.paper` points at a 127.0.0.1 server of small
upstream-shaped files this test writes; the DAG fetches them (checked), converts them and makes a tiny Table 1 and
Table 2 from them."""

import json
import os

import numpy as np
import pytest
import yaml

from fixtures_leaf import ArchiveServer
from fixtures_paper import make_paper_mirror
from fixtures_workflow import assert_nothing_to_be_done, job_counts, snakemake, workflow_copy
from upfl.data.leaf import load_leaf
from upfl.data.sources import SOURCES
from upfl.files import sha256_file

pytestmark = pytest.mark.workflow

SETS = ["synthetic_iid", "synthetic_1_1"]

TINY = """\
preset: full
seeds: [0]
run_defaults:
  device: cpu
  solver: {epochs: 2, batch_size: 8, lr: 0.05, momentum: 0.5}
  devices: {frac: 0.5}
  evaluation: {every: 1}
  checkpoint: {every: 1}
datasets:
  synthetic_iid: {source: paper}
  synthetic_1_1: {source: paper}
  paper_one_one: {source: paper, setting: synthetic_1_1}
experiments:
  table1:
    set: {devices.straggler: 0.5}
    groups:
      - datasets: [synthetic_iid, synthetic_1_1]
        runs:
          - {algorithm: fedavg, rounds: 2}
          - {algorithm: fedprox, rounds: 2, mu: 1}
          - {algorithm: upcycled, rounds: 4, mu: 1, lam: 0.43}
    outputs:
      - {kind: table1, name: table1}
  other_name:
    groups:
      - datasets: [paper_one_one]
        seeds: [1]
        runs:
          - {algorithm: fedprox, rounds: 2, mu: 1}
"""


def test_paper_sets_fetched_checked_converted_and_tabled(tmp_path):
    mirror = tmp_path / "mirror"
    files = make_paper_mirror(mirror, sets=SETS, devices=4)
    served = {"/m/" + str(p.relative_to(mirror)): p.read_bytes() for p in files.values()}
    wd = workflow_copy(tmp_path)
    (wd / "config" / "config.yaml").write_text(TINY)
    with ArchiveServer(served) as srv:
        sources = {"paper": {"url": f"{srv.base}/m/"}}
        sources.update({name: {"sha256": sha256_file(path)} for name, path in files.items()})
        (wd / "config" / "mirror.yaml").write_text(yaml.safe_dump({"sources": sources}))
        dry = snakemake(wd, "-n", "--configfile", "config/config.yaml", "config/mirror.yaml")
        counts = job_counts(dry.stdout)
        assert counts["fetch_paper_set"] == 2 and counts["paper_dataset"] == 3 and "fetch_archive" not in counts
        assert not [rule for rule in counts if rule.startswith("synthetic_dataset")]
        snakemake(wd, "--cores", "2", "--configfile", "config/config.yaml", "config/mirror.yaml")
        requested = sorted(p for p, _ in srv.log.requests)
    assert requested == sorted(served), "each released file fetched once from the mirror"
    for name, path in files.items():
        fetched = wd / "resources" / SOURCES[name].filename
        assert fetched.read_bytes() == path.read_bytes(), name
    for name, setting in (
        ("synthetic_iid", "synthetic_iid"),
        ("synthetic_1_1", "synthetic_1_1"),
        ("paper_one_one", "synthetic_1_1"),
    ):
        ds = load_leaf(wd / "resources" / "data" / "paper" / name)
        assert ds.meta["source"] == "paper" and ds.meta["setting"] == setting and ds.meta["name"] == name
        assert len(ds.users) == 4
    a = load_leaf(wd / "resources" / "data" / "paper" / "synthetic_1_1")
    b = load_leaf(wd / "resources" / "data" / "paper" / "paper_one_one")
    assert all(np.array_equal(a.train_x[u], b.train_x[u]) for u in a.users), "the data set's name does not matter"
    table1 = (wd / "results" / "tables" / "table1.md").read_text()
    assert "Synthetic(iid)" in table1 and "Synthetic(1,1)" in table1
    summaries = sorted(
        str(p.relative_to(wd / "results" / "runs")) for p in (wd / "results" / "runs").rglob("summary.json")
    )
    assert len(summaries) == 2 * 3 + 1 and "paper_one_one/logreg/fedprox/mu1/s0_f0.5/T2/seed1/summary.json" in summaries
    table2 = (wd / "results" / "tables" / "table2.csv").read_text()
    rows = [line for line in table2.splitlines() if not line.startswith("#")]
    for name in ("synthetic_iid", "synthetic_1_1"):
        ds = load_leaf(wd / "resources" / "data" / "paper" / name)
        total = sum(len(ds.train_y[u]) + len(ds.test_y[u]) for u in ds.users)
        line = next(r for r in rows if r.startswith(name + ","))
        assert f",{total}," in line, (name, line)
    meta = json.loads((wd / "resources" / "data" / "paper" / "synthetic_iid" / "meta.json").read_text())
    assert all(f["url"].startswith(srv.base) for f in meta["files"].values())
    again = snakemake(wd, "--cores", "2", "-n", "--configfile", "config/config.yaml", "config/mirror.yaml")
    assert_nothing_to_be_done(again)
    # A released file replaced by other bytes, its modification time kept: the set made from it is made again
    # (its files are a param by their stat signature), and the conversion refuses bytes the checksum does not give.
    released = wd / "resources" / SOURCES[next(n for n in files if "iid" in n)].filename
    st = released.stat()
    content = released.read_bytes()
    released.write_bytes(content[:-1] + bytes([content[-1] ^ 1]))
    os.utime(released, ns=(st.st_atime_ns, st.st_mtime_ns))
    dry = snakemake(wd, "-n", "--configfile", "config/config.yaml", "config/mirror.yaml")
    assert job_counts(dry.stdout).get("paper_dataset") == 1, dry.stdout[-3000:]
    failed = snakemake(wd, "--cores", "2", "--configfile", "config/config.yaml", "config/mirror.yaml", check=False)
    assert failed.returncode != 0
    log = (wd / "results" / "logs" / "data" / "synthetic_iid.log").read_text()
    assert released.name in log and "sha256" in log, log[-2000:]
