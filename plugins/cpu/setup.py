"""Build of onyxrt-cpu's optional compiled inner loops (``onyxrt_cpu._native``, from
the C sources in ``csrc/``: one file per kernel family, shared declarations in
``csrc/native.h``).

Everything else is declared in pyproject.toml. The extension is optional: without a C
compiler (or with ``ONYXRT_CPU_PURE=1``) the package installs as pure Python and the
provider runs its numpy kernels; ``onyxrt providers`` says which build is installed.
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class _BuildExt(build_ext):
    """Optimization flags for the compiler actually used (gcc/clang or MSVC)."""

    def build_extensions(self) -> None:
        unix = self.compiler.compiler_type == "unix"
        for ext in self.extensions:
            # -fstrict-aliasing undoes Python's default -fno-strict-aliasing (the C code
            # never type-puns), so stores to float arrays do not force reloads of sizes;
            # -fno-tree-loop-distribute-patterns keeps short copy loops from being turned
            # back into memcpy/memset calls.
            # -fvisibility=hidden: only PyInit__native is exported.
            unix_flags = ["-O3", "-std=c99", "-fstrict-aliasing", "-fvisibility=hidden"]
            if "gcc" in " ".join(self.compiler.compiler_so):
                unix_flags.append("-fno-tree-loop-distribute-patterns")
            # -pthread: csrc/threads.c's pool.
            ext.extra_compile_args = unix_flags + ["-pthread"] if unix else ["/O2"]
            ext.extra_link_args = ["-pthread"] if unix else []
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
