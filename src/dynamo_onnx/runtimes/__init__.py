"""Optimizations for a runtime."""
