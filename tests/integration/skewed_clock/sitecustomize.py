"""Test shim: this interpreter's wall clock is JOBS_TEST_CLOCK_SKEW seconds off, as on a skewed host.

Put on PYTHONPATH by tests/integration/test_faults_clock.py for a worker
only: Python imports `sitecustomize` at start-up, before Django or Celery.
`time.time()` and `django.utils.timezone.now()` (every wall-clock reading
of the platform's code) are shifted; `time.monotonic()` is not, as on a real
host whose wall clock is wrong. (libfaketime would be the general tool; on
this Debian it hangs Python's timed waits for a negative offset.)
"""

import os
import time as _time
from datetime import timedelta as _timedelta

_SKEW = float(os.environ.get("JOBS_TEST_CLOCK_SKEW", "0") or 0)

if _SKEW:
    import django.utils.timezone as _timezone

    _real_time, _real_time_ns, _real_now = _time.time, _time.time_ns, _timezone.now
    _time.time = lambda: _real_time() + _SKEW
    _time.time_ns = lambda: _real_time_ns() + int(_SKEW * 1e9)
    _timezone.now = lambda: _real_now() + _timedelta(seconds=_SKEW)
