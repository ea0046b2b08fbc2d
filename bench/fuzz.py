"""The long generated-request run: the CI test (tests/fuzz/test_openapi_fuzz.py, 5 examples per
operation and caller, about 4 000 requests) with more examples.

    python bench/fuzz.py --examples 400
    python bench/fuzz.py --examples 2000 --services image,network
    python bench/fuzz.py --examples 5 --seed 20261127   # repeat one day's CI draw
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=400, help="examples per operation and caller")
    parser.add_argument("--services", default="compute,network,image,identity",
                        help="comma-separated APIs to fuzz")
    parser.add_argument("--seed", type=int, help="which examples to draw (default: the CI test's, today's date)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NEFOS_FUZZ_EXAMPLES": str(args.examples), "NEFOS_FUZZ_SERVICES": args.services}
    if args.seed is not None:
        env["NEFOS_FUZZ_SEED"] = str(args.seed)
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "tests/fuzz/test_openapi_fuzz.py", "-q", "-s",
                              "-p", "no:cacheprovider"], cwd=root, env=env))
