"""ServerApp: UpcycledFL over FedProx (or FedAvg/FedProx alone, per ``algorithm``); even rounds send no message."""

from upfl.flower import make_server_app

app = make_server_app()
