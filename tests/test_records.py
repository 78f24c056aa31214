"""onyxrt.records.record behaves as dataclasses.dataclass: the same repr, equality, hash,
frozenness and dataclass machinery, on the class shapes the code base uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import field
from typing import Any, ClassVar

import pytest

from onyxrt.records import record

OPTIONS = [{}, {"frozen": True}, {"eq": False}, {"frozen": True, "eq": False}]


def _pair(options: dict[str, Any]) -> tuple[type, type]:
    """The same class body under dataclass and under record."""

    def body(decorator: Any) -> type:
        @decorator
        class Point:
            x: int
            y: Any = 0
            label: str = field(default="p", compare=False)
            secret: str = field(default="s", repr=False)
            tags: list[int] = field(default_factory=list, hash=False)
            kind: ClassVar[str] = "point"

        return Point

    return body(dataclasses.dataclass(**options)), body(record(**options))


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_record_matches_dataclass(options):
    std, rec = _pair(options)
    for cls in (std, rec):
        assert dataclasses.is_dataclass(cls)
    a_std, b_std = std(1, (2.0, "u")), std(1, (2.0, "u"), label="other")
    a_rec, b_rec = rec(1, (2.0, "u")), rec(1, (2.0, "u"), label="other")
    assert repr(a_rec).replace("Point", "P") == repr(a_std).replace("Point", "P")
    assert (a_rec == b_rec) == (a_std == b_std)
    assert (a_rec == rec(2)) == (a_std == std(2))
    assert a_rec.__eq__(a_std) is NotImplemented or not options.get("eq", True)
    assert (std.__hash__ is None) == (rec.__hash__ is None)
    if std.__hash__ is not None and options.get("frozen") and options.get("eq", True):
        a_std.tags, a_rec.tags  # noqa: B018 (hash=False fields stay out of the hash)
        assert hash(a_rec) == hash(a_std)
        assert hash(a_rec) == hash(rec(1, (2.0, "u"), tags=[9]))
    if options.get("frozen"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            a_rec.x = 5  # type: ignore[misc]
    else:
        a_rec.x = 5
        assert a_rec.x == 5
    assert dataclasses.replace(a_rec, x=7).x == 7
    assert dataclasses.asdict(rec(3)) == dataclasses.asdict(std(3))
    assert rec.__match_args__ == std.__match_args__


def test_nan_fields_compare_by_identity_as_tuples_do():
    nan = float("nan")
    std, rec = _pair({"frozen": True})
    assert (rec(1, nan) == rec(1, nan)) == (std(1, nan) == std(1, nan)) is True


def test_methods_the_class_defines_are_kept():
    @record(frozen=True)
    class Custom:
        value: int

        def __repr__(self) -> str:
            return "custom"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert repr(Custom(1)) == "custom"
    assert Custom(1) == Custom(2)
    assert hash(Custom(1)) == 7


def test_eq_without_hash_is_unhashable_and_recursion_is_safe():
    @record
    class Node:
        children: list[Any]

    node = Node([])
    node.children.append(node)
    assert repr(node) == "test_eq_without_hash_is_unhashable_and_recursion_is_safe.<locals>.Node(children=[...])"
    with pytest.raises(TypeError):
        hash(node)


def test_subclass_instances_are_not_equal_to_the_base():
    @record(frozen=True)
    class Base:
        a: int

    @record(frozen=True)
    class Derived(Base):
        b: int = 0

    assert Base(1) != Derived(1)
    assert Derived(1, 2) == Derived(1, 2)
    assert repr(Derived(1, 2)).endswith("Derived(a=1, b=2)")


def test_frozen_records_refuse_what_frozen_dataclasses_refuse():
    std, rec = _pair({"frozen": True})
    for obj in (std(1), rec(1)):
        for action in (lambda o: setattr(o, "x", 2), lambda o: setattr(o, "new", 1),
                       lambda o: delattr(o, "x"), lambda o: delattr(o, "y")):
            with pytest.raises(dataclasses.FrozenInstanceError):
                action(obj)
        assert obj.x == 1

    class Plain(rec):  # a plain subclass may add attributes of its own, not touch fields
        pass

    sub = Plain(1)
    sub.extra = 3
    assert sub.extra == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        sub.x = 2


def test_frozen_record_subclass_and_post_init():
    @record(frozen=True)
    class Base:
        a: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "doubled", self.a * 2)

    @record(frozen=True)
    class Derived(Base):
        b: int = 0

    d = Derived(2, 3)
    assert (d.a, d.b, d.doubled) == (2, 3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.a = 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.b = 5
    assert hash(d) == hash(Derived(2, 3))
    assert copy.copy(d) == d
    assert pickle.loads(pickle.dumps(Pickled(1, [2]))) == Pickled(1, [2])


@record(frozen=True)
class Pickled:
    """Module level, so that pickle finds it."""

    a: int
    b: list[int]


def test_frozen_record_may_not_define_setattr():
    with pytest.raises(TypeError):
        @record(frozen=True)
        class Bad:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                pass
