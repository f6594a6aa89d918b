"""Analyses over an opened store: they return plain data and never print."""
