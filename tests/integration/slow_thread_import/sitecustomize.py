"""Test shim: in a Celery worker's main process, a thread's first import of `netrc` takes 3 s.

Put on PYTHONPATH by tests/integration/test_telemetry_fork_safety.py. It
widens issue 19's race (the fork of a replacement child while a thread of
the worker's main process imports `netrc`, as requests does on its first
call: an OTLP exporter's first export) from microseconds to seconds, so a
main process that runs such a thread forks a wedged child within the
test's run, every run. Only the worker's main process (billiard names it
"MainProcess"; its pool children "ForkPoolWorker-N") and only threads other
than the main thread are slowed: the children and the other processes
import at their usual speed.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time

SLOW_SECONDS = float(os.environ.get("JOBS_TEST_SLOW_THREAD_IMPORT_SECONDS", "3") or 0)


def _in_worker_main_process() -> bool:
    if not sys.argv or not os.path.basename(sys.argv[0]).startswith("celery"):
        return False
    try:
        from billiard.process import current_process  # noqa: PLC0415 - this file's point: the import happens late, in a thread

        return current_process().name == "MainProcess"
    except Exception:
        return False


class _SlowNetrcFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201 - importlib's protocol
        if name != "netrc" or threading.current_thread() is threading.main_thread():
            return None
        if not _in_worker_main_process():
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader

        class _Slow(importlib.abc.Loader):
            def create_module(self, spec):  # noqa: ANN001, ANN201
                return real.create_module(spec)

            def exec_module(self, module):  # noqa: ANN001, ANN201
                sys.stderr.write(
                    f"slow_thread_import: {threading.current_thread().name} imports netrc\n"
                )
                time.sleep(SLOW_SECONDS)
                real.exec_module(module)

        spec.loader = _Slow()
        return spec


if SLOW_SECONDS:
    sys.meta_path.insert(0, _SlowNetrcFinder())
