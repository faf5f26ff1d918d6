"""Upcycled-FL in Flower: the ServerApp and ClientApp of upfl.flower."""
