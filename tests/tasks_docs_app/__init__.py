"""Django's Tasks documentation examples, unchanged, as an installed app (issue 22, Acceptance).

Its `tasks` module holds the documentation's task definitions and signal
receiver; tests/integration/test_tasks_docs.py enqueues them the way the
documentation does and a real worker runs them.
"""
