"""Provider option schemas: parsing the strings users write, and rejecting mistakes early."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.errors import InvalidArgument, InvalidProviderOption
from onyxrt.options import (
    Option,
    OptionSchema,
    ProviderOptionWarning,
    format_option_value,
    parse_bool,
    parse_size,
)

P = "TestExecutionProvider"
CPU = "CPUExecutionProvider"

STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")


@pytest.fixture
def schema() -> OptionSchema:
    return OptionSchema(
        [
            Option("device_id", int, 0, "which device", minimum=0, maximum=7),
            Option("arena_extend_strategy", str, "kNextPowerOfTwo", choices=STRATEGIES),
            Option("use_arena", bool, True, aliases=("enable_cpu_mem_arena",)),
            Option("gpu_mem_limit", "size", 0, minimum=0, aliases=("memory_limit",)),
            Option("fraction", float, 0.5, minimum=0.0, maximum=1.0),
            Option("cache_dir", str, ""),
        ]
    )


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("yes", True),
        ("on", True),
        (" 1 ", True),
        (True, True),
        (1, True),
        (np.True_, True),
        ("0", False),
        ("false", False),
        ("False", False),
        ("no", False),
        ("off", False),
        (False, False),
        (0, False),
    ],
)
def test_parse_bool(raw, expected):
    assert parse_bool(raw) is expected


@pytest.mark.parametrize("raw", ["maybe", "2", 2, "", None, "tru"])
def test_parse_bool_rejects_anything_else(raw):
    with pytest.raises(ValueError, match="expected a boolean"):
        parse_bool(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (1073741824, 1 << 30),
        ("1073741824", 1 << 30),
        ("1GiB", 1 << 30),
        ("1gb", 1 << 30),
        ("1 GiB", 1 << 30),
        ("1G", 1 << 30),
        ("512MB", 512 << 20),
        ("512mib", 512 << 20),
        ("64k", 64 << 10),
        ("64KiB", 64 << 10),
        ("1.5GiB", 3 << 29),
        ("100b", 100),
        ("1_000_000", 1_000_000),
        ("0", 0),
    ],
)
def test_parse_size(raw, expected):
    assert parse_size(raw) == expected


@pytest.mark.parametrize("raw", ["lots", "GiB", "1 parsec", "", True, None])
def test_parse_size_rejects_anything_else(raw):
    with pytest.raises(ValueError, match="byte count"):
        parse_size(raw)


@pytest.mark.parametrize("raw", ["0x100", "1.2.3MiB", "--5"])
def test_malformed_number_in_a_size_option_is_rejected_naming_the_option(raw):
    with pytest.raises(InvalidProviderOption, match="option 'memory_limit'"):
        Option("memory_limit", "size", 0).parse(raw, P)


def test_option_string_values_become_typed_values(schema):
    effective = schema.validate(
        P,
        {
            "device_id": "3",
            "use_arena": "False",
            "gpu_mem_limit": "2GiB",
            "fraction": "0.25",
            "cache_dir": "/tmp/cache",
        },
    )
    assert effective == {
        "device_id": 3,
        "arena_extend_strategy": "kNextPowerOfTwo",
        "use_arena": False,
        "gpu_mem_limit": 2 << 30,
        "fraction": 0.25,
        "cache_dir": "/tmp/cache",
    }
    assert type(effective["device_id"]) is int and type(effective["use_arena"]) is bool


def test_python_values_are_accepted_as_is(schema):
    effective = schema.validate(P, {"device_id": 2, "use_arena": False, "fraction": 1})
    assert (effective["device_id"], effective["use_arena"], effective["fraction"]) == (
        2,
        False,
        1.0,
    )
    assert schema.validate(P, {"device_id": np.int64(5)})["device_id"] == 5


def test_defaults_are_filled_in(schema):
    assert schema.validate(P, None) == schema.defaults()
    assert schema.validate(P, {}) == {
        "device_id": 0,
        "arena_extend_strategy": "kNextPowerOfTwo",
        "use_arena": True,
        "gpu_mem_limit": 0,
        "fraction": 0.5,
        "cache_dir": "",
    }
    effective = schema.validate(P, {"device_id": "1"})
    assert effective["arena_extend_strategy"] == "kNextPowerOfTwo"  # untouched ones: defaults


def test_validate_does_not_mutate_the_callers_dict(schema):
    given = {"enable_cpu_mem_arena": "0"}
    schema.validate(P, given)
    assert given == {"enable_cpu_mem_arena": "0"}


# -- mistakes ------------------------------------------------------------------------------


def test_unknown_key_suggests_the_closest_and_lists_known_options(schema):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {"device_idx": "0"})
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert message.startswith(f"{P}: ")
    assert "unknown option 'device_idx'" in message
    assert "Did you mean 'device_id'?" in message
    assert "arena_extend_strategy" in message and "gpu_mem_limit" in message


def test_unknown_key_close_to_an_alias_suggests_the_alias(schema):
    with pytest.raises(InvalidProviderOption, match="Did you mean 'enable_cpu_mem_arena'"):
        schema.validate(P, {"enable_cpu_mem_arna": "1"})


def test_unknown_key_with_nothing_close_has_no_suggestion(schema):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {"zzz": "1"})
    assert "Did you mean" not in str(err.value)
    assert "Known options:" in str(err.value)


def test_empty_schema_says_it_has_no_options():
    with pytest.raises(InvalidProviderOption, match=r"Known options: \(none\)"):
        OptionSchema().validate(P, {"anything": 1})


@pytest.mark.parametrize("raw", ["kSameAsRequest", "ksameasrequested", "SameAsRequested"])
def test_choice_typo_lists_allowed_values_and_suggests(schema, raw):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {"arena_extend_strategy": raw})
    message = str(err.value)
    assert f"option 'arena_extend_strategy' got {raw!r}" in message
    assert "allowed values: 'kNextPowerOfTwo', 'kSameAsRequested'" in message
    assert "Did you mean 'kSameAsRequested'?" in message


def test_choice_far_from_every_value_has_no_suggestion(schema):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {"arena_extend_strategy": "grow"})
    assert "Did you mean" not in str(err.value)
    assert "allowed values" in str(err.value)


@pytest.mark.parametrize(
    ("key", "raw", "bound"),
    [
        ("device_id", "8", "<= 7"),
        ("device_id", -1, ">= 0"),
        ("fraction", "1.5", "<= 1.0"),
        ("fraction", "-0.1", ">= 0.0"),
        ("gpu_mem_limit", "-1GiB", ">= 0"),
    ],
)
def test_values_outside_bounds_are_rejected_naming_the_bound(schema, key, raw, bound):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {key: raw})
    message = str(err.value)
    assert f"option {key!r} got {raw!r}" in message
    assert f"it must be {bound}" in message


def test_bounds_are_inclusive(schema):
    effective = schema.validate(P, {"device_id": "7", "fraction": "1"})
    assert (effective["device_id"], effective["fraction"]) == (7, 1.0)


@pytest.mark.parametrize(
    ("key", "raw", "fragment"),
    [
        ("device_id", "zero", "invalid literal"),
        ("device_id", 2.5, "expected an integer"),
        ("device_id", True, "expected an integer, got a boolean"),
        ("use_arena", "maybe", "expected a boolean"),
        ("gpu_mem_limit", "lots", "expected a byte count"),
        ("fraction", "half", "could not convert"),
    ],
)
def test_values_of_the_wrong_type_are_rejected_naming_the_option(schema, key, raw, fragment):
    with pytest.raises(InvalidProviderOption) as err:
        schema.validate(P, {key: raw})
    message = str(err.value)
    assert message.startswith(f"{P}: option {key!r}")
    assert fragment in message


def test_type_error_on_a_choice_option_lists_allowed_values():
    opt = Option("level", int, 1, choices=(0, 1, 2))
    assert opt.parse("2", P) == 2
    with pytest.raises(InvalidProviderOption) as err:
        opt.parse("high", P)
    assert "(allowed: 0, 1, 2)" in str(err.value)
    with pytest.raises(InvalidProviderOption, match="allowed values: 0, 1, 2"):
        opt.parse("3", P)


def test_nan_is_outside_every_bound(schema):
    with pytest.raises(InvalidProviderOption):
        schema.validate(P, {"fraction": "nan"})


def test_absurd_size_is_an_invalid_provider_option(schema):
    with pytest.raises(InvalidProviderOption, match="gpu_mem_limit"):
        schema.validate(P, {"gpu_mem_limit": "1e400GiB"})


def test_non_string_option_key_is_an_invalid_provider_option(schema):
    with pytest.raises(InvalidProviderOption):
        schema.validate(P, {1: "0"})


# -- aliases -------------------------------------------------------------------------------


def test_alias_sets_the_canonical_option(schema):
    effective = schema.validate(P, {"enable_cpu_mem_arena": "0", "memory_limit": "1MiB"})
    assert effective["use_arena"] is False
    assert effective["gpu_mem_limit"] == 1 << 20
    assert "enable_cpu_mem_arena" not in effective and "memory_limit" not in effective


def test_bad_value_through_an_alias_names_the_canonical_option(schema):
    with pytest.raises(InvalidProviderOption, match="option 'use_arena'"):
        schema.validate(P, {"enable_cpu_mem_arena": "perhaps"})


def test_schema_iterates_over_its_options(schema):
    assert [o.name for o in schema][:2] == ["device_id", "arena_extend_strategy"]


# -- reporting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "1"),
        (False, "0"),
        (0, "0"),
        (1 << 30, "1073741824"),
        ("kSameAsRequested", "kSameAsRequested"),
        (0.25, "0.25"),
        ("", ""),
    ],
)
def test_format_option_value(value, text):
    assert format_option_value(value) == text


def test_formatted_values_parse_back_to_the_same_options(schema):
    effective = schema.validate(P, {"use_arena": False, "gpu_mem_limit": "3GiB", "device_id": 4})
    as_text = {k: format_option_value(v) for k, v in effective.items()}
    assert schema.validate(P, as_text) == effective


# -- through a session ---------------------------------------------------------------------


@pytest.fixture
def model_bytes() -> bytes:
    model: onnx.ModelProto = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    return model.SerializeToString()


X = np.array([-1.0, 0.0, 2.0], np.float32)


def test_session_reports_effective_provider_options_as_strings(toy_provider, model_bytes):
    sess = ort.InferenceSession(
        model_bytes,
        providers=[(toy_provider, {"arena_extend_strategy": "kSameAsRequested"}), CPU],
    )
    options = sess.get_provider_options()
    assert options[toy_provider]["arena_extend_strategy"] == "kSameAsRequested"
    assert options[toy_provider]["memory_limit"] == "0"  # default filled in
    assert all(isinstance(v, str) for v in options[toy_provider].values())
    assert sess.get_providers() == [toy_provider, CPU]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0))


def test_session_default_options_are_reported(toy_provider, model_bytes):
    options = ort.InferenceSession(
        model_bytes, providers=[toy_provider, CPU]
    ).get_provider_options()
    assert options == {
        toy_provider: {
            "device_id": "0",
            "arena_extend_strategy": "kNextPowerOfTwo",
            "memory_limit": "0",
        },
        CPU: {},
    }


def test_cpu_provider_accepts_onnxruntimes_arena_options_without_effect(model_bytes):
    # OCR and layout libraries pass ("CPUExecutionProvider", {"arena_extend_strategy":
    # "kSameAsRequested"}); onnxruntime's CPU provider takes it, so must we.
    options = {"arena_extend_strategy": "kSameAsRequested", "use_arena": "0", "max_mem": 1 << 20}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # known keys: no warning
        sess = ort.InferenceSession(model_bytes, providers=[(CPU, options)])
    # Nothing of these is in effect (numpy allocates; no arena), so none is reported as
    # effective — as onnxruntime reports {} — and the placement says why.
    assert sess.get_provider_options() == {CPU: {}}
    assert CPU not in sess.memory_stats()
    notes = sess.placement.option_notes
    assert len(notes) == 3 and all("no effect" in n and "no arena" in n for n in notes)
    assert any("arena_extend_strategy" in line for line in sess.placement.summary_lines())
    ortrt = pytest.importorskip("onnxruntime")
    theirs = ortrt.InferenceSession(model_bytes, providers=[(CPU, options)])
    assert theirs.get_provider_options() == {CPU: {}}


def test_cpu_provider_warns_about_unknown_options_and_strict_mode_refuses(model_bytes):
    with pytest.warns(ProviderOptionWarning, match=r"unknown option 'arena_extend_stratgy'.*Did you mean 'arena_extend_strategy'"):
        sess = ort.InferenceSession(model_bytes, providers=[(CPU, {"arena_extend_stratgy": "kSameAsRequested"})])
    assert sess.get_provider_options() == {CPU: {}}
    with pytest.warns(ProviderOptionWarning, match="'kSameAsRequestd'.*Did you mean 'kSameAsRequested'"):
        ort.InferenceSession(model_bytes, providers=[(CPU, {"arena_extend_strategy": "kSameAsRequestd"})])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.strict_providers", "1")
    with pytest.raises(InvalidProviderOption, match="unknown option 'memory_limit'"):
        ort.InferenceSession(model_bytes, so, providers=[CPU], provider_options=[{"memory_limit": 0}])
    with pytest.raises(InvalidProviderOption, match="allowed values"):
        ort.InferenceSession(model_bytes, so, providers=[(CPU, {"arena_extend_strategy": "1"})])
    # onnxruntime takes the same dicts without a word.
    ortrt = pytest.importorskip("onnxruntime")
    ortrt.InferenceSession(model_bytes, providers=[(CPU, {"arena_extend_stratgy": "x", "memory_limit": 0})])


def test_provider_options_argument_and_alias(toy_provider, model_bytes):
    sess = ort.InferenceSession(
        model_bytes,
        providers=[toy_provider, CPU],
        provider_options=[
            {"gpu_mem_limit": "1GiB", "arena_extend_strategy": "kSameAsRequested"},
            {},
        ],
    )
    options = sess.get_provider_options()[toy_provider]
    assert options["memory_limit"] == str(1 << 30)
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    assert "gpu_mem_limit" not in options  # reported under the canonical name
    assert sess.memory_stats()[toy_provider]["limit"] == 1 << 30


def test_misspelt_key_fails_at_session_creation(toy_provider, model_bytes):
    with pytest.raises(InvalidProviderOption) as err:
        ort.InferenceSession(
            model_bytes,
            providers=[(toy_provider, {"arena_extend_stratgy": "kSameAsRequested"}), CPU],
        )
    message = str(err.value)
    assert toy_provider in message
    assert "'arena_extend_stratgy'" in message
    assert "Did you mean 'arena_extend_strategy'?" in message


def test_bad_value_fails_at_session_creation(toy_provider, model_bytes):
    with pytest.raises(InvalidProviderOption) as err:
        ort.InferenceSession(model_bytes, providers=[(toy_provider, {"memory_limit": "-5"}), CPU])
    assert "option 'memory_limit'" in str(err.value) and ">= 0" in str(err.value)


def test_provider_options_length_mismatch_is_invalid_argument(model_bytes):
    with pytest.raises(InvalidArgument, match="one options dict per provider"):
        ort.InferenceSession(model_bytes, providers=[CPU], provider_options=[{}, {}])


def test_failed_set_providers_keeps_the_session_as_it_was(toy_provider, model_bytes):
    sess = ort.InferenceSession(
        model_bytes,
        providers=[(toy_provider, {"arena_extend_strategy": "kSameAsRequested"}), CPU],
    )
    before = sess.get_provider_options()
    with pytest.raises(InvalidProviderOption):
        sess.set_providers([(toy_provider, {"bogus": "1"}), CPU])
    assert sess.get_provider_options() == before
    assert sess.get_providers() == [toy_provider, CPU]
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0))


def test_set_providers_applies_new_options(toy_provider, model_bytes):
    sess = ort.InferenceSession(model_bytes, providers=[toy_provider, CPU])
    assert sess.memory_stats()[toy_provider]["limit"] is None
    sess.set_providers([(toy_provider, {"memory_limit": "64MiB"}), CPU])
    assert sess.get_provider_options()[toy_provider]["memory_limit"] == str(64 << 20)
    assert sess.memory_stats()[toy_provider]["limit"] == 64 << 20  # a new arena, with the limit
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0))
