"""Print how large each figure's smallest text is as the report's viewer shows it: the report opened in headless
chromium at a 1400 px window (tests/fixtures_browser.py), each figure opened in the viewer, its displayed width over
its natural width times its smallest text's size in the PNG (the text chunk upfl writes; a PNG without it is given
the size with --smallest-pt, in points at 150 dpi).

    python tools/report_legibility.py results/report.html [--smallest-pt 8.8]
"""

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fixtures_browser import browser_page, figure_legibility  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--smallest-pt", type=float, help="the smallest font size (points) of PNGs without the text chunk")
    args = p.parse_args()
    with browser_page(args.report) as page:
        sizes = figure_legibility(page)
    print(f"{'figure':<32} {'natural':>7} {'shown':>6} {'text px':>7} {'shown text px':>13} {'top cut off px':>14}")
    for name, s in sorted(sizes.items(), key=lambda kv: kv[1]["shown_text_px"]):
        text = s["smallest_text_px"]
        if math.isnan(text) and args.smallest_pt:
            text = args.smallest_pt * 150 / 72
        shown = text * s["shown_px"] / s["natural_px"]
        cut = max(0.0, s["cut_off_px"])
        print(f"{name:<32} {s['natural_px']:>7} {s['shown_px']:>6.0f} {text:>7.1f} {shown:>13.1f} {cut:>14.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
