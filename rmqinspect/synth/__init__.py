"""Synthetic stores: a writer that lays out store directories byte for byte as a broker of the
chosen profile would, a seeded workload generator, and damage helpers for test copies.

Everything here writes only into a directory the caller names and owns; nothing in this package
opens an existing store for writing.
"""

from rmqinspect.synth.dispatch import utc_index_name
from rmqinspect.synth.layout import MessageSpec, PutResult, StoreLayout, StoreSummary
from rmqinspect.synth.writer import StoreWriter

__all__ = [
    "MessageSpec",
    "PutResult",
    "StoreLayout",
    "StoreSummary",
    "StoreWriter",
    "utc_index_name",
]
