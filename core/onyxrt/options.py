"""Typed provider option schemas, validated when a session is created.

Users write options the way onnxruntime taught them: ``{"device_id": "0",
"arena_extend_strategy": "kSameAsRequested"}`` — strings or Python values. Each provider
declares an :class:`OptionSchema`; validation parses strings to the declared type, checks
choices and ranges, rejects unknown keys with a did-you-mean, and returns the effective
options (defaults filled in). ``get_provider_options()`` reports those back as strings.

A schema built with ``unknown="warn"`` (the CPU provider's: onnxruntime's CPU provider
ignores keys it does not know, and libraries pass it GPU-style keys) only warns about an
unknown key, with a :class:`ProviderOptionWarning` and the did-you-mean, and drops it;
in strict mode (``session.strict_providers=1``) it is still an error. An option can be
accepted without effect (``no_effect`` says why): setting it is logged, not refused.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .errors import InvalidProviderOption
from .records import record

__all__ = ["Option", "OptionSchema", "ProviderOptionWarning", "parse_bool", "parse_size"]


class ProviderOptionWarning(UserWarning):
    """A provider option was ignored (an unknown key the provider tolerates)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(value: Any) -> bool:
    """Parse ``True``/``"1"``/``"true"``/``"yes"``… (and their negatives) to a bool."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {value!r}")


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(value: Any) -> int:
    """Parse a byte count: an int, ``"1073741824"`` or ``"1GiB"``/``"512MB"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a byte count, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip().lower().replace("_", "")
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = text[len(num) :].strip()
    hint = f"expected a byte count such as 1073741824 or '1GiB', got {value!r}"
    if unit not in _SIZE_UNITS or not num:
        raise ValueError(hint)
    try:
        return int(float(num) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise ValueError(hint) from None


@record(frozen=True)
class Option:
    """One option a provider accepts.

    ``type`` is one of ``bool``, ``int``, ``float``, ``str`` or ``"size"`` (bytes, with
    units). ``choices`` restricts values; ``minimum``/``maximum`` bound numbers.
    ``aliases`` are other spellings users may write (e.g. an onnxruntime key).
    ``no_effect``, when set, says why the option is accepted but changes nothing here.
    """

    name: str
    type: Any
    default: Any
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    aliases: tuple[str, ...] = ()
    no_effect: str = ""

    def parse(self, raw: Any, provider: str) -> Any:
        """Convert ``raw`` to this option's type and check it, or raise a clear error."""
        try:
            if self.type is bool:
                value: Any = parse_bool(raw)
            elif self.type == "size":
                value = parse_size(raw)
            elif self.type is int:
                if isinstance(raw, bool):
                    raise ValueError("expected an integer, got a boolean")
                value = int(str(raw).strip()) if isinstance(raw, str) else int(raw)
                if not isinstance(raw, str) and value != raw:
                    raise ValueError(f"expected an integer, got {raw!r}")
            elif self.type is float:
                value = float(raw)
            else:
                value = str(raw)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidProviderOption(
                f"{provider}: option {self.name!r}: {exc}" + self._allowed_text()
            ) from None
        if isinstance(value, float) and value != value and (
            self.minimum is not None or self.maximum is not None
        ):
            raise InvalidProviderOption(
                f"{provider}: option {self.name!r} got {raw!r}; NaN is outside every bound"
            )
        if self.choices is not None and value not in self.choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidProviderOption(
                f"{provider}: option {self.name!r} got {raw!r}; allowed values: "
                f"{', '.join(repr(c) for c in self.choices)}.{hint}"
            )
        if self.minimum is not None and value < self.minimum:
            raise InvalidProviderOption(
                f"{provider}: option {self.name!r} got {raw!r}; it must be >= {self.minimum}"
            )
        if self.maximum is not None and value > self.maximum:
            raise InvalidProviderOption(
                f"{provider}: option {self.name!r} got {raw!r}; it must be <= {self.maximum}"
            )
        return value

    def _allowed_text(self) -> str:
        if self.choices is not None:
            return f" (allowed: {', '.join(repr(c) for c in self.choices)})"
        return ""


def format_option_value(value: Any) -> str:
    """How an effective option is reported back (onnxruntime reports strings)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


class OptionSchema:
    """The options one provider accepts; validates user dicts into effective options."""

    def __init__(self, options: Iterable[Option] = (), unknown: str = "error") -> None:
        if unknown not in ("error", "warn"):
            raise ValueError(f"unknown must be 'error' or 'warn', got {unknown!r}")
        self.unknown = unknown
        self.options: dict[str, Option] = {}
        self._aliases: dict[str, str] = {}
        for opt in options:
            self.options[opt.name] = opt
            for alias in opt.aliases:
                self._aliases[alias] = opt.name

    def __iter__(self) -> Iterator[Option]:
        return iter(self.options.values())

    def defaults(self) -> dict[str, Any]:
        """Every option at its default value."""
        return {name: opt.default for name, opt in self.options.items()}

    def validate(self, provider: str, given: Mapping[str, Any] | None, strict: bool = False) -> dict[str, Any]:
        """Effective options: defaults overlaid with ``given``, every value checked.

        Raises :class:`~onyxrt.errors.InvalidProviderOption` for a bad value (with what is
        allowed) or an unknown key (with the closest known key) — for an unknown key only
        a :class:`ProviderOptionWarning` when the schema tolerates them and ``strict`` is
        off.
        """
        effective = self.defaults()
        for key, raw in (given or {}).items():
            if not isinstance(key, str):
                raise InvalidProviderOption(
                    f"{provider}: option names must be strings, got {key!r} ({type(key).__name__})"
                )
            name = self._aliases.get(key, key)
            opt = self.options.get(name)
            if opt is None:
                known = sorted([*self.options, *self._aliases])
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                listing = ", ".join(sorted(self.options)) or "(none)"
                message = f"{provider}: unknown option {key!r}.{hint} Known options: {listing}."
                if self.unknown == "error" or strict:
                    raise InvalidProviderOption(message)
                warnings.warn(
                    message + " It is ignored (as onnxruntime ignores it); set the session "
                    "config entry session.strict_providers=1 to make this an error.",
                    ProviderOptionWarning,
                    stacklevel=5,
                )
                continue
            try:
                effective[name] = opt.parse(raw, provider)
            except InvalidProviderOption as exc:
                # A value the provider would ignore anyway is not worth breaking a session
                # over where onnxruntime ignores it too (the tolerant schemas).
                if not opt.no_effect or self.unknown == "error" or strict:
                    raise
                warnings.warn(f"{exc} It has no effect here and is ignored.", ProviderOptionWarning, stacklevel=5)
        return effective

    def without_effect(self, given: Mapping[str, Any] | None) -> list[str]:
        """For each option in ``given`` that is accepted without effect, a sentence that
        says so (for the session's log)."""
        notes = []
        for key in given or {}:
            opt = self.options.get(self._aliases.get(key, key)) if isinstance(key, str) else None
            if opt is not None and opt.no_effect:
                notes.append(f"option {key!r} is accepted and has no effect: {opt.no_effect}")
        return notes
