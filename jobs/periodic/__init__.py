"""Periodic jobs: schedules (cron or interval) whose ticks the scheduler leader submits as jobs.

Exactly one job per tick: the tick is claimed in the database (a unique
row per schedule and tick time) in the transaction that submits its job
through the ordinary submission path (docs/periodic.md).
"""
