"""ConfigManager.load emulation: which of <name> / <name>.bak the broker would use, if any."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmqinspect.format.config import ConsumerOffsetTable, DelayOffsetTable, parse_consumer_offsets
from rmqinspect.format.fastjson import loads
from rmqinspect.store.configfiles import CONFIG_FILES, load_config_file, load_config_files

NAME = "consumerOffset.json"
GOOD = b'{"offsetTable":{"T@g":{0:5}}}'
OLDER = b'{"offsetTable":{"T@g":{0:3}}}'
BROKEN = b'{"offsetTable":{"T@g":{0:5}'  # torn write: missing the closing braces


def _config(tmp_path: Path, files: dict[str, bytes]) -> Path:
    config = tmp_path / "config"
    config.mkdir()
    for name, data in files.items():
        (config / name).write_bytes(data)
    return config


def _offsets(data: bytes) -> ConsumerOffsetTable:
    return parse_consumer_offsets(loads(data))


def test_registry_names() -> None:
    assert set(CONFIG_FILES) == {
        "consumerOffset.json",
        "delayOffset.json",
        "topics.json",
        "subscriptionGroup.json",
        "consumerFilter.json",
        "lmqConsumerOffset.json",
        "timermetrics",
    }
    assert all(spec.name == name for name, spec in CONFIG_FILES.items())


def test_conformance_clean_config_dir(conformance_dir: Path) -> None:
    config = conformance_dir / "stores" / "clean" / "config"
    results = load_config_files(config)
    consumer = results["consumerOffset.json"]
    assert (consumer.source, consumer.main_state, consumer.bak_state) == ("main", "ok", "ok")
    assert consumer.broker_starts and consumer.bak_differs and not consumer.tmp_present
    assert isinstance(consumer.value, ConsumerOffsetTable)
    assert consumer.value.offset_table["TopicA@groupX"] == {0: 265, 1: 277, 2: 270, 3: 273}
    assert isinstance(consumer.bak_value, ConsumerOffsetTable)
    assert consumer.bak_value.offset_table["TopicA@groupX"][0] == 260
    delay = results["delayOffset.json"]
    assert isinstance(delay.value, DelayOffsetTable)
    assert delay.source == "main" and not delay.bak_differs
    topics = results["topics.json"]
    assert (topics.source, topics.main_state, topics.value) == ("none", "missing", None)
    assert topics.broker_starts


def test_delay_offsets_match_what_the_real_498_broker_loaded(conformance_dir: Path) -> None:
    checked = 0
    for expected in sorted((conformance_dir / "expected").glob("*.json")):
        loaded = json.loads(expected.read_text())["afterLoad"]["delayOffsetTable"]
        config = conformance_dir / "stores" / expected.stem / "config"
        result = load_config_file(config, "delayOffset.json")
        assert isinstance(result.value, DelayOffsetTable)
        assert {str(k): v for k, v in result.value.offset_table.items()} == loaded, expected.stem
        checked += 1
    assert checked == 7


def test_missing_config_dir_means_every_file_none(tmp_path: Path) -> None:
    results = load_config_files(tmp_path / "no-such-dir")
    assert set(results) == set(CONFIG_FILES)
    for result in results.values():
        assert (result.source, result.main_state, result.bak_state) == (
            "none",
            "missing",
            "missing",
        )
        assert result.value is None and result.broker_starts and not result.tmp_present
        assert result.main_error is None and result.bak_error is None


def test_config_path_that_is_a_file_counts_as_missing(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "config"
    not_a_dir.write_bytes(b"x")
    assert load_config_file(not_a_dir, NAME).main_state == "missing"


def test_good_main_wins_and_matches_bak_when_equal(tmp_path: Path) -> None:
    result = load_config_file(_config(tmp_path, {NAME: GOOD, NAME + ".bak": GOOD}), NAME)
    assert result.source == "main"
    assert result.value == _offsets(GOOD)
    assert not result.bak_differs


@pytest.mark.parametrize("main", [None, b""], ids=["missing", "empty"])
def test_missing_or_empty_main_falls_back_to_bak(tmp_path: Path, main: bytes | None) -> None:
    files = {NAME + ".bak": OLDER} | ({} if main is None else {NAME: main})
    result = load_config_file(_config(tmp_path, files), NAME)
    assert result.source == "bak"
    assert result.main_state == ("missing" if main is None else "empty")
    assert result.value == _offsets(OLDER)
    assert result.broker_starts and result.main_error is None
    assert not result.bak_differs  # only one of the two parsed


def test_unparsable_main_falls_back_to_bak_with_located_error(tmp_path: Path) -> None:
    config = _config(tmp_path, {NAME: BROKEN, NAME + ".bak": OLDER})
    result = load_config_file(config, NAME)
    assert (result.source, result.main_state) == ("bak", "invalid")
    assert result.value == _offsets(OLDER)
    assert result.main_error == (
        f"{config / NAME}, byte {len(BROKEN)}: "
        "expected ',' or '}' after object value, found end of input"
    )
    assert result.broker_starts


def test_badly_shaped_main_falls_back_to_bak(tmp_path: Path) -> None:
    main = b'{"offsetTable":{"T@g":{0:"x"}}}'
    result = load_config_file(_config(tmp_path, {NAME: main, NAME + ".bak": OLDER}), NAME)
    assert result.source == "bak"
    assert result.main_error is not None
    assert result.main_error.endswith('offsetTable."T@g".0: expected an integer, got "x"')


def test_unparsable_main_and_bak_stop_the_broker(tmp_path: Path) -> None:
    config = _config(tmp_path, {NAME: BROKEN, NAME + ".bak": b"{]"})
    result = load_config_file(config, NAME)
    assert (result.source, result.value, result.broker_starts) == ("none", None, False)
    assert (result.main_state, result.bak_state) == ("invalid", "invalid")
    assert result.bak_error is not None
    assert result.bak_error.startswith(f"{config / (NAME + '.bak')}, byte 1: ")


@pytest.mark.parametrize("bak", [None, b""], ids=["missing", "empty"])
def test_unparsable_main_without_bak_starts_empty(tmp_path: Path, bak: bytes | None) -> None:
    files = {NAME: BROKEN} | ({} if bak is None else {NAME + ".bak": bak})
    result = load_config_file(_config(tmp_path, files), NAME)
    assert (result.source, result.value, result.broker_starts) == ("none", None, True)
    assert result.main_error is not None and result.bak_error is None


def test_bad_bak_is_irrelevant_when_main_loads(tmp_path: Path) -> None:
    result = load_config_file(_config(tmp_path, {NAME: GOOD, NAME + ".bak": BROKEN}), NAME)
    assert (result.source, result.broker_starts, result.bak_state) == ("main", True, "invalid")
    assert result.bak_value is None and not result.bak_differs
    assert result.bak_error is not None


def test_tmp_left_by_a_crash_mid_persist(tmp_path: Path) -> None:
    # 4.9 writes <name>.tmp, then deletes <name> before renaming: a crash leaves only tmp + bak.
    config = _config(tmp_path, {NAME + ".tmp": GOOD, NAME + ".bak": OLDER})
    result = load_config_file(config, NAME)
    assert result.tmp_present
    assert result.source == "bak" and result.value == _offsets(OLDER)


def test_unreadable_main_falls_back_and_unreadable_bak_stops(tmp_path: Path) -> None:
    config = _config(tmp_path, {NAME + ".bak": OLDER})
    (config / NAME).mkdir()
    result = load_config_file(config, NAME)
    assert (result.main_state, result.source) == ("unreadable", "bak")
    assert result.main_error is not None and str(config / NAME) in result.main_error

    (config / (NAME + ".bak")).unlink()
    (config / (NAME + ".bak")).mkdir()
    result = load_config_file(config, NAME)
    assert (result.bak_state, result.source, result.broker_starts) == ("unreadable", "none", False)


def test_invalid_utf8_in_a_string_still_loads_like_the_broker(tmp_path: Path) -> None:
    main = b'{"offsetTable":{"T\xff@g":{0:1}}}'
    result = load_config_file(_config(tmp_path, {NAME: main}), NAME)
    assert result.source == "main"
    assert isinstance(result.value, ConsumerOffsetTable)
    assert list(result.value.offset_table) == ["T\ufffd@g"]


def test_inputs_are_left_untouched(tmp_path: Path) -> None:
    config = _config(tmp_path, {NAME: BROKEN, NAME + ".bak": OLDER})
    before = sorted((p.name, p.read_bytes()) for p in config.iterdir())
    load_config_files(config)
    assert sorted((p.name, p.read_bytes()) for p in config.iterdir()) == before


def test_unknown_name_is_a_caller_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown config file"):
        load_config_file(tmp_path, "brokerConfig.json")
