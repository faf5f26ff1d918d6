"""The shipped Flower apps run in one process: a Grid that hands each message to the ClientApp of its node.

No Ray, no SuperLink: the ServerApp of :func:`upfl.flower.make_server_app` and the ClientApp of
:func:`upfl.flower.make_client_app` called as Flower calls them (``server_app(grid, context)``,
``client_app(message, context)``), one Context per node with its ``partition-id``. Messages need a task identity
(the ``task_identity`` fixture of the test module).
"""

from __future__ import annotations

import csv
from pathlib import Path

from flwr.app import Context, RecordDict


class InProcessGrid:
    """Nodes ``node_ids[i]`` serving partition i. ``leaves[i] = t``: node i leaves before round t (from then on it
    is not listed and its messages get no reply, as a Grid returns none for a node that is gone)."""

    def __init__(
        self, client_app, num_nodes: int, node_ids: list[int] | None = None, leaves: dict[int, int] | None = None
    ) -> None:
        self.app = client_app
        self.node_ids = node_ids or [1000 + 7 * (num_nodes - 1 - i) for i in range(num_nodes)]
        self.contexts = {
            node: Context(run_id=1, node_id=node, node_config={"partition-id": i}, state=RecordDict(), run_config={})
            for i, node in enumerate(self.node_ids)
        }
        self.leaves = {self.node_ids[i]: t for i, t in (leaves or {}).items()}
        self.round = 0
        self.received: list[tuple[str, int]] = []
        """(message type, destination node) of every message handed to a node."""

    def gone(self, node: int, server_round: int) -> bool:
        return node in self.leaves and server_round >= self.leaves[node]

    def get_node_ids(self) -> list[int]:
        return [n for n in self.node_ids if not self.gone(n, self.round)]

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for m in messages:
            node = m.metadata.dst_node_id
            self.round = int(m.content["config"]["server-round"])
            self.received.append((m.metadata.message_type, node))
            if not self.gone(node, self.round):
                replies.append(self.app(m, self.contexts[node]))
        return replies


def run_apps_in_process(run_config: dict, out: Path, num_nodes: int, leaves: dict[int, int] | None = None):
    """The shipped ServerApp and ClientApp on ``run_config`` with ``num_nodes`` nodes, in this process. Returns (the
    global arrays of every round as the strategy holds them, metrics.csv rows, the grid)."""
    from upfl.flower import make_client_app, make_server_app

    run_config = {**run_config, "out-dir": str(out)}
    models = {}
    grid = InProcessGrid(make_client_app(run_config), num_nodes, leaves=leaves)
    server = make_server_app(run_config, on_round=lambda t, w: models.__setitem__(t, w.clone()))
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return models, rows, grid
