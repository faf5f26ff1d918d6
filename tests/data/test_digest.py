"""A data set's digest (upfl.data.digest): made once beside the folder, trusted while the files' stat signature
holds, never when a file was replaced (its modification time kept); the runs' provenance names it and refuses a mix."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from upfl.data import digest as dg
from upfl.engine.checkpoints import data_fingerprint
from upfl.report.collect import ReportError
from upfl.report.render import data_digests, runs_provenance


def make_set(root, labels=(0, 1, 2)):
    for split in ("train", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
        doc = {"users": ["u"], "num_samples": [len(labels)], "user_data": {"u": {"x": [[0.0]] * 3, "y": list(labels)}}}
        (root / split / "data.json").write_text(json.dumps(doc))
    (root / ".snakemake_timestamp").write_text("")  # hidden: not data
    return root


def test_digest_is_written_beside_the_folder_and_read_back(tmp_path):
    data = make_set(tmp_path / "set")
    record = dg.write_digest(data)
    assert dg.digest_path(data) == tmp_path / "set.digest.json"
    assert sorted(record["files"]) == ["test/data.json", "train/data.json"]
    assert dg.recorded_digest(data) == record["digest"] == dg.digest_of(dg.checksums(data))
    assert data_fingerprint(data) == record["digest"]


def test_replaced_bytes_with_the_modification_time_kept_are_never_taken_for_the_record(tmp_path):
    data = make_set(tmp_path / "set")
    record = dg.write_digest(data)
    state = dg.stat_signature(data)
    target = data / "train" / "data.json"
    st = target.stat()
    make_set(data, labels=(1, 2, 0))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns
    assert dg.stat_signature(data) != state
    assert dg.recorded_digest(data) is None  # the record no longer holds
    assert data_fingerprint(data) != record["digest"]  # the files are hashed instead
    assert dg.write_digest(data)["digest"] == data_fingerprint(data)


def test_touched_files_keep_their_digest(tmp_path):
    data = make_set(tmp_path / "set")
    first = dg.write_digest(data)
    os.utime(data / "train" / "data.json")
    assert dg.recorded_digest(data) is None
    assert dg.write_digest(data)["digest"] == first["digest"]


def test_files_signature_notices_a_replaced_source(tmp_path):
    src = tmp_path / "released.json"
    src.write_text("a")
    before = dg.files_signature([str(src)])
    st = src.stat()
    src.write_text("b")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert dg.files_signature([str(src)]) != before
    assert dg.files_signature([str(tmp_path / "missing")]) != before


def test_digest_command_names_a_missing_folder(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "upfl.cli", "data", "digest", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "nowhere: no such data set folder" in proc.stderr
    data = make_set(tmp_path / "set")
    ok = subprocess.run([sys.executable, "-m", "upfl.cli", "data", "digest", str(data)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "set.digest.json").read_text())["digest"] in ok.stdout


def runs_frame(digests):
    return pd.DataFrame(
        {
            "dataset": ["a", "a", "b"],
            "data_digest": digests,
            "run_dir": ["results/runs/a/seed0", "results/runs/a/seed1", "results/runs/b/seed0"],
            "git_commit": ["abc"] * 3,
            "seed": [0, 1, 0],
        }
    )


def test_provenance_names_each_data_sets_digest():
    assert data_digests(runs_frame(["d1", "d1", "d2"])) == {"a": "d1", "b": "d2"}
    assert "data digests a d1, b d2" in runs_provenance(runs_frame(["d1", "d1", "d2"]))


def test_a_table_of_runs_of_two_data_versions_is_an_error_naming_the_runs():
    with pytest.raises(ReportError, match=r"data set a: its runs read 2 versions.*d0: results/runs/a/seed1"):
        runs_provenance(runs_frame(["d1", "d0", "d2"]))


def test_provenance_names_the_environments_only_where_they_differ():
    frame = runs_frame(["d1", "d1", "d2"])
    frame["numpy_version"] = ["2.4.6"] * 3
    frame["kernel_isa"] = ["numba znver3 (avx2 fma); torch AVX2"] * 3
    assert "environments differ" not in runs_provenance(frame)
    frame.loc[2, "numpy_version"] = "2.3.1"
    frame.loc[0, "kernel_isa"] = "numba skylake-avx512 (avx2 fma avx512f); torch AVX512"
    line = runs_provenance(frame)
    assert "environments differ between runs: numpy_version 2.3.1 (1 runs), 2.4.6 (2 runs); kernel_isa" in line
    assert "torch AVX512 (1 runs)" in line


def test_a_run_records_its_libraries_and_the_kernels_instruction_set():
    from upfl.files import ENVIRONMENT_KEYS, provenance

    recorded = provenance()
    assert set(ENVIRONMENT_KEYS) <= set(recorded)
    for key in ("numpy_version", "numba_version", "scipy_version", "dp_accounting_version", "python_version"):
        assert recorded[key] and recorded[key][0].isdigit(), key
    assert recorded["kernel_isa"].startswith("numba ") and "; torch " in recorded["kernel_isa"]
