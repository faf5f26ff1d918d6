"""ClientApp: node ``partition-id`` i trains device i of ``data-path`` with upfl's local solver."""

from upfl.flower import make_client_app

app = make_client_app()
