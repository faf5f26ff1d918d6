"""The benchmarks' one way to publish their figures: a JSON file written all or nothing, and the same text printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def publish(results: dict, out: Path) -> None:
    """``results`` as indented JSON to ``out`` (:func:`upfl.files.write_texts`: a temporary sibling, then a rename)
    and to standard output."""
    from upfl.files import write_texts

    text = json.dumps(results, indent=2) + "\n"
    write_texts({out: text})
    sys.stdout.write(text)
