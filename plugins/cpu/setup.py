"""Build of onyxrt-cpu's optional compiled inner loops (``onyxrt_cpu._native``, from
the C sources in ``csrc/``: one file per kernel family, shared declarations in
``csrc/native.h``).

Everything else is declared in pyproject.toml. The extension is optional: without a C
compiler (or with ``ONYXRT_CPU_PURE=1``) the package installs as pure Python and the
provider runs its numpy kernels; ``onyxrt providers`` says which build is installed.
"""

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _parallel_compile(compile_one, jobs: int):  # type: ignore[no-untyped-def]
    """A drop-in for a distutils compiler's ``compile``: the sources in ``jobs`` threads
    (each runs the compiler in its own process), one progress line per source on stderr
    (``pip install -v`` shows them), object files in the order of the sources."""
    lock = threading.Lock()

    def compile_all(sources, *args, **kwargs):  # type: ignore[no-untyped-def]
        done = [0]

        def one(source):  # type: ignore[no-untyped-def]
            objects = compile_one([source], *args, **kwargs)
            with lock:
                done[0] += 1
                print(f"onyxrt-cpu: compiled {source} ({done[0]}/{len(sources)})", file=sys.stderr, flush=True)
            return objects

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return [obj for objects in pool.map(one, sources) for obj in objects]

    return compile_all


class _BuildExt(build_ext):
    """Optimization flags for the compiler actually used (gcc/clang or MSVC); the C files
    compiled in parallel (``ONYXRT_CPU_BUILD_JOBS``, default: every CPU) with progress
    lines; no debug information and the module stripped of symbols (6.1 MB to 4.0 MB;
    ``ONYXRT_CPU_DEBUG=1`` keeps both)."""

    def build_extension(self, ext: Extension) -> None:
        jobs = int(os.environ.get("ONYXRT_CPU_BUILD_JOBS") or os.cpu_count() or 1)
        print(f"onyxrt-cpu: compiling {len(ext.sources)} C files of {ext.name} on {jobs} "
              "job(s); a few minutes", file=sys.stderr, flush=True)
        self.compiler.compile = _parallel_compile(self.compiler.compile, jobs)  # type: ignore[method-assign]
        super().build_extension(ext)

    def build_extensions(self) -> None:
        unix = self.compiler.compiler_type == "unix"
        for ext in self.extensions:
            # -fstrict-aliasing undoes Python's default -fno-strict-aliasing (the C code
            # never type-puns), so stores to float arrays do not force reloads of sizes;
            # -fno-tree-loop-distribute-patterns keeps short copy loops from being turned
            # back into memcpy/memset calls.
            # -fvisibility=hidden: only PyInit__native is exported.
            unix_flags = ["-O3", "-std=c99", "-fstrict-aliasing", "-fvisibility=hidden"]
            # -g0 (after Python's own -g): no debug information unless asked for; it
            # doubled the compile time of the largest file (nchwc.c: 1m56s against ~4 min)
            # and the symbols are stripped from the module anyway.
            if os.environ.get("ONYXRT_CPU_DEBUG", "") in ("", "0"):
                unix_flags.append("-g0")
            if "gcc" in " ".join(self.compiler.compiler_so):
                unix_flags.append("-fno-tree-loop-distribute-patterns")
            # -pthread: csrc/threads.c's pool.
            ext.extra_compile_args = unix_flags + ["-pthread"] if unix else ["/O2"]
            strip = [] if os.environ.get("ONYXRT_CPU_DEBUG", "") not in ("", "0") else ["-s"]
            ext.extra_link_args = ["-pthread", *strip] if unix else []
        super().build_extensions()


if os.environ.get("ONYXRT_CPU_PURE", "") in ("", "0"):
    import numpy  # csrc/guard.c sets numpy's allocator (NEP 49): numpy's headers

    sources = sorted(str(p) for p in Path("csrc").glob("*.c"))
    extensions = [
        Extension(
            "onyxrt_cpu._native",
            sources,
            include_dirs=["csrc", numpy.get_include()],
            depends=["csrc/native.h", "csrc/vec16.h"],
            optional=True,
        )
    ]
else:
    extensions = []

setup(ext_modules=extensions, cmdclass={"build_ext": _BuildExt})
