"""Analyses over an opened store: they return plain data and never print."""

from collections.abc import Callable

Progress = Callable[[int], None]
"""Told how many more bytes a long analysis has worked through (drives a progress bar)."""
