"""Fixtures for the SimNPU provider's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The compile cache's per-user secret key goes to a folder of this test session,
    never into the real home folder (which CI may not let us write)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
    yield
    mp.undo()
