"""Claims across data draws: the Upcycled-FL minus FedProx gain on the paper's draw beside our fresh draws.

The draws experiment runs Table 1's synthetic grid on fresh generator draws (``data_seed`` 0-4) of each
generator setting; each draw is its own data set (``synthetic_1_1_draw3``). A run's generator setting and
draw are read from its data folder's ``meta.json`` (``name``, ``data_seed``, written by ``upfl synth``), or,
without one, from a ``<setting>_draw<k>`` data set name. Each draw's gain is paired on seed (same seed, same
device draws) with a 95% t interval, exactly as Table 1's claim columns (:func:`upfl.report.tables.claim_columns`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from .collect import ReportError
from .paper import dataset_label, dataset_order, table1_value
from .tables import ACC, table1_frame

DRAW_NAME = re.compile(r"^(?P<setting>.+)_draw(?P<draw>\d+)$")


def draw_of(dataset: str, data_path: Any) -> tuple[str, int]:
    """(generator setting, data seed) of a draw data set, from its meta.json or its ``_draw<k>`` name."""
    meta = Path(str(data_path)) / "meta.json" if isinstance(data_path, str) and data_path else None
    if meta is not None and meta.is_file():
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ReportError(f"{meta}: not valid JSON: {e}") from None
        if "name" in doc and "data_seed" in doc:
            return str(doc["name"]), int(doc["data_seed"])
    m = DRAW_NAME.match(dataset)
    if not m:
        raise ReportError(f"draws: data set {dataset!r} has no meta.json with 'name' and 'data_seed' and is not "
                          f"named <setting>_draw<k>; cannot tell its generator setting")
    return m.group("setting"), int(m.group("draw"))


def draw_gains(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per generator setting x draw x mu x metric: the paired Upcycled-FL minus FedProx gain.

    Columns: setting, dataset, draw (data seed), mu, metric, n_pairs, gain_mean, gain_ci_low, gain_ci_high.
    """
    if runs.empty:
        raise ReportError("draws: no runs")
    frame = table1_frame(runs)
    if "n_pairs" not in frame.columns:
        raise ReportError("draws: no FedProx / Upcycled-FL pairs with the same data set and mu")
    paths = runs.groupby("dataset")["data_path"].first().to_dict() if "data_path" in runs.columns else {}
    rows = []
    for r in frame[(frame["algorithm"] == "upcycled") & frame["n_pairs"].notna()].to_dict("records"):
        setting, draw = draw_of(r["dataset"], paths.get(r["dataset"]))
        for key in ACC:
            rows.append({"setting": setting, "label": dataset_label(setting), "dataset": r["dataset"], "draw": draw,
                         "mu": r["mu"], "metric": key, "n_pairs": int(r["n_pairs"]),
                         "gain_mean": r[f"{key}_gain_mean"], "gain_ci_low": r[f"{key}_gain_ci_low"],
                         "gain_ci_high": r[f"{key}_gain_ci_high"]})
    if not rows:
        raise ReportError("draws: no FedProx / Upcycled-FL pairs with the same data set and mu")
    out = pd.DataFrame(rows)
    order = {s: i for i, s in enumerate(dataset_order(out["setting"]))}
    out["_o"] = out["setting"].map(order)
    return out.sort_values(["_o", "mu", "metric", "draw"]).drop(columns="_o").reset_index(drop=True)


def spread(gains: pd.DataFrame, setting: str, mu: float, metric: str) -> dict[str, Any] | None:
    """The spread of one claim across draws: number of draws, min and max of their mean gains, and how many
    draws' intervals lie above 0 and below 0. None when the setting has no draws at this mu."""
    sub = gains[(gains["setting"] == setting) & (gains["metric"] == metric)
                & ((gains["mu"].astype(float) - float(mu)).abs() < 1e-12)]
    if sub.empty:
        return None
    means = sub["gain_mean"].astype(float)
    return {"draws_n": len(sub), "draws_min": float(means.min()), "draws_max": float(means.max()),
            "draws_above_zero": int((sub["gain_ci_low"].astype(float) > 0).sum()),
            "draws_below_zero": int((sub["gain_ci_high"].astype(float) < 0).sum()),
            "draws_pairs": " ".join(str(int(n)) for n in sub["n_pairs"])}


def paper_gain(setting: str, mu: float, metric: str) -> float:
    """The paper's Table 1 gain (Upcycled-FL minus FedProx, percentage points) for a setting and mu, or NaN."""
    up, prox = table1_value(setting, "upcycled", mu), table1_value(setting, "fedprox", mu)
    if up is None or prox is None:
        return math.nan
    i = ACC.index(metric)
    return up[i] - prox[i]
