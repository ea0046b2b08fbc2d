"""Run a script under cProfile timed by the process's CPU clock, not the wall clock.

``python -m cProfile`` times by the wall clock: in a cloud of many processes on few cores a
``socket.send`` that wakes the receiver is charged with the time the receiver then ran. This
profile shows where a process spends its own CPU.

  python bench/cpu_profile.py OUT script [args...]
"""

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
