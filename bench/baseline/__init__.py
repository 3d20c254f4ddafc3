"""What a user would write instead of the platform: the baselines P2 and P5 run in the same web.

`DJANGO_SETTINGS_MODULE=bench.baseline.settings` is the platform's local
settings plus this app (a CPU-heavy kind, `bench.cpu`) and a URLconf that
adds the baseline views beside the platform's own. Loaded only by `python -m bench`.
"""
