"""Benchmarks, run on demand (never by the test suite)."""
