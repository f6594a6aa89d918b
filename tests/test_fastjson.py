"""The fastjson dialect codec: conformance bytes, hostile input and round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqinspect.errors import DecodeError
from rmqinspect.format.fastjson import MAX_DEPTH, FrozenKey, dumps, loads, quote

CONFIG_NAMES = (
    "consumerOffset.json",
    "consumerOffset.json.bak",
    "delayOffset.json",
    "delayOffset.json.bak",
)


def _config_files(corpus: Path) -> list[Path]:
    files = [p for p in sorted((corpus / "stores").glob("*/config/*")) if p.name in CONFIG_NAMES]
    assert files, f"no config files under {corpus}"
    return files


def _decode_error(data: bytes | str) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        loads(data)
    return info.value


def _stringify_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _stringify_keys(v) for k, v in value.items()}
    return value


# --- conformance corpus ---------------------------------------------------------------------------


def test_conformance_files_reencode_byte_identically(
    conformance_dir: Path, conformance5_dir: Path
) -> None:
    for path in _config_files(conformance_dir) + _config_files(conformance5_dir):
        data = path.read_bytes()
        assert dumps(loads(data)).encode("utf-8") == data, path


def test_conformance_clean_consumer_offsets_match_semantics(conformance_dir: Path) -> None:
    expected = json.loads((conformance_dir / "expected" / "clean.json").read_text())
    semantics = expected["configFilesSemantics"]
    config = conformance_dir / "stores" / "clean" / "config"
    for name in CONFIG_NAMES:
        parsed = loads((config / name).read_bytes())
        assert _stringify_keys(parsed["offsetTable"]) == semantics[name], name


def test_integer_keys_come_back_as_int(conformance_dir: Path) -> None:
    data = (conformance_dir / "stores" / "clean" / "config" / "delayOffset.json").read_bytes()
    table = loads(data)["offsetTable"]
    assert list(table) == list(range(1, 19))
    assert all(type(key) is int for key in table)


def test_every_proper_prefix_of_a_real_file_is_rejected(conformance_dir: Path) -> None:
    data = (conformance_dir / "stores" / "clean" / "config" / "consumerOffset.json").read_bytes()
    for cut in range(len(data)):
        err = _decode_error(data[:cut])
        assert err.offset is not None and 0 <= err.offset <= cut, cut


# --- dialect --------------------------------------------------------------------------------------


def test_object_used_as_key_like_client_offsets_json() -> None:
    doc = loads(b'{"offsetTable":{{"brokerName":"b","queueId":3,"topic":"T"}:0}}')
    ((key, offset),) = doc["offsetTable"].items()
    assert isinstance(key, FrozenKey)
    assert offset == 0
    assert key["queueId"] == 3
    assert key.get("missing", "dflt") == "dflt"
    assert key.to_dict() == {"brokerName": "b", "queueId": 3, "topic": "T"}
    # Key order in the file does not matter for lookups.
    same = loads(b'{"topic":"T","queueId":3,"brokerName":"b"}')
    assert doc["offsetTable"][FrozenKey.of(same)] == 0


def test_nested_object_and_array_keys_are_hashable() -> None:
    doc = loads(b'{[1,[2]]:"a",{"x":{"y":[1]}}:"b"}')
    assert doc[(1, (2,))] == "a"
    key = FrozenKey.of({"x": {"y": [1]}})
    assert doc[key] == "b"
    assert key.to_dict() == {"x": {"y": [1]}}


def test_unquoted_identifier_negative_and_single_quoted_keys() -> None:
    assert loads(b"{abc_1$:1,-5:2,'q':'v\\'s'}") == {"abc_1$": 1, -5: 2, "q": "v's"}


def test_scalars_and_whitespace() -> None:
    doc = loads(b' \r\n\t{"a":[true,false,null,-0,1.5,2e3,"x\\u00e9\\n"]}\n ')
    assert doc == {"a": [True, False, None, 0, 1.5, 2000.0, "x\u00e9\n"]}
    assert type(doc["a"][4]) is float


def test_int64_bounds_parse_exactly() -> None:
    assert loads(b"[9223372036854775807,-9223372036854775808]") == [2**63 - 1, -(2**63)]


def test_redundant_commas_are_accepted_like_fastjson() -> None:
    assert loads(b'{,"a":1,,"b":[,1,,2,],}') == {"a": 1, "b": [1, 2]}


def test_surrogate_pairs_combine_and_lone_surrogates_survive() -> None:
    assert loads(b'"\\ud83d\\ude00"') == "\U0001f600"
    assert loads(b'"\\ud83dx"') == "\ud83dx"


def test_invalid_utf8_inside_a_string_becomes_replacement_like_java() -> None:
    assert loads(b'{"T\xffA@g":1}') == {"T\ufffdA@g": 1}


def test_str_input_is_accepted() -> None:
    assert loads('{"\u00e9":[1]}') == {"\u00e9": [1]}


def test_duplicate_key_last_one_wins() -> None:
    assert loads(b'{"a":1,"a":2}') == {"a": 2}


# --- errors and their byte offsets ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (b"", 0, "empty document"),
        (b" \n\t", 3, "empty document"),
        (b'{"a" 1}', 5, "expected ':' after object key"),
        (b'{"a":1]', 6, "expected ',' or '}' after object value"),
        (b"[1}", 2, "expected ',' or ']' after array element"),
        (b'{"a":[1,2', 9, "expected ',' or ']' after array element"),
        (b'{"a":}', 5, "expected a value"),
        (b'{"a":tru}', 5, "expected a value"),
        (b"{} x", 3, "trailing data after the JSON value"),
        (b"{}\x00\x00", 2, "trailing data after the JSON value"),
        (b'{"a":"abc', 5, "unterminated string"),
        (b'"ab\\', 0, "unterminated string"),
        (b'"a\\qb"', 2, "invalid escape 'q' in string"),
        (b'"a\\u12G4"', 2, "invalid \\u escape in string"),
        (b"{@:1}", 1, "expected an object key"),
        (b'{"a":\xff}', 5, "expected a value"),
        (b"\xef\xbb\xbf{}", 0, "expected a value"),
        (b"-", 0, "invalid number"),
        (b'{"a":99999999999999999999}', 5, "integer out of the signed 64-bit range"),
        (b"[-9223372036854775809]", 1, "integer out of the signed 64-bit range"),
        (b"[9223372036854775808]", 1, "integer out of the signed 64-bit range"),
        (b"[1e400]", 1, "number out of the double range"),
    ],
)
def test_errors_carry_byte_offsets(data: bytes, offset: int, message: str) -> None:
    err = _decode_error(data)
    assert err.offset == offset
    assert err.message.startswith(message)


def test_error_names_what_was_found() -> None:
    assert _decode_error(b'{"a" 1}').message == "expected ':' after object key, found '1'"
    assert _decode_error(b'{"a":\xff}').message == "expected a value, found byte 0xff"
    assert _decode_error(b"[1,").message == "expected a value, found end of input"


def test_offsets_are_bytes_not_characters() -> None:
    # "été" is 3 characters but 5 bytes: the missing ':' is at byte 9, character 7.
    assert _decode_error('{"\u00e9t\u00e9" 1}').offset == 9
    assert _decode_error('{"\u00e9t\u00e9" 1}'.encode()).offset == 9


def test_huge_digit_string_is_rejected_quickly() -> None:
    err = _decode_error(b"[" + b"7" * 100_000 + b"]")
    assert err.offset == 1


def test_nesting_limit() -> None:
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    value = loads(deepest)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    err = _decode_error(b"[" * (MAX_DEPTH + 1))
    assert err.offset == MAX_DEPTH
    assert err.message == f"nesting deeper than {MAX_DEPTH} levels"


def test_deep_objects_and_object_keys_hit_the_same_limit() -> None:
    err = _decode_error(b'{"a":' * 100_000)
    assert err.offset == 5 * MAX_DEPTH
    err = _decode_error(b"{" * (MAX_DEPTH + 1))
    assert err.offset == MAX_DEPTH


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_escape_as_other_exceptions(data: bytes) -> None:
    try:
        loads(data)
    except DecodeError as err:
        assert err.offset is not None and 0 <= err.offset <= len(data)


# --- dumps ----------------------------------------------------------------------------------------


def test_dumps_layout_of_int_and_string_keyed_maps() -> None:
    doc = {"offsetTable": {"T@g": {0: 5, 1: 6}, "U@g": {}}}
    assert dumps(doc) == '{\n\t"offsetTable":{\n\t\t"T@g":{0:5,1:6\n\t\t},\n\t\t"U@g":{}\n\t}\n}'


def test_dumps_nested_beans_follow_the_same_rules() -> None:
    doc = {"dataVersion": {"counter": 1, "timestamp": 2}, "t": {"a": {"order": False}}}
    assert dumps(doc) == (
        '{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":2\n\t},'
        '\n\t"t":{\n\t\t"a":{\n\t\t\t"order":false\n\t\t}\n\t}\n}'
    )


def test_dumps_omits_none_values_but_keeps_the_closing_newline() -> None:
    assert dumps({"a": None}) == "{\n}"
    assert dumps({"a": None, "b": 1}) == '{\n\t"b":1\n}'


def test_dumps_lists_and_tuples() -> None:
    assert dumps([]) == "[]"
    assert dumps([1]) == "[1]"
    assert dumps({"a": [1, {"b": 2}]}) == '{\n\t"a":[\n\t\t1,\n\t\t{\n\t\t\t"b":2\n\t\t}\n\t]\n}'
    assert dumps({"a": ("x", "y")}) == '{\n\t"a":["x","y"]\n}'
    assert dumps([None, True]) == "[\n\tnull,\n\ttrue\n]"


def test_dumps_object_key() -> None:
    key = FrozenKey.of({"queueId": 1, "brokerName": "b"})
    assert dumps({key: 7}) == '{{\n\t\t"brokerName":"b",\n\t\t"queueId":1\n\t}:7\n}'


def test_quote_escapes_like_fastjson() -> None:
    assert quote('a"b\\c/d') == '"a\\"b\\\\c/d"'
    assert quote("\b\t\n\f\r") == '"\\b\\t\\n\\f\\r"'
    assert quote("\x00\x0b\x1f") == '"\\u0000\\u000B\\u001F"'
    assert quote("\x7f\xa0\xa1\u2028\u2029") == '"\\u007F\\u00A0\xa1\\u2028\u2029"'
    assert loads(quote("\x00\x7f\u2028")) == "\x00\x7f\u2028"


def test_dumps_rejects_what_fastjson_cannot_write() -> None:
    with pytest.raises(TypeError):
        dumps({1, 2})
    with pytest.raises(ValueError):
        dumps(float("nan"))


_KEYS = st.one_of(st.text(max_size=8), st.integers(min_value=-(2**63), max_value=2**63 - 1))
_SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=12),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(st.one_of(inner, st.none()), max_size=4),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=200)
@given(st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_dumps_loads_round_trip(doc: dict[Any, Any]) -> None:
    text = dumps(doc)
    assert loads(text) == doc
    assert dumps(loads(text)) == text
