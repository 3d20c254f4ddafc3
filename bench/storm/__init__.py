"""The retry-storm drill behind `manage.py jobs_storm` (issue 11).

drill.py runs the same storm against the platform and a stock Celery
worker; probes.py reads each side once a second; report.py prints the
table and draws the PNG.
"""
