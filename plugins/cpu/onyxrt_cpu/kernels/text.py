"""CPU kernels: string ops (StringSplit, StringNormalizer, StringConcat, RegexFullMatch) and
TfIdfVectorizer.

String tensors are numpy object arrays of Python ``str``. Per-string work (splitting, case
changes, regex matching) is one call per element; everything around it (padding, stop-word
filtering, n-gram matching and counting) is vectorized. Case changes use
``str.lower``/``str.upper`` whatever the ``locale`` attribute says.

RegexFullMatch runs RE2 (``google-re2``), the engine onnxruntime uses: its patterns mean
what they mean there (RE2 syntax, matched against the string's UTF-8 bytes) and matching
takes time linear in the string's length. Python's backtracking ``re`` is never used for a
model's pattern: ``(a+)+$`` against 41 characters would hold the GIL for hours, and
``RunOptions.terminate`` cannot stop a kernel in the middle of one ``re`` call. Patterns
RE2 cannot express (backreferences, lookaround) are refused when the kernel is created,
as onnxruntime refuses them. None of the other kernels here takes a regular expression.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph, NotImplementedOp
from onyxrt.kernels import Kernel, KernelInfo

from . import registry


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _strings(x) -> np.ndarray:
    """``x`` as an object array of ``str`` (bytes are decoded as UTF-8)."""
    x = np.asarray(x, dtype=object)
    if x.size and any(isinstance(s, bytes) for s in x.flat):
        x = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else s, otypes=[object])(x)
    return x


def _str_map(func, x: np.ndarray, otype=object) -> np.ndarray:
    """``func`` applied to each element of ``x``, as an array of ``otype`` of x's shape."""
    flat = np.fromiter((func(s) for s in x.flat), dtype=otype, count=x.size)
    return flat.reshape(x.shape)


# -------------------------------------------------------------- StringConcat


@registry.register("StringConcat", since=20)
class StringConcat(Kernel):
    """Element-wise concatenation of two string tensors, with numpy broadcasting."""

    def compute(self, x, y):
        return (np.asarray(np.add(_strings(x), _strings(y)), dtype=object),)


# --------------------------------------------------------------- StringSplit


@registry.register("StringSplit", since=20)
class StringSplit(Kernel):
    """Split each string on ``delimiter`` (whitespace runs when empty), at most ``maxsplit``
    times; pad to the longest split with "" and return the substring counts.

    As in onnxruntime, an empty string gives no substrings, and when splitting on whitespace
    the unsplit remainder loses its trailing whitespace too (onnx.reference keeps it and
    gives "" one substring).
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.delimiter = info.attr("delimiter", "") or None  # None: split on whitespace
        maxsplit = info.attr("maxsplit")
        if maxsplit is not None and maxsplit < 0:
            raise InvalidGraph(f"{_node(info)}: maxsplit must be >= 0, got {maxsplit}")
        self.maxsplit = -1 if maxsplit is None else int(maxsplit)

    def _split(self, s: str) -> list[str]:
        if not s:  # an empty string has no substrings (as onnxruntime)
            return []
        if self.delimiter is None:  # whitespace: no leading or trailing whitespace in parts
            return s.strip().split(None, self.maxsplit)
        return s.split(self.delimiter, self.maxsplit)

    def compute(self, x):
        x = _strings(x)
        parts = [self._split(s) for s in x.flat]
        counts = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        width = int(counts.max()) if counts.size else 0
        out = np.full((x.size, width), "", dtype=object)
        total = int(counts.sum())
        if total:
            rows = np.repeat(np.arange(x.size), counts)
            starts = np.cumsum(counts) - counts
            cols = np.arange(total) - np.repeat(starts, counts)
            flat = np.empty(total, dtype=object)
            flat[:] = [s for p in parts for s in p]
            out[rows, cols] = flat
        return out.reshape(*x.shape, width), counts.reshape(x.shape)


# ---------------------------------------------------------- StringNormalizer


@registry.register("StringNormalizer", since=10)
class StringNormalizer(Kernel):
    """Drop ``stopwords`` from a [C] or [1, C] string tensor, then lower/upper-case it."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        action = info.attr("case_change_action", "NONE")
        if action not in ("NONE", "LOWER", "UPPER"):
            raise InvalidGraph(
                f"{_node(info)}: case_change_action must be NONE, LOWER or UPPER, got {action!r}"
            )
        self.case = {"NONE": None, "LOWER": str.lower, "UPPER": str.upper}[action]
        self.case_sensitive = bool(info.attr("is_case_sensitive", 0))
        words = info.attr("stopwords", []) or []
        self.stopwords = frozenset(w if self.case_sensitive else w.lower() for w in words)

    def compute(self, x):
        x = _strings(x)
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise ValueError(f"StringNormalizer: input must be [C] or [1, C], got {x.shape}")
        flat = x.reshape(-1)
        if self.stopwords:
            keys = flat if self.case_sensitive else _str_map(str.lower, flat)
            keep = _str_map(self.stopwords.__contains__, keys, bool)
            flat = flat[~keep]
        if self.case is not None:
            flat = _str_map(self.case, flat)
        if flat.size == 0:
            flat = np.array([""], dtype=object)
        return (flat.reshape((1, -1) if x.ndim == 2 else (-1,)),)


# ------------------------------------------------------------ RegexFullMatch


_RE2_SYNTAX = "https://github.com/google/re2/wiki/Syntax"


def _google_re2(where: str) -> tuple[ModuleType, Any]:
    """google-re2's ``re2`` module and the options to compile with, imported on first use so
    the CPU provider imports without it. NotImplementedOp naming ``where`` when it is not
    installed, or when another package took the name ``re2`` (some fall back to Python's
    backtracking ``re`` for what RE2 refuses)."""
    try:
        import re2
    except ImportError:
        raise NotImplementedOp(
            f"{where}: RegexFullMatch matches with RE2, as onnxruntime does, and google-re2 is"
            " not installed: pip install google-re2"
        ) from None
    try:
        options = re2.Options()
        options.log_errors = False  # refused patterns are raised; RE2 would also print them
        re2.compile("(?=a)a", options)  # google-re2 refuses lookahead
    except Exception as exc:
        if isinstance(exc, getattr(re2, "error", ())):
            return re2, options
    raise NotImplementedOp(
        f"{where}: the installed 're2' module ({getattr(re2, '__file__', '?')}) is not"
        " google-re2's and may backtrack: pip uninstall it, then pip install google-re2"
    )


@registry.register("RegexFullMatch", since=20)
class RegexFullMatch(Kernel):
    """True where the whole string matches ``pattern`` (RE2 syntax, as onnxruntime).

    Matching is RE2's full match over each string's UTF-8 bytes: ``.`` is one code point,
    ``\\w``/``\\d``/``\\b`` are ASCII-only, ``\\C`` is one byte, ``(?i)`` folds Unicode case.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        where = _node(info)
        pattern = info.attr("pattern")
        if pattern is None:
            raise InvalidGraph(f"{where}: attribute 'pattern' is required")
        re2, options = _google_re2(where)
        try:
            regex = re2.compile(pattern, options)
        except re2.error as exc:
            raise InvalidGraph(
                f"{where}: pattern {pattern!r} is not valid RE2 syntax ({exc}). RegexFullMatch"
                " uses RE2, as onnxruntime does, which matches in linear time and so has no"
                f" backreferences or lookaround; see {_RE2_SYNTAX}"
            ) from None
        self.regex = regex  # compiled once; RE2 objects are safe to share between threads

    def compute(self, x):
        # UTF-8 bytes, as onnxruntime matches; for a str google-re2 would also map the
        # match's byte offsets back to str indices, which a yes/no answer does not need.
        fullmatch = self.regex.fullmatch
        return (_str_map(lambda s: fullmatch(s.encode()) is not None, _strings(x), bool),)


# ----------------------------------------------------------- TfIdfVectorizer


@registry.register("TfIdfVectorizer", since=9)
class TfIdfVectorizer(Kernel):
    """Count the pool's n-grams (with skips) in each row of X and weight them (TF/IDF/TFIDF)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        where = _node(info)
        self.mode = info.attr("mode")
        if self.mode not in ("TF", "IDF", "TFIDF"):
            raise InvalidGraph(f"{where}: mode must be TF, IDF or TFIDF, got {self.mode!r}")
        self.min_n = int(info.attr("min_gram_length", 0))
        self.max_n = int(info.attr("max_gram_length", 0))
        self.max_skip = int(info.attr("max_skip_count", 0))
        if not 1 <= self.min_n <= self.max_n or self.max_skip < 0:
            raise InvalidGraph(
                f"{where}: need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0,"
                f" got {self.min_n}, {self.max_n}, {self.max_skip}"
            )
        ints, strs = info.attr("pool_int64s"), info.attr("pool_strings")
        if (ints is None) == (strs is None):
            raise InvalidGraph(f"{where}: exactly one of pool_int64s, pool_strings must be set")
        self.is_string = strs is not None
        pool = np.array(strs, dtype=object) if self.is_string else np.array(ints, np.int64)
        self.vocab = np.unique(pool)
        pool_ids = np.searchsorted(self.vocab, pool).astype(np.int64)

        starts = [int(c) for c in info.attr("ngram_counts", [])]
        bounds = [*starts, len(pool)]
        if any(not 0 <= a <= b for a, b in zip(bounds, bounds[1:])) or bounds[-1] != len(pool):
            raise InvalidGraph(f"{where}: ngram_counts {starts} do not partition the pool")
        # Pool n-grams of each length n as an (count, n) array of vocabulary ids, and the
        # number of the first one among all the pool's n-grams.
        self.grams: dict[int, tuple[np.ndarray, int]] = {}
        first = 0
        for n, (a, b) in enumerate(zip(bounds, bounds[1:]), start=1):
            if (b - a) % n:
                raise InvalidGraph(f"{where}: pool section of {n}-grams has {b - a} items")
            self.grams[n] = (pool_ids[a:b].reshape(-1, n), first)
            first += (b - a) // n
        self.num_grams = first

        indexes = np.asarray(info.attr("ngram_indexes", []), dtype=np.int64)
        if indexes.shape != (first,) or (indexes.size and indexes.min() < 0):
            raise InvalidGraph(
                f"{where}: ngram_indexes must hold {first} non-negative ints, one per n-gram"
            )
        self.indexes = indexes
        self.out_dim = int(indexes.max()) + 1 if indexes.size else 0
        weights = info.attr("weights")
        if weights is not None and len(weights) != first:
            raise InvalidGraph(f"{where}: weights has {len(weights)} values for {first} n-grams")
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float32)

    def _ids(self, x: np.ndarray) -> np.ndarray:
        """Vocabulary id of each token of ``x``; -1 for tokens not in the pool."""
        if self.vocab.size == 0:
            return np.full(x.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.vocab, x), self.vocab.size - 1)
        return np.where(self.vocab[pos] == x, pos, -1).astype(np.int64)

    def compute(self, x):
        x = _strings(x) if self.is_string else np.asarray(x)
        if self.is_string != (x.dtype.kind == "O") or x.ndim not in (1, 2):
            raise ValueError(
                f"TfIdfVectorizer: expected a 1-D or 2-D {'string' if self.is_string else 'int'}"
                f" tensor, got {x.dtype} of shape {x.shape}"
            )
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        batch, length = rows.shape
        ids = self._ids(rows)
        # Collect (row, pool n-gram number) for every n-gram occurrence found in the pool.
        hit_rows, hit_grams = [], []
        for n in range(self.min_n, self.max_n + 1):
            pool_n, first = self.grams.get(n, (np.empty((0, n), np.int64), 0))
            if pool_n.shape[0] == 0:
                continue
            for skip in range(self.max_skip + 1 if n > 1 else 1):
                step = skip + 1
                count = length - (n - 1) * step
                if count <= 0:
                    break
                cols = np.arange(count)[:, None] + step * np.arange(n)
                windows = ids[:, cols].reshape(-1, n)  # (batch * count, n)
                both = np.concatenate([pool_n, windows])
                _, inverse = np.unique(both, axis=0, return_inverse=True)
                inverse = inverse.reshape(-1)
                lookup = np.full(inverse.max() + 1, -1, dtype=np.int64)
                lookup[inverse[: len(pool_n)]] = np.arange(len(pool_n))
                match = lookup[inverse[len(pool_n) :]]
                found = match >= 0
                hit_rows.append(np.repeat(np.arange(batch), count)[found])
                hit_grams.append(match[found] + first)
        if hit_rows:
            flat = np.concatenate(hit_rows) * self.num_grams + np.concatenate(hit_grams)
            counts = np.bincount(flat, minlength=batch * self.num_grams)
        else:
            counts = np.zeros(batch * self.num_grams, dtype=np.int64)
        counts = counts.reshape(batch, self.num_grams).astype(np.float32)
        if self.mode == "IDF":
            counts = np.minimum(counts, 1)
        if self.mode != "TF" and self.weights is not None:
            counts = counts * self.weights
        out = np.zeros((batch, self.out_dim), dtype=np.float32)
        out[:, self.indexes] = counts
        return (out.reshape(-1) if x.ndim == 1 else out,)
