"""upfl: Upcycled-FL (federated learning with first-order approximation at even iterations)."""

__version__ = "0.1.0"
