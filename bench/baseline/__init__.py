"""Baselines that run in the platform's own web: P2's bare `delay()` and P5's in-process pool.

`DJANGO_SETTINGS_MODULE=bench.baseline.settings` is the platform's local
settings plus this app (a CPU-heavy kind, `bench.cpu`) and a URLconf that
adds the baseline views beside the platform's own. Loaded only by `python -m bench`.
P2's hand-written baseline is a separate project with its own table (bench/anchor).
"""
