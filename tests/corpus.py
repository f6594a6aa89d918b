"""Readers for the real-broker conformance corpora (expected JSON and gzip JSON Lines)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def scenarios(corpus: Path) -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in (corpus / "expected").glob("*.json"))


def expected(corpus: Path, scenario: str) -> dict[str, Any]:
    with open(corpus / "expected" / f"{scenario}.json", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def input_store(corpus: Path, scenario: str) -> Path:
    return corpus / expected(corpus, scenario)["inputStore"]


def jsonl(corpus: Path, scenario: str, kind: str) -> Iterator[dict[str, Any]]:
    """Lines of ``expected/<scenario>.<kind>.jsonl.gz`` (kind: messages or prescan)."""
    with gzip.open(
        corpus / "expected" / f"{scenario}.{kind}.jsonl.gz", "rt", encoding="utf-8"
    ) as fh:
        for line in fh:
            yield json.loads(line)
