"""ImageDecoder against the conformance cases, and its message without Pillow."""

from __future__ import annotations

import builtins

import pytest
from kernel_cases import conformance_params, run_case
from onnx import helper

from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels.image import ImageDecoder

pytest.importorskip("PIL", reason="ImageDecoder needs Pillow (the image extra)")


@pytest.mark.parametrize("case", conformance_params(["ImageDecoder"], {}))
def test_conformance(case):
    run_case(case)


def test_without_pillow_the_error_says_what_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name.startswith("PIL"):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    node = helper.make_node("ImageDecoder", ["x"], ["y"], name="decode")
    with pytest.raises(NotImplementedError, match=r"onyxrt-cpu\[image\]"):
        ImageDecoder(KernelInfo.from_node(node, 20))
