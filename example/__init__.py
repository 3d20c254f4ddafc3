"""An example app bringing its own work to the platform (issue 22): read it top to bottom.

- kinds.py: a job kind (`example.word_count`), found by discovery
  (jobs.kinds.discovery): a typed payload, a policy, a retry on a
  transient error, progress.
- tasks.py: Django `@task` functions, run as platform jobs by
  jobs.taskbackend (the `TASKS` setting).
- views.py: ordinary Django views that submit, enqueue, read and cancel.

Installed by config/settings/local.py (so `make demo`, `make up` and the
tests have it), never by production settings.
"""
