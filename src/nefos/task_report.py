"""What a running service is doing, on demand: SIGUSR2 writes every asyncio task of the process
with where it waits, and every thread's stack, to standard error (as the Guru Meditation Report
oslo.reports gives Nova's services on SIGUSR2). For a process that looks alive but does nothing,
without stopping it."""

from __future__ import annotations

import asyncio
import faulthandler
import io
import os
import sys
import time


def where(task: asyncio.Task) -> str:
    """The innermost frame the task waits in, as ``file:line function``."""
    frames = task.get_stack()
    if not frames:
        return "(not started, or done)"
    frame = frames[-1]
    return f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"


def write(file=None) -> None:
    """The report: one block per task (its name, then its stack), then the threads."""
    file = file or sys.stderr
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out = io.StringIO()
    out.write(f"==== task report of pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}: "
              f"{len(tasks)} task(s) ====\n")
    for task in tasks:
        out.write(f"--- task {task.get_name()}: waits at {where(task)}\n")
        task.print_stack(limit=12, file=out)
    file.write(out.getvalue())
    file.write("==== threads ====\n")
    file.flush()
    try:
        faulthandler.dump_traceback(file=file, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):  # a stream without a file descriptor
        file.write("(the threads' stacks need a standard error with a file descriptor)\n")
    file.write("==== end of task report ====\n")
    file.flush()


def install(loop: asyncio.AbstractEventLoop) -> None:
    import signal
    loop.add_signal_handler(signal.SIGUSR2, write)
