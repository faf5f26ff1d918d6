"""Upcycled-FL for Flower (flwr >= 1.42, message API): ``pip install "upfl[flower]"``.

* :class:`UpcycledFL` wraps any Flower strategy (``FedAvg``, ``FedProx``, ``FedAvgM``, ``FedAdam``, ``FedYogi``,
  ``FedAdagrad``, ...): odd rounds are the base strategy's; every even round sends **no message** to any node
  and sets the global arrays to w + c (w - w_prev) (Eq. 5) on the server.
* :func:`make_client_app` / :func:`make_server_app` build a ClientApp and a ServerApp that train
  :mod:`upfl.models` on a LEAF-format data set (one device per node) with ``upfl run``'s local solver
  semantics, configured by the flat run-config keys of :data:`RUN_CONFIG_KEYS` (``strategy`` picks one of
  :data:`FLOWER_STRATEGIES`). The server reads no client data: its held-out test split only; the clients report
  their own training metrics.
"""

try:
    import flwr  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("upfl.flower needs Flower: pip install 'upfl[flower]' (flwr[simulation] 1.42 or newer)") from e

from .apps import (
    FLOWER_STRATEGIES,
    RUN_CONFIG_KEYS,
    local_update,
    make_client_app,
    make_server_app,
    run_config_to_upfl,
    strategy_for,
)
from .strategy import CountingGrid, UpcycledFL

__all__ = [
    "CountingGrid",
    "FLOWER_STRATEGIES",
    "RUN_CONFIG_KEYS",
    "UpcycledFL",
    "local_update",
    "make_client_app",
    "make_server_app",
    "run_config_to_upfl",
    "strategy_for",
]
