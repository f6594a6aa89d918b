"""Presenters: turn analysis results into rich tables, JSON or JSON Lines."""
