"""Tests for the CPU text kernels (onyxrt_cpu.kernels.text): StringSplit, StringNormalizer,
StringConcat, RegexFullMatch and TfIdfVectorizer.

The onnx node conformance cases run straight through the registry; targeted tests cover what
they leave out (maxsplit with a delimiter, empty strings, broadcasting, 2-D regex inputs,
case-insensitive stop words, string pools and the IDF/TFIDF modes with weights, RE2's
Unicode and empty-string semantics), checked against onnxruntime. RegexFullMatch's
linear-time guarantee and the patterns it refuses are in test_regex_redos.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    conformance_params,
    op_output,
    run_case,
    run_op,
    run_op_onnxruntime,
)

from onyxrt.errors import InvalidGraph

OPS = ["StringSplit", "StringNormalizer", "StringConcat", "RegexFullMatch", "TfIdfVectorizer"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered(OPS)


def S(*rows):
    """An object array of strings."""
    return np.array(rows, dtype=object)


# --------------------------------------------------------------- StringSplit


@pytest.mark.parametrize(
    "attrs",
    [{}, {"delimiter": ","}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 1},
     {"delimiter": "ab"}, {"maxsplit": 0}],
)  # fmt: skip
def test_stringsplit_vs_ort(attrs):
    x = S(["a,b,,c", "  x  y z ", ""], ["abcab", "one", ",,"])
    got = run_op("StringSplit", [x], 20, 2, **attrs)
    want = run_op_onnxruntime("StringSplit", [x], 20, [object, np.int64], **attrs)
    assert got[0].shape == want[0].shape
    assert got[0].tolist() == want[0].tolist()
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], want[1])


def test_stringsplit_scalar():
    parts, counts = run_op("StringSplit", [np.array("a-b", dtype=object)], 20, 2, delimiter="-")
    assert parts.tolist() == ["a", "b"] and counts.shape == () and int(counts) == 2


# ---------------------------------------------------------- StringNormalizer


_NORM_IN = ["Monday", "tuesday", "MONDAY", "Wednesday", "monday", "été"]
# (case_change_action, is_case_sensitive) -> expected output, stop words monday, wednesday.
_NORM_OUT = {
    ("NONE", 0): ["tuesday", "été"],
    ("LOWER", 0): ["tuesday", "été"],
    ("UPPER", 0): ["TUESDAY", "ÉTÉ"],
    ("NONE", 1): ["Monday", "tuesday", "MONDAY", "Wednesday", "été"],
    ("LOWER", 1): ["monday", "tuesday", "monday", "wednesday", "été"],
    ("UPPER", 1): ["MONDAY", "TUESDAY", "MONDAY", "WEDNESDAY", "ÉTÉ"],
}


# onnxruntime's StringNormalizer needs the en_US.UTF-8 locale installed (absent here) and
# onnx.reference's strips accents and ignores is_case_sensitive=0, so the truth is written out.
@pytest.mark.parametrize(("action", "case_sensitive"), list(_NORM_OUT))
@pytest.mark.parametrize("two_dim", [False, True])
def test_stringnormalizer(action, case_sensitive, two_dim):
    x = S(*_NORM_IN)
    want = _NORM_OUT[action, case_sensitive]
    if two_dim:
        x, want = x.reshape(1, -1), [want]
    attrs = dict(case_change_action=action, is_case_sensitive=case_sensitive,
                 stopwords=["monday", "wednesday"])  # fmt: skip
    got = op_output("StringNormalizer", [x], 10, **attrs)
    assert got.dtype == object
    assert got.tolist() == want


def test_stringnormalizer_all_dropped_2d():
    x = S(["a", "A"])
    got = op_output("StringNormalizer", [x], 10, stopwords=["a"])
    assert got.shape == (1, 1) and got.tolist() == [[""]]


def test_stringnormalizer_bad_action():
    with pytest.raises(InvalidGraph, match="case_change_action"):
        op_output("StringNormalizer", [S("a")], 10, case_change_action="TITLE")


# -------------------------------------------------------------- StringConcat


def test_stringconcat_broadcast_vs_ort():
    x = S(["a", "bb", ""], ["ü", "x", "y"])
    y = S("-1", "-2", "-3")
    got = op_output("StringConcat", [x, y], 20)
    want = run_op_onnxruntime("StringConcat", [x, y], 20, [object])[0]
    assert got.dtype == object and got.shape == (2, 3)
    assert got.tolist() == want.tolist() == [["a-1", "bb-2", "-3"], ["ü-1", "x-2", "y-3"]]


# ------------------------------------------------------------ RegexFullMatch


@pytest.mark.parametrize(
    "pattern", [r"[a-z]+\d*", r"(foo|bar)baz?", r".*@example\.com", r"\w{2,3}", "x|"]
)
def test_regexfullmatch_vs_ort(pattern):
    x = S(["abc12", "foobar", "ba", "me@example.com"], ["ab", "barba", "", "x"])
    got = op_output("RegexFullMatch", [x], 20, pattern=pattern)
    want = run_op_onnxruntime("RegexFullMatch", [x], 20, [bool], pattern=pattern)[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)


# RE2 semantics, not Python re's: \w, \d and \b are ASCII-only, \C is one UTF-8 byte,
# \pL and [[:alpha:]] are RE2 classes, (?i) folds Unicode case, "" matches only "".
_UNICODE_IN = ["", "a", "é", "été", "ÉTÉ", "日本語", "😀", "e\u0301", "٣", "a b", "x\ny", "\x00"]


@pytest.mark.parametrize(
    "pattern",
    ["", r"\w+", r"\d", r".", r"..", r"\C\C", r"\pL+", r"[[:alpha:]]+", r"(?i)été",
     r"[à-ü]+", r"\p{Han}+", r"\b.*\b", r"(?s).*", r".*", r"\x{1F600}", r"\Qa b\E", r"\x00",
     r"[^a]*"],
)  # fmt: skip
def test_regexfullmatch_unicode_and_empty_vs_ort(pattern):
    x = S(*_UNICODE_IN)
    got = op_output("RegexFullMatch", [x], 20, pattern=pattern)
    want = run_op_onnxruntime("RegexFullMatch", [x], 20, [bool], pattern=pattern)[0]
    np.testing.assert_array_equal(got, want)


def test_regexfullmatch_empty_tensor():
    got = op_output("RegexFullMatch", [np.empty((0, 3), dtype=object)], 20, pattern="a")
    assert got.dtype == np.bool_ and got.shape == (0, 3)


def test_regexfullmatch_bad_pattern():
    with pytest.raises(InvalidGraph, match="pattern"):
        op_output("RegexFullMatch", [S("a")], 20, pattern="(unclosed")


# ----------------------------------------------------------- TfIdfVectorizer

INT_POOL = dict(
    pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5],
    ngram_counts=[0, 4, 10],
    ngram_indexes=[6, 5, 4, 3, 2, 1, 0, 7],
)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize(("min_n", "max_n"), [(1, 1), (1, 2), (2, 3), (1, 3)])
@pytest.mark.parametrize("skip", [0, 1, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_tfidf_int_vs_ort(mode, min_n, max_n, skip, weighted):
    x = np.array([[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3], [5, 6, 6, 7, 2, 3, 5, 2, 3, 5, 9, 4]],
                 dtype=np.int64)  # fmt: skip
    attrs = dict(INT_POOL, mode=mode, min_gram_length=min_n, max_gram_length=max_n,
                 max_skip_count=skip)  # fmt: skip
    if weighted:
        attrs["weights"] = [0.5, 1.0, 2.0, 0.25, 1.5, 3.0, 0.1, 4.0]
    for inp in (x, x[1].astype(np.int32)):
        got = op_output("TfIdfVectorizer", [inp], 9, **attrs)
        want = run_op_onnxruntime("TfIdfVectorizer", [inp], 9, [np.float32], **attrs)[0]
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tfidf_strings_vs_ort():
    x = S(["the", "cat", "sat", "on", "the", "mat", "the", "cat"])
    attrs = dict(
        mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=1,
        pool_strings=["cat", "mat", "the", "the", "cat", "cat", "sat", "on", "mat"],
        ngram_counts=[0, 3], ngram_indexes=[0, 1, 2, 3, 4, 5],
        weights=[1.0, 2.0, 0.5, 3.0, 1.5, 2.5],
    )  # fmt: skip
    got = op_output("TfIdfVectorizer", [x], 9, **attrs)
    want = run_op_onnxruntime("TfIdfVectorizer", [x], 9, [np.float32], **attrs)[0]
    assert got.shape == want.shape == (1, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tfidf_short_rows_and_unknown_tokens():
    x = np.array([[99, 98]], dtype=np.int64)
    attrs = dict(INT_POOL, mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=2)
    got = op_output("TfIdfVectorizer", [x], 9, **attrs)
    assert got.shape == (1, 8) and not got.any()


def test_tfidf_bad_pool():
    with pytest.raises(InvalidGraph, match="pool"):
        op_output("TfIdfVectorizer", [np.int64([1])], 9, mode="TF", min_gram_length=1,
                  max_gram_length=1, ngram_counts=[0], ngram_indexes=[0])  # fmt: skip
