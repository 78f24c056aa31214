"""Integration tests start heavy frameworks (a local Ray cluster): they run only when
asked for by path (``pytest tests/integrations``, which ``nox -s ray`` does), not as part
of a plain ``pytest`` / ``pytest tests`` run."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent.resolve()


def _asked_for(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(str(arg).split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _asked_for(config):
        return
    skip = pytest.mark.skip(reason="integration test: run it with `nox -s ray` or `pytest tests/integrations`")
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)
