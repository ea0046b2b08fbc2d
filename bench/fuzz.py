"""The long generated-request run: the CI test (tests/fuzz/test_openapi_fuzz.py, 40 examples per
operation and caller, about 13 000 requests) with more examples.

    python bench/fuzz.py --examples 400
    python bench/fuzz.py --examples 2000 --services image,network
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
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NEFOS_FUZZ_EXAMPLES": str(args.examples), "NEFOS_FUZZ_SERVICES": args.services}
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "tests/fuzz/test_openapi_fuzz.py", "-q", "-s",
                              "-p", "no:cacheprovider"], cwd=root, env=env))
