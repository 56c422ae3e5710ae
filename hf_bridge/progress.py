"""A spinner with elapsed seconds on stderr while a slow step runs (the command line)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from contextlib import contextmanager


@contextmanager
def progress(message: str):
    """A spinner with elapsed seconds on stderr while a slow step runs."""
    done = threading.Event()
    if not sys.stderr.isatty():  # a log file gets one line, not a spinner
        start = time.monotonic()
        sys.stderr.write(f"{message} ...\n")
        try:
            yield
        finally:
            sys.stderr.write(f"{message}: done in {time.monotonic() - start:.1f}s\n")
        return

    def spin():
        start = time.monotonic()
        for frame in itertools.cycle("|/-\\"):
            if done.wait(0.2):
                break
            sys.stderr.write(f"\r{message} {frame} {time.monotonic() - start:4.0f}s")
            sys.stderr.flush()
        sys.stderr.write(f"\r{message} done in {time.monotonic() - start:.1f}s\n")

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
