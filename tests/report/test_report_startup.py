"""Start-up guards of the report commands (the pipeline runs one report job per table or figure): each ``upfl report``
job imports only what it uses.

Every command runs in a fresh Python process, as a Snakemake job does, and lists the heavy packages it
imported: no torch and no seaborn in any report command, matplotlib only in figure rendering, and no scipy where
the confidence intervals span at most 30 degrees of freedom (their t quantiles are upfl.report.stats.T95).
Timings are the benchmark's job (benchmarks/report_startup.py), not these tests'.
"""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from upfl import config as cfgmod
from upfl.data import generate_synthetic
from upfl.engine.simulation import run

HEAVY = ("torch", "scipy", "seaborn", "matplotlib", "dp_accounting")
"""Packages no report command imports, but figure rendering (matplotlib)."""
TABLES = ("numpy", "pandas")
"""What every report command needs; ``upfl --help`` does not."""


def run_upfl(argv: list[str], cwd) -> tuple[int, list[str], str | None, str]:
    """``upfl ARGV`` in a fresh interpreter: exit status, the heavy packages it imported, the matplotlib backend
    (None without pyplot) and the output."""
    code = (
        "import json, sys\n"
        "from upfl.cli import main\n"
        "try:\n"
        "    rc = main(json.loads(sys.argv[1]))\n"
        "except SystemExit as e:\n"
        "    rc = e.code\n"
        "backend = sys.modules['matplotlib'].get_backend() if 'matplotlib.pyplot' in sys.modules else None\n"
        f"heavy = [m for m in {HEAVY + TABLES + ('PIL', 'tqdm')!r} if m in sys.modules]\n"
        "print('STARTUP=' + json.dumps({'rc': rc or 0, 'heavy': heavy, 'backend': backend}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], cwd=cwd, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("STARTUP=")), None)
    assert line is not None, f"upfl {' '.join(argv)} crashed:\n{proc.stdout}\n{proc.stderr}"
    info = json.loads(line.split("=", 1)[1])
    return info["rc"], info["heavy"], info["backend"], proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two seeds of FedAvg, FedProx and Upcycled-FL on a 6-device Synthetic(1,1), and their runs.csv."""
    root = tmp_path_factory.mktemp("startup")
    data = str(generate_synthetic("synthetic_1_1", root / "synthetic_1_1", data_seed=0, num_devices=6))
    specs = []
    for alg, rounds, mu, lam in (("fedavg", 4, 0.0, None), ("fedprox", 4, 1.0, None), ("upcycled", 8, 1.0, 0.43)):
        for seed in (0, 1):
            algorithm = {"name": alg, "mu": mu, **({"lam": lam} if lam is not None else {})}
            doc = {
                "data": {"path": data},
                "rounds": rounds,
                "seed": seed,
                "threads": 1,
                "algorithm": algorithm,
                "devices": {"frac": 0.5, "straggler": 0.5},
                "solver": {"epochs": 2},
                "checkpoint": {"every": 0},
            }
            out = root / "runs" / f"{alg}_s{seed}"
            run(cfgmod.from_dict(doc), out, log=lambda *a: None)
            specs.append(f"table1:{out}")
    csv = root / "runs.csv"
    rc, heavy, _, text = run_upfl(["report", "runs", "--out", str(csv), *specs], root)
    assert rc == 0, text
    return {"root": root, "data": data, "csv": csv, "specs": specs, "runs_heavy": heavy}


def test_report_runs_imports_no_torch_no_plotting(results):
    assert set(results["runs_heavy"]).isdisjoint(HEAVY)
    df = pd.read_csv(results["csv"])
    assert len(df) == 6 and set(df["algorithm"]) == {"fedavg", "fedprox", "upcycled"}


@pytest.mark.parametrize("command, writes", [("table1", (".csv", ".md", ".tex")), ("time", (".csv", ".md"))])
def test_table_commands_import_no_torch_no_plotting(results, command, writes):
    prefix = results["root"] / "tables" / command
    rc, heavy, _, text = run_upfl(
        ["report", command, "--runs", str(results["csv"]), "--experiment", "table1", "--out-prefix", str(prefix)],
        results["root"],
    )
    assert rc == 0, text
    assert set(heavy).isdisjoint(HEAVY)
    assert all(prefix.with_name(command + ext).is_file() for ext in writes)


def test_table2_imports_no_torch_no_plotting(results):
    prefix = results["root"] / "tables" / "table2"
    rc, heavy, _, text = run_upfl(
        ["report", "table2", "--out-prefix", str(prefix), str(results["data"])], results["root"]
    )
    assert rc == 0, text
    assert set(heavy).isdisjoint(HEAVY)
    assert pd.read_csv(prefix.with_suffix(".csv"), comment="#")["devices"].tolist()[0] == 6


def test_figure_command_draws_on_agg_without_torch_nor_seaborn(results):
    prefix = results["root"] / "figures" / "convergence"
    rc, heavy, backend, text = run_upfl(
        [
            "report",
            "figure",
            "convergence",
            "--runs",
            str(results["csv"]),
            "--experiment",
            "table1",
            "--out-prefix",
            str(prefix),
        ],
        results["root"],
    )
    assert rc == 0, text
    assert "matplotlib" in heavy and set(heavy).isdisjoint({"torch", "seaborn", "scipy"})
    assert backend.lower() == "agg"
    assert prefix.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_as_a_command_ends_without_teardown_and_keeps_its_output_and_status(results):
    """``python -m upfl.cli report ...`` ends through :func:`upfl.startup.exit_now`: its piped output is all there,
    its files written whole, its exit status that of the command (0 done, 2 a report error)."""
    prefix = results["root"] / "tables" / "exit_table1"
    argv = [sys.executable, "-m", "upfl.cli", "report", "table1", "--runs", str(results["csv"]), "--out-prefix"]
    done = subprocess.run([*argv, str(prefix), "--experiment", "table1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"wrote {prefix}.")
    assert pd.read_csv(f"{prefix}.csv", comment="#").shape[0] > 0
    assert "Provenance: upfl " in Path(f"{prefix}.md").read_text().rstrip().splitlines()[-1]
    bad = subprocess.run([*argv, str(prefix), "--experiment", "nosuch"], capture_output=True, text=True)
    assert bad.returncode == 2 and "upfl report table1: error: experiment 'nosuch'" in bad.stderr, bad.stderr


def test_deferred_font_subsetting_loads_when_a_figure_embeds_type42_fonts(tmp_path):
    """The figures' PDFs embed Type 3 fonts, so fontTools' subsetter is deferred (upfl.report.theme); a PDF that
    embeds Type 42 fonts, which subsets them, still gets it on first use."""
    code = (
        "import sys\n"
        "from upfl.report.theme import pyplot\n"
        "plt = pyplot()\n"
        "deferred = sys.modules['fontTools.subset']\n"
        "fig = plt.figure()\n"
        "fig.text(0.5, 0.5, 'Upcycled-FL')\n"
        "fig.savefig(sys.argv[1] + '.3.pdf')\n"
        "print('after type 3:', type(deferred).__name__)\n"
        "plt.rcParams['pdf.fonttype'] = 42\n"
        "fig.savefig(sys.argv[1] + '.42.pdf')\n"
        "print('after type 42:', type(deferred).__name__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["after", "type", "3:", "_LazyModule", "after", "type", "42:", "module"]
    assert b"/FontFile2" in (tmp_path / "f.42.pdf").read_bytes()
    assert b"/FontFile2" not in (tmp_path / "f.3.pdf").read_bytes()


def test_every_report_module_imports_without_torch_or_plotting(tmp_path):
    """The modules behind privacy-table, claims, ablation-table, sensitivity and draws (and the public API of
    ``upfl.report`` and ``upfl.privacy``) import neither torch nor matplotlib, seaborn, scipy or dp-accounting."""
    code = (
        "import sys\n"
        "import upfl.commands.report, upfl.report, upfl.privacy\n"
        "from upfl.report import ablations, claims, collect, fresh_data_sets, figures\n"
        "from upfl.report import privacy_tradeoff, protocol_gap, sensitivity\n"
        "from upfl.report import tables, timing\n"
        "from upfl.report import convergence_figure, privacy_tradeoff_figure, write_privacy_table\n"
        "from upfl.privacy import clip_to_norm, output_epsilons, privacy_report\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"], ["report", "figure", "--help"]])
def test_help_imports_no_torch_nor_numpy(tmp_path, argv):
    """The parser of every command (``upfl data`` included) is built from the standard library and pyyaml."""
    rc, heavy, _, text = run_upfl(argv, tmp_path)
    assert rc == 0 and "usage: upfl" in text
    assert heavy == []


def test_torch_free_algorithm_keys_equal_the_registry():
    """upfl.names mirrors each algorithm class's ``keys`` (the report's algorithm_options column)."""
    from upfl.algorithms import ALGORITHMS
    from upfl.names import ALGORITHM_KEYS

    assert {name: cls.keys for name, cls in ALGORITHMS.items()} == ALGORITHM_KEYS
