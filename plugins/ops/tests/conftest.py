"""Fixtures for the operator library's tests: the library bound over numpy and over
``array_api_strict`` (which refuses anything outside the array API standard, so a kernel
that passes there is written against the namespace, not against numpy). Helpers live in
``library_harness``."""

from __future__ import annotations

import pytest
from library_harness import Bound, bind, numpy_erf, strict_erf

from onyxrt_ops import namespace_backend, numpy_backend


@pytest.fixture(scope="session")
def numpy_bound() -> Bound:
    """The library over numpy, with an erf."""
    return bind("numpy", numpy_backend(extras={"erf": numpy_erf}))


@pytest.fixture(scope="session")
def strict_bound() -> Bound:
    """The library over array_api_strict, with an erf."""
    import array_api_strict as xp  # a test requirement: never skipped
    return bind("array_api_strict", namespace_backend(xp, extras={"erf": strict_erf}))


@pytest.fixture(params=["numpy", "array_api_strict"])
def bound(request: pytest.FixtureRequest) -> Bound:
    """The library over each backend in turn."""
    return request.getfixturevalue("numpy_bound" if request.param == "numpy" else "strict_bound")
