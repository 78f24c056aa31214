"""``record``: ``dataclasses.dataclass`` with its ``__repr__``, ``__eq__`` and ``__hash__``
shared instead of generated per class.

Python 3.11's ``dataclass`` writes each generated method as source and ``exec``s it: ~0.3 ms
per class for those three alone, ~15 ms of ``import onyxrt`` over the ~50 records the
core defines (an import onnxruntime users pay once per process, and a large share of a
small model's session creation). ``record`` asks ``dataclass`` for everything else
(``__init__``, fields, ``frozen``, ``__match_args__``, ``replace``/``asdict`` support)
and installs these three as closures over the class's field names, with the semantics
Python 3.11 generates:

* ``__eq__``: the tuples of the ``compare`` fields when ``other`` is of the very same
  class, else ``NotImplemented``;
* ``__hash__``: for a frozen class, the hash of that tuple (the ``hash``/``compare``
  fields); for a mutable one ``None`` (unhashable); a ``__hash__`` the class defines
  itself is kept;
* ``__repr__``: ``QualName(field=value!r, ...)`` over the ``repr`` fields, recursion-safe;
* ``frozen``: ``dataclass`` would generate ``__setattr__``/``__delattr__`` too (~0.17 ms
  more per class); shared ones refuse, with ``FrozenInstanceError``, any assignment to a
  field that is already set, and any new attribute on an instance of the class itself
  (as ``dataclass``'s do); the generated ``__init__`` sets each field once through them.

A method the class body defines itself is kept, as ``dataclass`` keeps it (a frozen
record may not define ``__setattr__``/``__delattr__``: ``TypeError``, as ``dataclass``).
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, overload

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # a dependency on Python 3.10 (see pyproject.toml)
    from typing_extensions import dataclass_transform

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


@overload
def record(cls: _T, /) -> _T: ...
@overload
def record(*, frozen: bool = False, eq: bool = True) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))  # type checkers: a dataclass
def record(cls: Any = None, /, *, frozen: bool = False, eq: bool = True) -> Any:
    """``@dataclass``, ``@dataclass(frozen=True)``, ``@dataclass(eq=False)`` with shared
    ``__repr__``/``__eq__``/``__hash__`` (see the module doc)."""

    def wrap(cls: _T) -> _T:
        own = dict(cls.__dict__)  # what the class body defined, before dataclass adds
        if frozen and ("__setattr__" in own or "__delattr__" in own):
            raise TypeError(f"Cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
        cls = dataclasses.dataclass(cls, eq=False, repr=False)  # type: ignore[assignment]
        fields = dataclasses.fields(cls)
        if frozen:
            _freeze(cls, frozenset(f.name for f in fields))
        if "__repr__" not in own:
            cls.__repr__ = _repr([f.name for f in fields if f.repr])  # type: ignore[assignment]
        if eq:
            if "__eq__" not in own:
                cls.__eq__ = _eq(_values([f.name for f in fields if f.compare]))  # type: ignore[assignment]
            class_hash = own.get("__hash__", dataclasses.MISSING)
            explicit = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
            if not explicit:
                hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
                cls.__hash__ = _hash(_values(hashed)) if frozen else None  # type: ignore[assignment]
        return cls

    return wrap if cls is None else wrap(cls)


def _freeze(cls: type, names: frozenset[str]) -> None:
    """Shared ``__setattr__``/``__delattr__`` of a frozen record (see the module doc)."""
    # The next class's own methods, unbound (object's for a record without a record base).
    base: Any = super(cls, cls)
    base_setattr: Callable[[Any, str, Any], None] = base.__setattr__
    base_delattr: Callable[[Any, str], None] = base.__delattr__

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in names:
            if name in self.__dict__:
                raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        elif type(self) is cls:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        base_setattr(self, name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        base_delattr(self, name)

    cls.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]
    cls.__delattr__ = __delattr__  # type: ignore[method-assign,assignment]


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving an instance's values of ``names`` as a tuple (always a tuple)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return attrgetter(*names)


def _eq(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _repr(names: list[str]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        body = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({body})"

    return __repr__
