"""upfl.names: the torch-free home of the algorithm names, and the parse-time side that must stay torch-free."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from upfl import config as cfgmod
from upfl import names
from upfl.algorithms import ALGORITHMS, algorithm_names, build_algorithm
from upfl.errors import AlgorithmPrivacyError, ConfigError
from upfl.report.collect import effective_coefficient

ROOT = Path(__file__).resolve().parents[1]


def test_the_registry_holds_a_class_for_every_base_name_and_no_other():
    """Each class's keys, mu and privacy, filled from names, are tested against what its code does in
    tests/algorithms/test_algorithms.py (test_every_key_an_algorithm_declares_changes_its_training)."""
    assert list(ALGORITHMS) == list(names.BASE_ALGORITHMS)
    assert all(cls.name == base for base, cls in ALGORITHMS.items())
    assert algorithm_names() == names.algorithm_names()


def test_base_and_upcycled_names_round_trip():
    assert names.base_name("upcycled") == "fedprox"
    assert names.base_name("upcycled_scaffold") == "scaffold"
    assert names.base_name("fedavgm") == "fedavgm"
    for base in names.BASE_ALGORITHMS:
        up = names.upcycled_name(base)
        assert names.is_upcycled(up) and not names.is_upcycled(base)
        assert names.base_name(up) == base and up in names.algorithm_names()
    assert not names.is_known("upcycled_fedprox") and not names.is_known("fedsgd")


@pytest.mark.parametrize("name", ["fedprox", "upcycled", "upcycled_feddyn", "pfedme", "upcycled_pfedme"])
def test_training_iterations_match_the_algorithm_objects(name):
    """Algorithm 2: upcycled names train at odd t only; bases at every t. The loop asks the object, the
    privacy accountant and the bundle planner ask names: the two agree."""
    doc = {
        "data": {"path": "x"},
        "algorithm": {"name": name, "mu": 1.0 if names.uses_mu(names.base_name(name)) else 0.0},
    }
    if names.is_upcycled(name):
        doc["algorithm"]["lam"] = 0.5
    alg = build_algorithm(cfgmod.from_dict(doc), 3, 4, 5)
    expected = [not names.is_upcycled(name) or t % 2 == 1 for t in range(1, 11)]
    assert [alg.trains(t) for t in range(1, 11)] == expected
    assert [names.is_training_iteration(name, t) for t in range(1, 11)] == expected


@pytest.mark.parametrize(
    "name, alg, expected",
    [
        ("upcycled", {"mu": 1.0, "lam": 0.43}, 1.0 / 1.43),
        ("upcycled_feddyn", {"alpha": 0.1, "lam": 0.3}, 0.1 / 0.4),
        ("upcycled_fedavgm", {"mu": 0.5, "step": 0.2}, 0.2),
        ("upcycled_fedavg", {"lam": 1.0, "step": None}, 0.0),
    ],
)
def test_even_step_coefficient_is_one_value_for_engine_report_and_flower(name, alg, expected):
    """c_1 of Eq. (5) (mu/(mu+lambda), FedDyn's alpha as its mu, or ``step``), as the engine, the report and
    the Flower strategy compute it."""
    doc = {"data": {"path": "x"}, "algorithm": {"name": name, **alg}}
    cfg = cfgmod.from_dict(doc)
    engine = build_algorithm(cfg, 3, 4, 5).c1
    report = effective_coefficient(json.loads(json.dumps(cfgmod.to_dict(cfg)))["algorithm"])
    assert engine == report == pytest.approx(expected, abs=0, rel=1e-15)


@pytest.mark.parametrize("base, mu, step", [("fedprox", 0.5, 0.3), ("fedprox", 1.0, 0.7), ("fedavgm", 0.2, 0.9)])
def test_the_equivalent_lambda_gives_the_step_back(base, mu, step):
    """lambda = mu (1 - step) / step is the lambda whose mu / (mu + lambda) is the step (Eq. (5))."""
    lam = names.equivalent_lambda(base, mu, step)
    assert lam is not None and lam > 0
    assert names.even_step_coefficient(mu, lam) == pytest.approx(step, rel=1e-12)


@pytest.mark.parametrize("base, mu, step", [("fedavg", 0.0, 0.5), ("feddyn", 0.1, 0.5), ("fedprox", 0.0, 0.5)])
def test_no_equivalent_lambda_without_a_proximal_mu(base, mu, step):
    assert names.equivalent_lambda(base, mu, step) is None


@pytest.mark.parametrize("mu, lam", [(1.0, 0.43), (0.0, 1.0), (0.01, 0.3)])
def test_flower_strategy_takes_the_engines_coefficient(mu, lam):
    pytest.importorskip("flwr", reason="the flower extra is not installed (pip install -e '.[flower]')")
    from flwr.serverapp.strategy import FedAvg, FedProx

    from upfl.flower.strategy import UpcycledFL

    name = "upcycled" if mu > 0 else "upcycled_fedavg"
    cfg = cfgmod.from_dict({"data": {"path": "x"}, "algorithm": {"name": name, "mu": mu, "lam": lam}})
    base = FedProx(proximal_mu=mu) if mu > 0 else FedAvg()
    assert UpcycledFL(base, lam=lam).c1 == build_algorithm(cfg, 3, 4, 5).c1


def test_privacy_refusals_name_the_key_and_reason():
    with pytest.raises(
        AlgorithmPrivacyError,
        match=r"privacy.mechanism: output perturbation is not supported for "
        r"upcycled_scaffold: the device also releases",
    ):
        cfgmod.from_dict(
            {
                "data": {"path": "x"},
                "algorithm": {"name": "upcycled_scaffold", "lam": 1.0},
                "privacy": {"mechanism": "output", "tau": 1.0, "sigma": 1.0},
            }
        )
    with pytest.raises(ConfigError, match="algorithm.mu: fedavg has no proximal term"):
        cfgmod.from_dict({"data": {"path": "x"}, "algorithm": {"name": "fedavg", "mu": 1.0}})
    assert issubclass(cfgmod.ConfigError, ValueError) and cfgmod.ConfigError is ConfigError


PARSE_SIDE = """
import json, sys
import yaml
from upfl.pipeline.bundles import form_bundles
from upfl.pipeline.plan import build_plan
config = yaml.safe_load(open(sys.argv[1]))
runs = build_plan(config).runs
bundles = form_bundles(runs)
print(json.dumps({"runs": len(runs), "bundles": len(bundles), "torch": "torch" in sys.modules}))
"""


def test_planning_the_full_config_imports_no_torch():
    """What the workflow does at parse time (every run config of the full grid validated, bundles formed) in a
    fresh interpreter, as Snakemake and each cluster job do: torch is never imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PARSE_SIDE, str(ROOT / "config" / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["runs"] > 100 and out["bundles"] >= 1
    assert out["torch"] is False


def import_graph() -> dict[str, set[str]]:
    """Every ``upfl`` module -> the ``upfl`` modules it imports (at the top or inside a function)."""
    import ast

    src = Path(__file__).resolve().parents[1] / "src"
    modules = {}
    for path in (src / "upfl").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    edges.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan): each a set of nodes that import each
    other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """No module imports one that (through others) imports it back."""
    graph = import_graph()
    assert len(graph) > 60 and "upfl.engine.simulation" in graph["upfl.cli"] | graph["upfl.pipeline.bundle_trainer"]
    assert not circles(graph), f"import circles: {circles(graph)}"


def test_no_folder_loop():
    """Folders (and top-level modules) of upfl import each other without a loop: collapsed to its first name below
    ``upfl``, the import graph is acyclic (pipeline -> report -> engine, never back)."""
    folders: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        here = module.split(".")[1] if "." in module else module
        folders.setdefault(here, set()).update(
            there for there in (m.split(".")[1] if "." in m else m for m in imported) if there != here
        )
    loops = circles(folders)
    assert {"pipeline", "report", "engine"} <= set(folders) and not loops, f"folder loops: {loops}"
