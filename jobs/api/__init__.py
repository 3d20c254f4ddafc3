"""The HTTP API (Django REST framework)."""
