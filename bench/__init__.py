"""Benchmarks, run on demand (`make bench`); the test suite runs only `--quick` smoke sizes."""
