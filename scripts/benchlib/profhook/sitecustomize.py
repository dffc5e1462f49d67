"""Profiling hook for ``scripts/bench --profile``: put this folder on ``PYTHONPATH`` with
``QUIESCE_PROFILE_DIR`` set, and every Python process started so (the daemon, its host)
can be profiled (the CPU time of its main thread) for a window the bench chooses: SIGUSR1
starts cProfile, SIGUSR2 stops it and writes ``<dir>/<pid>.prof`` (whole: written
beside, then renamed). Nothing is profiled otherwise,
so start-up and shutdown stay out of the figures. Only the bench sets the variable.
"""

import os

_DIR = os.environ.get("QUIESCE_PROFILE_DIR")

if _DIR:
    import cProfile
    import signal
    import time

    # CPU time of the thread, not wall time: a wait in epoll, or for the GIL while
    # another thread holds it, is no work of this process's.
    _profile = cProfile.Profile(time.thread_time)

    def _start(signum: int, frame: object) -> None:
        _profile.enable()

    def _stop(signum: int, frame: object) -> None:
        _profile.disable()
        path = os.path.join(_DIR, f"{os.getpid()}.prof")
        _profile.dump_stats(path + ".part")
        os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
