"""One rank of a check run, started by harness.py:

    python rank_main.py MODULE RANK WORLD PORT OUTDIR [CHECK,CHECK,...]

Runs the checks of test/python/MODULE.py (see checking.py) and writes
OUTDIR/rank<RANK>.json.
"""

import importlib
import sys

from checking import run


def main() -> None:
    module, rank, world, port, outdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    selected = set(sys.argv[6].split(",")) if len(sys.argv) > 6 and sys.argv[6] else None
    checks = importlib.import_module(module).check
    run(checks, rank, world, port, outdir, selected)


if __name__ == "__main__":
    main()
