"""The API table of docs/migrating-from-onnxruntime.md against the installed onnxruntime:
every public name of its Python package is listed, every name listed as provided exists
in onyxrt, and the page shows the table as rendered from ``onyxrt.compat.api_table``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from onyxrt.compat import api_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "migrating-from-onnxruntime.md"


def _public(obj: object) -> list[str]:
    return [name for name in dir(obj) if not name.startswith("_")]


def _members(prefix: str, cls: type) -> list[str]:
    """Public members of one onnxruntime class, without int/enum machinery."""
    names = []
    for member in _public(cls):
        if issubclass(cls, int) and member in dir(int):
            continue
        if member in ("name", "value") and hasattr(cls, "__members__"):
            continue
        names.append(f"{prefix}.{member}")
    return names


def onnxruntime_public_names() -> list[str]:
    """What the table must cover: ``dir(onnxruntime)``, the members of its classes, and
    the names only ``onnxruntime.capi._pybind_state`` has (as ``capi.X``)."""
    ortrt = pytest.importorskip("onnxruntime")
    from onnxruntime.capi import _pybind_state as C

    names: list[str] = []
    for name in _public(ortrt):
        names.append(name)
        obj = getattr(ortrt, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            names += _members(name, obj)
    for name in _public(C):
        if hasattr(ortrt, name):
            continue
        names.append(f"capi.{name}")
        obj = getattr(C, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            names += _members(f"capi.{name}", obj)
    return names


def test_every_public_name_of_the_installed_onnxruntime_is_in_the_table():
    import onnxruntime

    unlisted = [n for n in onnxruntime_public_names() if n not in api_table.ENTRIES]
    assert not unlisted, (
        f"onnxruntime {onnxruntime.__version__} has public names the API table does not list: "
        f"{unlisted}. Implement them (or say why not) in onyxrt/compat/api_table.py, then run "
        "python -m onyxrt.compat.api_table --write docs/migrating-from-onnxruntime.md"
    )


def test_every_name_the_table_calls_provided_exists_in_onyxrt():
    missing = []
    for name, (status, _) in api_table.ENTRIES.items():
        if status in ("absent", "not API"):
            continue
        try:
            api_table.onyxrt_object(name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"listed as provided but missing in onyxrt: {missing}"


def test_entries_have_a_known_status_and_differences_say_why():
    for name, (status, note) in api_table.ENTRIES.items():
        assert status in api_table.STATUSES, (name, status)
        if status != "same":
            assert len(note) > 10, f"{name}: a '{status}' entry needs a note saying how or why"


def test_absent_names_are_really_absent():
    # "absent" must not hide something onyxrt has (the table would then undersell it).
    for name, (status, _) in api_table.ENTRIES.items():
        if status == "absent":
            with pytest.raises(AttributeError):
                api_table.onyxrt_object(name)


def test_the_migration_page_shows_the_table_as_generated():
    assert api_table.section(DOC) == api_table.render(), (
        "docs/migrating-from-onnxruntime.md is out of date: run "
        "python -m onyxrt.compat.api_table --write docs/migrating-from-onnxruntime.md"
    )
