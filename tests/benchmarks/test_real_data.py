"""benchmarks/real_data.py --paper-sized cannot rot: one round of each real-data model on stand-ins of the paper's
device sizes (shrunk here), with its FLOPs and its ratio to the measured floor; FEMNIST's sizes without the authors'
index where it is absent."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_data  # noqa: E402
from upfl.data import load_leaf  # noqa: E402
from upfl.models import build_model  # noqa: E402


def test_paper_sized_rounds_run_for_every_model_without_the_femnist_index(tmp_path):
    out, cache = tmp_path / "real_data.json", tmp_path / "round_costs.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "real_data.py"), "--only-paper-sized", "--scale", "0.01"]
    cmd += ["--epochs", "2", "--threads", "1", "--resources", str(tmp_path / "no_index"), "--out", str(out)]
    env = {**os.environ, "UPFL_ROUND_COSTS": str(cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())["round_paper_sized"]
    assert result["sizes"]["femnist"].startswith("table2_shape")
    assert result["floor"]["floor_flops_per_s"] > 1e9
    for name, devices in (("mlp", 50), ("cnn", 50), ("lstm", 52)):
        row = result[name]
        assert row["num_devices"] == devices
        r = row["auto"]
        assert r["devices"] > 0 and r["local_steps_summed_over_devices"] > 0
        steps, batch = r["local_steps_summed_over_devices"], r["batch_size"]  # a batch no larger than a device
        assert r["train_flops"] == r["train_flops_per_sample"] * steps * batch and 1 <= batch <= 32
        assert r["train_cpu_s"] > 0 and r["train_over_floor"] > 0.5  # no model beats the FMA units
        assert r["train_over_floor"] == r["train_cpu_s"] * result["floor"]["floor_flops_per_s"] / r["train_flops"]
    assert not cache.exists()  # a shrunk round is not this machine's cost


def test_flop_counts_follow_the_layers(tmp_path):
    femnist = load_leaf(real_data.femnist_shaped(tmp_path / "f", devices=3, sizes=[5, 5, 5]))
    mlp = build_model("mlp", femnist)
    forward = 2 * (784 * 196 + 196 * 10)
    assert real_data.evaluation_flops_per_sample(mlp) == forward
    assert real_data.training_flops_per_sample(mlp) == 3 * forward - 2 * 784 * 196  # no gradient into the images
    cnn = build_model("cnn", femnist)
    conv, fcs = 2 * 9 * 3 * 784, 2 * (2352 * 1000 + 1000 * 100 + 100 * 10)
    assert real_data.training_flops_per_sample(cnn) == 2 * conv + 3 * fcs
    sent = load_leaf(real_data.sent140_shaped(tmp_path / "s", devices=3, sizes=[5, 5, 5]))
    lstm = build_model("lstm", sent)
    step = 2 * 4 * 128 * (300 + 128) + 2 * 4 * 128 * (128 + 128)
    assert real_data.evaluation_flops_per_sample(lstm) == 25 * step + 2 * 128 * 2
    assert real_data.training_flops_per_sample(lstm) == 3 * (25 * step + 2 * 128 * 2) - 25 * 2 * 4 * 128 * 300
