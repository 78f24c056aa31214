"""Helpers for testing onyxrt and the providers built on it."""
