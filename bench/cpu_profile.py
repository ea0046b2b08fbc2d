"""Run a script under cProfile timed by the process's CPU clock, not the wall clock.

``python -m cProfile`` times by the wall clock: in a cloud of many processes on few cores a
``socket.send`` that wakes the receiver is charged with the time the receiver then ran. This
profile shows where a process spends its own CPU. The script's exit status is this one's.

  python bench/cpu_profile.py OUT script [args...]
"""

import argparse
import cProfile
import pstats
import runpy
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where the stats go (pstats format)")
    parser.add_argument("script", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args()
    sys.argv = [args.script, *args.args]
    profiler = cProfile.Profile(time.process_time)
    status: int | str | None = 0
    profiler.enable()
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code
    finally:
        profiler.disable()
        profiler.dump_stats(args.out)
    stats = pstats.Stats(args.out)
    print(f"{args.out}: {len(stats.stats)} functions, {stats.total_tt:.3f} s of CPU", file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
