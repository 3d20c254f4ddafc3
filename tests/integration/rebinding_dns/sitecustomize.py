"""Test shim: this interpreter resolves the names in JOBS_TEST_DNS_ANSWERS as a rebinding DNS would.

Put on PYTHONPATH by tests/integration/test_ssrf_rebinding.py for a worker
only: Python imports `sitecustomize` at start-up, before Django or Celery,
so every lookup of those names in the worker and its children (the SSRF
guard's, and any the HTTP client would make) gets the changing answers of
devstack.rebinding_dns.RebindingResolver.
"""

import os
import sys
from pathlib import Path

if os.environ.get("JOBS_TEST_DNS_ANSWERS"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository, for devstack
    from devstack.rebinding_dns import install_from_env

    install_from_env()
