"""Run unchanged onnxruntime code on onyxrt: ``import onnxruntime`` resolves to onyxrt.

    import onyxrt.compat
    onyxrt.compat.install()      # before the library that imports onnxruntime
    import rapidocr_onnxruntime  # its `import onnxruntime as ort` now gets onyxrt

or, without touching the program at all::

    python -m onyxrt.compat your_app.py ARGS     # also: -m module ARGS, -c CODE
    onyxrt shim -- python your_app.py ARGS       # any command; child processes too

What :func:`install` maps (a finder placed first on ``sys.meta_path``, so it wins over
an installed onnxruntime):

* ``onnxruntime`` → a module that is onyxrt's public API plus onnxruntime's module
  attributes (``__version__`` is :data:`ONNXRUNTIME_API_VERSION`, the onnxruntime release
  whose API onyxrt mirrors, so version checks in libraries pass; ``onyxrt_version`` says
  what runs underneath);
* ``onnxruntime.capi`` and its submodules (``_pybind_state``,
  ``onnxruntime_pybind11_state``, ``onnxruntime_inference_collection``...) →
  :mod:`onyxrt.capi`, so ``except C.InvalidArgument`` catches onyxrt's errors;
* ``onnxruntime.backend`` → :mod:`onyxrt.backend`; ``onnxruntime.datasets`` →
  :mod:`onyxrt.datasets`;
* onnxruntime's tool subpackages (``quantization``, ``transformers``, ``tools``) are not
  part of onyxrt: when onnxruntime itself is installed they are loaded from it, with their
  own ``import onnxruntime`` resolved to onyxrt; otherwise importing one raises an
  ``ImportError`` that says so.

Package metadata follows: when onnxruntime is not installed,
``importlib.metadata.version("onnxruntime")`` answers :data:`ONNXRUNTIME_API_VERSION`
while the shim is installed (libraries check it before importing). pip's dependencies are
untouched: the shim needs no onnxruntime installed, and an installed one is never imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import threading
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ONNXRUNTIME_API_VERSION",
    "CompatWarning",
    "install",
    "uninstall",
    "is_installed",
    "shim_pythonpath",
    "shim_environment",
]

#: The onnxruntime release whose Python API onyxrt mirrors; the shimmed ``onnxruntime``
#: module reports it as its ``__version__``.
ONNXRUNTIME_API_VERSION = "1.31.1"

#: onnxruntime's subpackages onyxrt serves itself, by the onyxrt module serving each.
_SERVED = {
    "onnxruntime.capi": "onyxrt.capi",
    "onnxruntime.backend": "onyxrt.backend",
    "onnxruntime.datasets": "onyxrt.datasets",
}
#: onnxruntime's tool subpackages: loaded from an installed onnxruntime when there is one.
_TOOLS = ("onnxruntime.quantization", "onnxruntime.transformers", "onnxruntime.tools")

_lock = threading.RLock()
_finder: _OnnxruntimeFinder | None = None


class CompatWarning(UserWarning):
    """The shim was installed after the real onnxruntime had been imported."""


def _facade() -> types.ModuleType:
    """The ``onnxruntime`` module under the shim: onyxrt's names plus onnxruntime's
    module attributes."""
    import onyxrt

    module = types.ModuleType("onnxruntime", onyxrt.__doc__)
    spec = importlib.machinery.ModuleSpec("onnxruntime", None, is_package=True)
    spec.submodule_search_locations = []
    attributes = {k: v for k, v in vars(onyxrt).items() if not k.startswith("__")}
    attributes.update({
        "__version__": ONNXRUNTIME_API_VERSION,
        "version": ONNXRUNTIME_API_VERSION,
        "onyxrt_version": onyxrt.__version__,
        "get_version_string": lambda: ONNXRUNTIME_API_VERSION,
        "package_name": "onnxruntime",
        "__path__": [],  # a package: its submodules come through the finder
        # importlib.util.find_spec("onnxruntime") reads the spec of an imported module;
        # libraries that look for files beside onnxruntime/__init__.py find onyxrt's.
        "__spec__": spec,
        "__file__": onyxrt.__file__,
        "__onyxrt_shim__": True,
        "__all__": list(getattr(onyxrt, "__all__", [])),
        # onyxrt's names imported on first use (and cuda_version) come through onyxrt.
        "__getattr__": lambda name: getattr(onyxrt, name),
        "__dir__": lambda: sorted({*module.__dict__, *dir(onyxrt)}),
    })
    module.__dict__.update(attributes)
    return module


def _real_onnxruntime_dir() -> list[str] | None:
    """Where an installed onnxruntime package lives (found on sys.path, never imported)."""
    spec = importlib.machinery.PathFinder.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)


class _ReplaceWith(importlib.abc.Loader):
    """Loads a module by putting another, already imported, in its place: the import
    system returns whatever ``sys.modules`` holds under the name after ``exec_module``,
    so the target keeps its own name and spec."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        target = self._target() if callable(self._target) else self._target
        sys.modules[module.__spec__.name] = target  # type: ignore[union-attr]


class _ToolUnavailable(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__spec__.name  # type: ignore[union-attr]
        raise ImportError(
            f"{name} is one of onnxruntime's tool subpackages, which onyxrt does not ship "
            "(onyxrt runs the models they produce). Under onyxrt.compat it is loaded from "
            "an installed onnxruntime: pip install onnxruntime (it is then used for its "
            "tools only; `import onnxruntime` keeps resolving to onyxrt).",
            name=name,
        )


class _OnnxruntimeFinder(importlib.abc.MetaPathFinder):
    """Resolves ``onnxruntime`` and its submodules to onyxrt (see the module docstring)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "onnxruntime":
            return importlib.machinery.ModuleSpec(fullname, _ReplaceWith(_facade), is_package=True)
        if not fullname.startswith("onnxruntime."):
            return None
        for prefix, served in _SERVED.items():
            if fullname == prefix or fullname.startswith(prefix + "."):
                onyx_name = served + fullname[len(prefix):]
                return importlib.machinery.ModuleSpec(
                    fullname, _ReplaceWith(lambda n=onyx_name: importlib.import_module(n)),
                    is_package=True,
                )
        top = ".".join(fullname.split(".")[:2])
        if top in _TOOLS:
            real = _real_onnxruntime_dir()
            if real is None:
                return importlib.machinery.ModuleSpec(fullname, _ToolUnavailable())
            # The tool's own files, loaded as a submodule of the shimmed package.
            search = real if fullname == top else path
            return importlib.machinery.PathFinder.find_spec(fullname, search)
        return None  # an unknown submodule: the import fails as it would on onnxruntime

    def find_distributions(self, context: Any = None) -> Any:
        """``importlib.metadata`` answers for onnxruntime when it is not installed."""
        if context is None or context.name != "onnxruntime":
            return iter(())
        for other in sys.meta_path:
            if other is self or not hasattr(other, "find_distributions"):
                continue
            if next(iter(other.find_distributions(context)), None) is not None:
                return iter(())  # the real one answers
        return iter((_ShimDistribution(),))


class _ShimDistribution(importlib.metadata.Distribution):
    """onnxruntime's package metadata while the shim stands in for it."""

    def read_text(self, filename: str) -> str | None:
        if filename == "METADATA":
            import onyxrt

            return (
                "Metadata-Version: 2.1\nName: onnxruntime\n"
                f"Version: {ONNXRUNTIME_API_VERSION}\n"
                f"Summary: onyxrt {onyxrt.__version__} standing in for onnxruntime (onyxrt.compat)\n"
            )
        return None

    def locate_file(self, path: Any) -> Path:
        return Path(__file__).parent / str(path)


def install() -> None:
    """Make ``import onnxruntime`` (and its submodules) resolve to onyxrt in this process.

    Call it before the code that imports onnxruntime. If onnxruntime was imported already,
    a :class:`CompatWarning` says so: later imports get onyxrt, but modules that imported
    it earlier keep the real one. Calling it twice is harmless.
    """
    global _finder
    with _lock:
        if _finder is not None:
            return
        loaded = sorted(n for n, m in sys.modules.items()
                        if (n == "onnxruntime" or n.startswith("onnxruntime."))
                        and not getattr(m, "__onyxrt_shim__", False))
        if loaded:
            warnings.warn(
                "onnxruntime was imported before onyxrt.compat.install(); modules that "
                "imported it keep the real onnxruntime. Install the shim first (or run "
                "the program with `python -m onyxrt.compat`).",
                CompatWarning,
                stacklevel=2,
            )
            for name in loaded:
                del sys.modules[name]
        _finder = _OnnxruntimeFinder()
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """Undo :func:`install`: ``import onnxruntime`` finds the real package again (modules
    that already hold the shimmed one keep it)."""
    global _finder
    with _lock:
        if _finder is None:
            return
        sys.meta_path.remove(_finder)
        _finder = None
        for name in [n for n in sys.modules if n == "onnxruntime" or n.startswith("onnxruntime.")]:
            module = sys.modules[name]
            if getattr(module, "__onyxrt_shim__", False) or getattr(module, "__name__", "").startswith("onyxrt"):
                del sys.modules[name]


def is_installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _finder is not None


def shim_pythonpath() -> str:
    """A folder that, placed first on ``PYTHONPATH``, makes every Python process started
    with it run onnxruntime code on onyxrt (it holds an ``onnxruntime`` package whose
    import installs the shim)."""
    return str(Path(__file__).parent / "shim_path")


def shim_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with :func:`shim_pythonpath` first on
    ``PYTHONPATH``."""
    env = dict(os.environ if env is None else env)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != shim_pythonpath()]
    env["PYTHONPATH"] = os.pathsep.join([shim_pythonpath(), *parts])
    return env
