"""`make bench`'s last step: every figure the benches recorded in this run (reports/bench/figures.json),
beside its target and its ratio to the floor it is compared with. `--reset` empties the file first
(`make bench` starts with it, so the table holds one sitting)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.benchlib import FIGURES, figures, reset, table


def main(argv: list[str]) -> int:
    if "--reset" in argv:
        reset()
        return 0
    figs = figures()
    if not figs:
        print(f"no figures in {FIGURES}: run make bench (or one of the bench-* targets) first")
        return 1
    print(table(figs))
    print(f"\n(figures from {FIGURES}; a ratio is the figure divided by the floor it names, same sitting)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
