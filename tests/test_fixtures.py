"""The committed fixture stores are exactly what ``fixtures/regenerate.py`` writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rmqinspect.format.commitlog import CheckOptions, check_message
from rmqinspect.format.profile import Profile
from tests.conftest import FIXTURES


def load_regenerate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regenerate", FIXTURES / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (directories are not compared: git drops empty ones)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fixtures")
    load_regenerate().build_all(out)
    return out


def test_regeneration_is_byte_identical(regenerated: Path) -> None:
    committed = tree(FIXTURES / "stores")
    fresh = tree(regenerated / "stores")
    assert sorted(fresh) == sorted(committed)
    different = [name for name in fresh if fresh[name] != committed[name]]
    assert different == []
    assert (regenerated / "manifest.json").read_bytes() == (FIXTURES / "manifest.json").read_bytes()


def test_manifest_and_readme_list_every_store() -> None:
    manifest: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text("utf-8"))
    stores = sorted(p.name for p in (FIXTURES / "stores").iterdir())
    assert sorted(manifest["stores"]) == stores
    readme = (FIXTURES / "README.md").read_text("utf-8")
    assert all(f"`{name}`" in readme for name in stores)


@pytest.mark.parametrize(
    ("store", "profile"),
    [("clean49", Profile.V4_9), ("clean53_propcrc", Profile.V5_3), ("crash53", Profile.V5_3)],
)
def test_clean_fixture_records_pass_the_broker_check(store: str, profile: Profile) -> None:
    options = CheckOptions(profile=profile, force_verify_prop_crc=store.endswith("propcrc"))
    seen = 0
    for path in sorted((FIXTURES / "stores" / store / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            result = check_message(data, pos, int(path.name), options)
            if not result.is_message:
                assert result.is_blank or not any(data[pos:])
                break
            seen += 1
            pos += result.size
    assert seen == 300
