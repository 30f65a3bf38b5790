"""Shared helpers for the tests (no fixtures with hidden state)."""
