"""Settings modules: base (shared), local (default), production, test."""
