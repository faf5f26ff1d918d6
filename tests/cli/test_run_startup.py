"""What a compiled run loads from numba's cache before its first round: the training kernel its algorithm trains with
(:attr:`upfl.algorithms.base.Algorithm.solver_entry`), not every kernel; the results are those of a run that loaded
every kernel. Each run is a fresh process (a process keeps what it loaded). Timings: benchmarks/startup.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from upfl.data import generate_synthetic  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

LOADED = """
import json, sys
from upfl.engine import simulation
from upfl.solvers.numba_backend import solver, training
from upfl import config as cfgmod
entries = json.loads(sys.argv[4])
if entries is not None:
    solver.warm_up(1, tuple(entries))
doc = {"data": {"path": sys.argv[1]}, "algorithm": {"name": sys.argv[2]}, "rounds": 6, "seed": 2, "threads": 1,
       "devices": {"frac": 0.5, "straggler": 0.5}, "solver": {"backend": "numba", "epochs": 2, "batch_size": 8}}
if sys.argv[2] == "fedprox":
    doc["algorithm"]["mu"] = 1.0
cfg = cfgmod.from_dict(doc)
data = simulation.load_leaf(sys.argv[1])
sim = simulation.Simulation(cfgmod.validate(cfg), data, simulation.resolve_device("cpu"))
before_round = {name: len(getattr(training, name).overloads) for name in
                ("solve_devices_serial", "personal_devices_serial", "solve_devices", "personal_devices")}
simulation.run(cfg, sys.argv[3], log=lambda line: None, data=data)
print("LOADED=" + json.dumps(before_round))
"""


def loaded_before_first_round(data: Path, algorithm: str, out: Path, entries=None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NUMBA_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, str(data), algorithm, str(out), json.dumps(entries)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("LOADED=")[-1])


def metrics_without_wall_time(out: Path) -> list[list[str]]:
    rows = [line.split(",") for line in (out / "metrics.csv").read_text().splitlines()]
    drop = {rows[0].index("wall_s"), rows[0].index("cum_wall_s")}
    return [[v for j, v in enumerate(row) if j not in drop] for row in rows]


@pytest.mark.parametrize(
    "algorithm, entry, other",
    [
        ("fedprox", "solve_devices_serial", "personal_devices_serial"),
        ("upcycled_pfedme", "personal_devices_serial", "solve_devices_serial"),
    ],
)
def test_a_compiled_run_loads_only_the_training_kernel_its_algorithm_uses(tmp_path, algorithm, entry, other):
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=1, num_devices=6)
    loaded = loaded_before_first_round(data, algorithm, tmp_path / "lean")
    assert loaded[entry] == 1 and loaded[other] == 0, loaded
    assert loaded["solve_devices"] == loaded["personal_devices"] == 0, loaded  # one thread: no parallel kernels
    every = loaded_before_first_round(data, algorithm, tmp_path / "every", ["local_solve", "personal_solve"])
    assert every["solve_devices_serial"] == every["personal_devices_serial"] == 1, every
    assert metrics_without_wall_time(tmp_path / "lean") == metrics_without_wall_time(tmp_path / "every")


def test_warm_up_names_an_unknown_entry():
    from upfl.solvers.numba_backend import warm_up

    with pytest.raises(ValueError, match="unknown solver entries \\['solve'\\]"):
        warm_up(1, ("solve",))


def test_a_built_in_command_line_does_not_import_the_other_sub_commands(tmp_path):
    probe = (
        "import sys\nfrom upfl.cli import main\nmain(['stats', sys.argv[1]])\n"
        "print('OTHERS=' + str(sorted(m for m in sys.modules if m.startswith('upfl.commands.'))))"
    )
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=1, num_devices=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(data)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OTHERS=[]" in proc.stdout


def test_the_parser_without_sub_command_modules_parses_a_run_as_the_full_one():
    from upfl.cli import build_parser, names_built_in_command

    argv = ["run", "--data", "d", "--out", "o", "--mu", "1", "--set", "privacy.sigma=0.8"]
    assert names_built_in_command(argv) and not names_built_in_command(["--help", "run"])
    assert not names_built_in_command(["report", "--help"])
    assert vars(build_parser(commands=False).parse_args(argv)) == vars(build_parser().parse_args(argv))


TARGET_PROBE = """
import json, sys
from upfl.cli import main
rc = main(sys.argv[1:])
target = ("numba.np.arraymath", "numba.np.linalg", "scipy.linalg")
print("TARGET=" + json.dumps({"rc": rc, "imported": [m for m in target if m in sys.modules]}))
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_a_compiled_run_from_the_cache_loads_no_registries_of_numbas_cpu_target(tmp_path, threads):
    """Kernels read from numba's cache need its runtime, not its CPU target's implementations (``numba.np.linalg``,
    ``arraymath``: they import scipy.linalg); the second run of each thread count loads every kernel from the cache
    and writes the first one's metrics."""
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=1, num_devices=6)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NUMBA_NUM_THREADS": "2"}
    outs = []
    for attempt in ("first", "cached"):
        out = tmp_path / attempt
        argv = [
            "run",
            "--data",
            str(data),
            "--algorithm",
            "fedprox",
            "--mu",
            "1",
            "--rounds",
            "4",
            "--frac",
            "0.5",
            "--threads",
            str(threads),
            "--out",
            str(out),
        ]
        proc = subprocess.run(
            [sys.executable, "-c", TARGET_PROBE, *argv], env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append((out, json.loads(proc.stdout.split("TARGET=")[-1])))
    assert outs[1][1] == {"rc": 0, "imported": []}, outs[1][1]
    assert metrics_without_wall_time(outs[0][0]) == metrics_without_wall_time(outs[1][0])


def test_upfl_run_as_a_command_ends_without_teardown_and_keeps_its_output_and_status(tmp_path):
    """``python -m upfl.cli run`` ends through :func:`upfl.startup.exit_now`: its piped output is all there, its
    files written, its exit status that of the command (0 done, 2 bad input)."""
    data = generate_synthetic("synthetic_1_1", tmp_path / "data", data_seed=1, num_devices=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NUMBA_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "upfl.cli", "run", "--data", str(data), "--rounds", "2", "--out", str(tmp_path / "o")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("final iteration 2: train_acc ")
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["final"]["iteration"] == 2
    bad = subprocess.run(
        argv[:-2] + ["--out", str(tmp_path / "o"), "--frac", "2"], env=env, capture_output=True, text=True, timeout=600
    )
    assert bad.returncode == 2 and "upfl run: error: " in bad.stderr, bad.stderr[-3000:]


def test_paused_gc_restores_the_collector_as_it_was():
    import gc

    from upfl.startup import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_gc_freezes_only_in_a_one_command_process():
    """``paused_gc(freeze=True)`` moves what is alive out of the collector's sight only where the process is one
    command line ending through exit_now; called from a test (or a library user) it freezes nothing."""
    import gc

    from upfl.startup import ONE_COMMAND, paused_gc

    gc.unfreeze()  # what an earlier test's bundle (upfl run-many freezes its objects before each run) left frozen
    assert gc.get_freeze_count() == 0 and not ONE_COMMAND["process"]
    with paused_gc(freeze=True):
        pass
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    ONE_COMMAND["process"] = True
    try:
        with paused_gc(freeze=True):
            kept = [object()]
        assert gc.get_freeze_count() > 0 and gc.isenabled() and kept
    finally:
        ONE_COMMAND["process"] = False
        gc.unfreeze()
