"""benchmarks/gpu.py cannot rot: its --smoke mode (CPU, tiny data) runs every part and writes the JSON."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_benchmark_smoke_mode_runs_every_part(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["smoke"] and result["device"] == "cpu"
    assert result["w1"]["per_training_round_incl_eval_s"] > 0 and result["w1"]["device"] == "cpu"
    assert set(result["paper_rounds"]) == {"mlp", "cnn", "lstm"}
    assert all(r["train_s"] > 0 for r in result["paper_rounds"].values())
    rows = result["packing"]["mlp"]["by_runs"]
    assert set(rows) == {"1", "2"} and rows["1"]["efficiency"] == 1.0 and rows["2"]["runs_per_hour"] > 0
