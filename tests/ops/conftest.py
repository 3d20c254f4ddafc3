"""Fixtures of the operations tests: Debian's tools, installed when missing (see tools.py)."""
