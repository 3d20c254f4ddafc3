"""Local process orchestration for `make demo`, `make up` and the integration tests.

Finds or starts Redis and PostgreSQL, and starts the Procfile's processes
(the same commands as production) as child processes tracked by pid.
"""
