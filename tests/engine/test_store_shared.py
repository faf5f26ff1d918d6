"""A store shared by several processes (two workflows, a cluster sharing results/finished): saving one entry at
once never fails, never leaves a folder behind, and the entry ends whole and verified."""

import json
import subprocess
import sys
import time
from pathlib import Path

from upfl.engine import store

IDENT = {"config_hash": "c" * 16, "data_fingerprint": "d" * 16, "code_fingerprint": "e" * 16}
SAVER = """
import sys
import time
from pathlib import Path
from upfl.engine import store
ident = {"config_hash": "c" * 16, "data_fingerprint": "d" * 16, "code_fingerprint": "e" * 16}
entry, run = Path(sys.argv[1]), Path(sys.argv[2])
time.sleep(max(0.0, float(sys.argv[4]) - time.time()))  # both start saving together
for _ in range(int(sys.argv[3])):
    store.save(entry, run, ident)
print("saved")
"""


def a_run(folder: Path, seconds: float) -> Path:
    """A run folder: the same numbers, another timing (two trainings of one run differ only there)."""
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("iteration,train_acc\n0,0.5\n1,0.75\n")
    (folder / "summary.json").write_text(json.dumps({"final": {"train_acc": 0.75}, "time": {"total_s": seconds}}))
    return folder


def test_two_processes_saving_one_entry_hundreds_of_times(tmp_path):
    st = tmp_path / "finished"
    entry = store.entry_path(st, IDENT)
    runs = [a_run(tmp_path / f"run{i}", seconds=1.0 + i) for i in range(2)]
    start = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SAVER, str(entry), str(run), "800", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run in runs
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "saved", err[-3000:]
    assert sorted(p.name for p in st.iterdir()) == [entry.name], "a temporary or moved-aside folder was left"
    files = store.verified_files(entry, IDENT)
    assert files["summary.json"] in {(r / "summary.json").read_bytes() for r in runs}


def test_a_damaged_entry_is_replaced_by_the_next_save(tmp_path):
    st = tmp_path / "finished"
    entry = store.entry_path(st, IDENT)
    run = a_run(tmp_path / "run", seconds=1.0)
    store.save(entry, run, IDENT)
    (entry / "metrics.csv").write_text("iteration,train_acc\n0,0.9\n")
    store.save(entry, run, IDENT)
    assert store.verified_files(entry, IDENT)["metrics.csv"] == (run / "metrics.csv").read_bytes()
    assert sorted(p.name for p in st.iterdir()) == [entry.name]
