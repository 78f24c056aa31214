"""Tests of the strict simulated CuPy (onyxrt_gpu.testing.simulated_cupy).

Two kinds: the strictness the GPU tests rely on (implicit conversion refused, numpy never
mixed in silently, memory metered against the capacity, every allocation through the
current allocator, counted transfers), and the attribute surface: every public name the
simulation defines must exist in the real ``cupy`` package, checked in a subprocess that
imports real CuPy (it imports without a GPU; the test skips when it is not installed).
"""

from __future__ import annotations

import gc
import math
import sys
import threading

import numpy as np
import pytest

from onyxrt_gpu.testing import simulated_cupy as sc
from onyxrt_gpu.testing.simulated_cupy import install


def f32(*shape: int, seed: int = 0) -> np.ndarray:
    """Seeded float32 test data."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ installation


def test_install_puts_and_restores_modules():
    marker = object()
    sys.modules["cupyx.scipy"] = marker  # type: ignore[assignment]
    try:
        before = {name: sys.modules.get(name) for name in sc.MODULE_NAMES}
        with install() as sim:
            import cupy
            import cupy.cuda.runtime
            import cupyx.scipy.special

            assert cupy is sim.cupy
            assert cupy.__onyxrt_simulated__ is True
            assert cupy.cuda.runtime is sim.modules["cupy.cuda.runtime"]
            assert callable(cupyx.scipy.special.erf)
            for name in sc.MODULE_NAMES:
                assert sys.modules[name] is sim.modules[name]
        assert {name: sys.modules.get(name) for name in sc.MODULE_NAMES} == before
        assert sys.modules["cupyx.scipy"] is marker
    finally:
        del sys.modules["cupyx.scipy"]


def test_nested_installs_and_use_after_uninstall():
    with install() as outer:
        with install(hip=True) as inner:
            assert sys.modules["cupy"] is inner.cupy
            assert sys.modules["cupy"].cuda.runtime.is_hip
        assert sys.modules["cupy"] is outer.cupy
        assert not sys.modules["cupy"].cuda.runtime.is_hip
    with pytest.raises(RuntimeError, match="not installed"):
        outer.cupy.zeros(3)


def test_no_fallback_getattr(sim_cupy):
    for mod in sim_cupy.modules.values():
        assert not hasattr(mod, "__getattr__")
        with pytest.raises(AttributeError):
            mod.no_such_function  # noqa: B018
    with pytest.raises(AttributeError):
        sim_cupy.cupy.ElementwiseKernel  # noqa: B018 - kernels do not use it: not simulated


# ------------------------------------------------------------------ strictness


def test_implicit_conversion_is_refused(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(f32(2, 3))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(x)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array([x])
    with pytest.raises(TypeError):
        float(x)
    with pytest.raises(TypeError):
        int(x)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    # One-element arrays convert, as a counted device-to-host copy.
    sim_cupy.reset_counters()
    assert float(x[0, 1]) == pytest.approx(float(f32(2, 3)[0, 1]))
    assert bool(cp.asarray(np.array([1.0])))
    assert sim_cupy.d2h == 2


def test_numpy_is_never_mixed_in(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(f32(4))
    host = f32(4)
    for fn in (
        lambda: cp.add(x, host),
        lambda: x + host,
        lambda: host + x,
        lambda: x * np.float32(2) + host,
        lambda: cp.where(host > 0, x, x),
        lambda: cp.concatenate([x, host]),
        lambda: x[np.array([0, 1])],
        lambda: x.__setitem__(slice(None), host),
        lambda: cp.take(x, np.array([0])),
        lambda: cp.lib.stride_tricks.as_strided(host),
        lambda: cp.result_type(host, x),
    ):
        with pytest.raises(TypeError):
            fn()
    # numpy functions on device arrays are refused (kernels must call cupy).
    with pytest.raises(TypeError, match="call the cupy function"):
        np.exp(x)
    with pytest.raises(TypeError):
        np.concatenate([x, x])
    # numpy scalars and Python scalars are fine, with numpy's (NEP 50) dtype rules.
    assert (x * 2.0).dtype == np.float32
    assert (x * np.float64(2.0)).dtype == np.float64
    assert (cp.asarray(np.arange(3, dtype=np.int32)) + 1).dtype == np.int32


def test_devices_must_match(sim_cupy):
    with install(device_count=2) as sim:
        cp = sim.cupy
        a = cp.ones(3, cp.float32)
        with cp.cuda.Device(1):
            b = cp.ones(3, cp.float32)
            assert b.device.id == 1
            with pytest.raises(ValueError, match="Array device must be same as the current"):
                a + b
            sim.reset_counters()
            c = cp.asarray(a)  # copied to device 1
            assert c.device.id == 1 and sim.d2d == 1 and sim.d2d_bytes == 12
            assert (c + b).get().tolist() == [2, 2, 2]
        assert cp.cuda.Device().id == 0


def test_runtime_and_hip_flag():
    with install(device_count=3, memory_bytes=1 << 20) as sim:
        rt = sim.cupy.cuda.runtime
        assert rt.getDeviceCount() == 3
        assert rt.is_hip is False
        assert rt.runtimeGetVersion() >= 12000
        assert sim.cupy.cuda.Device(2).mem_info == (1 << 20, 1 << 20)
        with pytest.raises(rt.CUDARuntimeError, match="invalid device ordinal"):
            sim.cupy.cuda.Device(3).use()
        assert isinstance(sim.cupy.__version__, str)
    with install(hip=True) as sim:
        cp = sim.cupy
        assert cp.cuda.runtime.is_hip is True
        assert cp.asarray(f32(2)).__dlpack_device__() == (10, 0)  # kDLROCM


def test_no_device_behaves_like_a_machine_without_gpu():
    with install(device_count=0) as sim:
        cp = sim.cupy
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError) as err:
            cp.cuda.runtime.getDeviceCount()
        assert str(err.value) == "cudaErrorNoDevice: no CUDA-capable device is detected"
        assert isinstance(err.value, RuntimeError)
        assert not cp.is_available()
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
            cp.zeros(3)
        with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
            cp.asarray(f32(3))


def test_driver_version():
    with install() as sim:
        rt = sim.cupy.cuda.runtime
        assert rt.driverGetVersion() == rt.runtimeGetVersion()
    with install(driver_version=13000) as sim:
        assert sim.cupy.cuda.runtime.driverGetVersion() == 13000
    with install(driver_version=0) as sim:  # real CuPy's answer without a driver
        assert sim.cupy.cuda.runtime.driverGetVersion() == 0


def test_without_a_compiler_every_kernel_fails_as_in_cupy():
    """Only the driver, no NVRTC: copies, views and bare allocations work; anything that
    would compile a kernel raises CuPy's error and writes nothing."""
    with install(missing_libraries=("compiler",)) as sim:
        cp = sim.cupy
        x = cp.asarray(np.arange(4, dtype=np.float32))
        assert x.reshape(2, 2).shape == (2, 2) and x[1:].size == 3 and x.T.shape == (4,)
        assert cp.zeros(3, np.float32).shape == (3,)
        for compute in (lambda: x * 2, lambda: cp.exp(x), lambda: x.astype(np.float64),
                        lambda: x.sum(), lambda: x.fill(7), lambda: cp.add(x, 1, out=x),
                        lambda: x.__setitem__(0, 5), lambda: cp.ones(3)):
            with pytest.raises(RuntimeError, match=r'Failure finding "libnvrtc\.so\.13 or libnvrtc\.so\.12"'):
                compute()
        with pytest.raises(RuntimeError, match="libnvrtc"):
            x += 1
        assert x.get().tolist() == [0, 1, 2, 3]
    with install(hip=True, missing_libraries=("compiler",)) as sim, \
            pytest.raises(ImportError, match="libhiprtc"):
        sim.cupy.asarray(f32(2)) + 1


def test_without_blas_matmuls_fail_as_in_cupy():
    with install(missing_libraries=("blas",)) as sim:
        cp = sim.cupy
        a = cp.asarray(f32(2, 2))
        assert (a + 1).shape == (2, 2)
        for multiply in (lambda: cp.matmul(a, a), lambda: a @ a, lambda: a.dot(a),
                         lambda: cp.einsum("ij,jk->ik", a, a)):
            with pytest.raises(ImportError, match=r"libcublas\.so\.12: cannot open shared object file"):
                multiply()
    with install(hip=True, missing_libraries=("blas",)) as sim, \
            pytest.raises(ImportError, match="libhipblas"):
        sim.cupy.matmul(sim.cupy.asarray(f32(2, 2)), sim.cupy.asarray(f32(2, 2)))
    with pytest.raises(ValueError, match="unknown libraries"):
        install(missing_libraries=("cudnn",))


# ------------------------------------------------------------------ memory


def test_out_of_memory_past_capacity():
    with install(memory_bytes=1 << 20) as sim:
        cp = sim.cupy
        with cp.cuda.using_allocator(None):
            keep = cp.cuda.Memory(600_000)
            with pytest.raises(cp.cuda.memory.OutOfMemoryError) as err:
                cp.cuda.Memory(600_000)
            assert isinstance(err.value, MemoryError)
            assert "600,000 bytes" in str(err.value)
            assert sim.bytes_in_use() == 600_000
        with pytest.raises(cp.cuda.memory.OutOfMemoryError):
            cp.empty((1 << 20,), cp.float32)  # through the default pool
        del keep
        assert sim.bytes_in_use() == 0
        cp.empty((1 << 18,), cp.float32)  # exactly the capacity, freed at once


def test_memory_is_returned_when_the_last_reference_dies(sim_cupy):
    cp = sim_cupy.cupy
    pool = cp.get_default_memory_pool()
    with cp.cuda.using_allocator(None):
        x = cp.asarray(f32(256))
        view = x[::2]
        del x
        assert sim_cupy.bytes_in_use() == 1024  # the view keeps the allocation alive
        del view
        gc.collect()
        assert sim_cupy.bytes_in_use() == 0
    y = cp.ones(100, cp.float32)  # 400 bytes: a 512-byte pool block
    assert pool.used_bytes() == 512 and pool.total_bytes() == 512
    del y
    assert pool.used_bytes() == 0 and pool.n_free_blocks() == 1
    assert sim_cupy.bytes_in_use() == 512  # cached by the pool
    allocations = sim_cupy.allocations
    z = cp.zeros(128, cp.float32)  # same rounded size: reuses the cached block
    assert sim_cupy.allocations == allocations
    del z
    pool.free_all_blocks()
    assert sim_cupy.bytes_in_use() == 0 and pool.total_bytes() == 0
    assert sim_cupy.peak_bytes() >= 1024


def test_pool_limit():
    with install() as sim:
        cp = sim.cupy
        pool = cp.get_default_memory_pool()
        pool.set_limit(size=4096)
        assert pool.get_limit() == 4096
        a = cp.zeros(512, cp.float32)  # 2048 bytes
        with pytest.raises(cp.cuda.memory.OutOfMemoryError, match="limit set to: 4,096 bytes"):
            cp.zeros(1024, cp.float32)
        del a
        cp.zeros(1024, cp.float32)  # the cached block is released to make room
        pool.set_limit(size=0)
        assert pool.get_limit() == 0


def test_using_allocator_routes_every_allocation(sim_cupy):
    cp = sim_cupy.cupy
    arena = cp.cuda.Memory(1 << 16)
    offset = [0]
    requests: list[int] = []

    def bump(nbytes: int):
        requests.append(nbytes)
        ptr = cp.cuda.MemoryPointer(arena, offset[0])
        offset[0] += -(-nbytes // 256) * 256
        return ptr

    x = cp.asarray(f32(8))
    with cp.cuda.using_allocator(bump):
        y = cp.exp(x)
        z = cp.empty((4, 4), cp.float32)
        w = x.reshape(2, 4)  # a view: no allocation
        seen_by_other_thread = []
        t = threading.Thread(target=lambda: seen_by_other_thread.append(cp.cuda.get_allocator()))
        t.start()
        t.join()
    assert requests == [32, 64]
    for arr in (y, z):
        assert arena.ptr <= arr.data.ptr < arena.ptr + arena.size
        assert arr.data.mem is arena
    assert w.data.mem is x.data.mem
    assert seen_by_other_thread[0] is not bump  # the allocator is thread-local
    np.testing.assert_allclose(y.get(), np.exp(f32(8)), rtol=1e-6)

    def wrong(nbytes: int):
        return object()

    with cp.cuda.using_allocator(wrong), pytest.raises(TypeError, match="MemoryPointer"):
        cp.zeros(3)


def test_arrays_over_external_memory(sim_cupy):
    cp = sim_cupy.cupy
    region = cp.cuda.Memory(4096)
    mem = cp.cuda.UnownedMemory(region.ptr + 256, 1024, region, device_id=0)
    a = cp.ndarray((16,), cp.float32, cp.cuda.MemoryPointer(mem, 0))
    b = cp.ndarray((4, 4), cp.float32, cp.cuda.MemoryPointer(region, 256))
    a[...] = cp.arange(16, dtype=cp.float32)
    assert b.get().ravel().tolist() == list(range(16))  # the same bytes
    with pytest.raises(ValueError, match="out-of-bounds"):
        cp.ndarray((300,), cp.float32, cp.cuda.MemoryPointer(mem, 0))
    with pytest.raises(ValueError, match="aligned"):
        cp.ndarray((2,), cp.float32, cp.cuda.MemoryPointer(region, 2))
    host = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="not inside live simulated device memory"):
        cp.cuda.UnownedMemory(host.ctypes.data, 16, host)
    # Raw copies through memory pointers are counted like transfers.
    sim_cupy.reset_counters()
    src = np.arange(4, dtype=np.float32)
    b.data.copy_from_host(src.ctypes.data, src.nbytes)
    out = np.empty(4, np.float32)
    a.data.copy_to_host(out.ctypes.data, out.nbytes)
    assert out.tolist() == [0, 1, 2, 3]
    assert (sim_cupy.h2d, sim_cupy.d2h) == (1, 1)


def test_as_strided_views_are_bounds_checked(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(np.arange(12, dtype=np.float32))
    v = cp.lib.stride_tricks.as_strided(x, (3, 2), (16, 4))
    assert v.get().tolist() == [[0, 1], [4, 5], [8, 9]]
    assert v.data.mem is x.data.mem and v.base is x
    with pytest.raises(ValueError, match="out-of-bounds"):
        cp.lib.stride_tricks.as_strided(x, (4, 2), (16, 4))
    w = cp.lib.stride_tricks.sliding_window_view(x, 3)
    assert w.shape == (10, 3) and w.data.mem is x.data.mem


# ------------------------------------------------------------------ counters


def test_transfer_counters(sim_cupy):
    cp = sim_cupy.cupy
    host = f32(3, 4)
    x = cp.asarray(host)
    assert (sim_cupy.h2d, sim_cupy.h2d_bytes) == (1, 48)
    assert cp.asarray(x) is x  # already on the device: no copy
    y = (x * 2).sum(axis=1)
    z = cp.asarray(host, dtype=cp.float64)
    assert sim_cupy.h2d == 2 and sim_cupy.h2d_bytes == 48 + 96
    assert sim_cupy.d2h == 0 and sim_cupy.launches >= 2
    np.testing.assert_allclose(y.get(), (host * 2).sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(z), host, rtol=1e-6)
    assert (sim_cupy.d2h, sim_cupy.d2h_bytes) == (2, 12 + 96)
    pinned = cp.cuda.alloc_pinned_memory(48)
    buf = np.frombuffer(pinned, np.float32, 12).reshape(3, 4)
    x.get(out=buf)
    np.testing.assert_array_equal(buf, host)
    x.set(buf * 0)
    assert sim_cupy.d2h == 3 and sim_cupy.h2d == 3
    assert sim_cupy.pinned_bytes_in_use == 48
    del buf, pinned
    gc.collect()
    assert sim_cupy.pinned_bytes_in_use == 0
    counters = sim_cupy.counters()
    assert counters["h2d"] == 3 and "bytes_in_use[0]" in counters
    sim_cupy.reset_counters()
    assert sim_cupy.h2d == sim_cupy.d2h == sim_cupy.launches == 0


def test_pinned_arrays(sim_cupy):
    import cupyx

    a = cupyx.empty_pinned((2, 3), np.float32)
    assert isinstance(a, np.ndarray) and a.shape == (2, 3)
    assert sim_cupy.pinned_bytes_in_use == 24
    assert isinstance(sim_cupy.cupy.cuda.alloc_pinned_memory(8), sim_cupy.cupy.cuda.PinnedMemoryPointer)
    assert cupyx.zeros_pinned(4).sum() == 0


def test_fuse_counts_one_launch(sim_cupy):
    cp = sim_cupy.cupy

    @cp.fuse()
    def gelu_like(x, a):
        return x * cp.maximum(x * a, 0.0) + cp.exp(x)

    x = cp.asarray(f32(5))
    sim_cupy.reset_counters()
    y = gelu_like(x, 0.5)
    assert sim_cupy.launches == 1
    h = f32(5)
    np.testing.assert_allclose(y.get(), h * np.maximum(h * 0.5, 0) + np.exp(h), rtol=1e-6)
    with pytest.raises(TypeError):
        gelu_like(h, 0.5)


def test_erf_matches_math_erf_and_cupy_dtypes(sim_cupy):
    cp = sim_cupy.cupy
    from cupyx.scipy.special import erf

    xs = np.linspace(-4, 4, 101)
    got = erf(cp.asarray(xs)).get()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [math.erf(v) for v in xs], rtol=1e-15, atol=1e-16)
    assert erf(cp.asarray(xs.astype(np.float32))).dtype == np.float32
    assert erf(cp.asarray(xs.astype(np.float16))).dtype == np.float32  # CuPy's 'f->f' loop


def test_views_share_memory_and_copies_do_not(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(f32(2, 3, 4))
    for view in (x.reshape(6, 4), x.transpose(2, 0, 1), x[:, 1], x[..., ::-1], cp.squeeze(x[:1])):
        assert view.data.mem is x.data.mem and view.base is x
    copy = x.transpose(1, 0, 2).reshape(6, 4)  # no view can express it: reshape copies
    assert copy.data.mem is not x.data.mem
    x[0] = 0
    assert float(x.reshape(6, 4)[0, 0]) == 0.0
    assert cp.ascontiguousarray(x) is x


def test_dlpack(sim_cupy):
    cp = sim_cupy.cupy
    x = cp.asarray(f32(4))
    y = cp.from_dlpack(x)
    assert y.data.mem is x.data.mem
    assert cp.from_dlpack(x.toDlpack()).data.mem is x.data.mem
    assert x.__dlpack_device__() == (2, 0)  # kDLCUDA
    with pytest.raises(BufferError):
        np.from_dlpack(x)
    with pytest.raises(BufferError):
        cp.from_dlpack(f32(4))
    z = cp.asarray(_Interface(x))  # __cuda_array_interface__: zero-copy
    assert z.data.ptr == x.data.ptr


class _Interface:
    """An object exposing only ``__cuda_array_interface__`` (like a torch CUDA tensor)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = arr.__cuda_array_interface__
        self.keep = arr


def test_streams_events_and_synchronization(sim_cupy):
    cp = sim_cupy.cupy
    s = cp.cuda.Stream(non_blocking=True)
    assert cp.cuda.get_current_stream() == cp.cuda.Stream.null
    with s:
        assert cp.cuda.get_current_stream() is s
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        cp.ones(3).sum()
        end.record()
        end.synchronize()
    assert cp.cuda.get_elapsed_time(start, end) >= 0
    cp.cuda.get_current_stream().synchronize()
    cp.cuda.Device(0).synchronize()
    assert sim_cupy.synchronizations == 3


# ------------------------------------------------------------------ attribute surface

_PROBE = r"""
import importlib, importlib.util, json, re, sys, zlib
wanted = json.load(sys.stdin)
import cupy
if getattr(cupy, "__onyxrt_simulated__", False):
    raise SystemExit("the cupy found is the simulation, not the real package")
# Modules CuPy makes on first attribute access and that load a CUDA library (cuBLAS):
# the extension module that implements each.
BACKING = {"cupy.cuda.cublas": "cupy_backends.cuda.libs.cublas"}

def resolve(name):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:  # cupy.cuda.cublas is an attribute of cupy.cuda, not a file
        parent, _, attr = name.rpartition(".")
        return getattr(resolve(parent), attr)

def strings_of(name):
    # The library is missing here (no CUDA toolkit): read the names from the Cython
    # extension instead, whose string table may be zlib-compressed.
    data = open(importlib.util.find_spec(BACKING[name]).origin, "rb").read()
    texts = [data]
    for m in re.finditer(rb"\x78[\x01\x5e\x9c\xda]", data):
        try:
            out = zlib.decompressobj().decompress(data[m.start():m.start() + (1 << 22)])
        except zlib.error:
            continue
        if len(out) > 256:
            texts.append(out)
    return texts

def has(obj, attr):
    try:
        getattr(obj, attr)
    except AttributeError:
        return False
    except ImportError:  # the name exists; its CUDA library is not installed here
        return True
    return True

missing, scanned = [], []
modules = {}
for name, attrs in wanted["modules"].items():
    try:
        modules[name] = resolve(name)
    except ImportError:
        if name not in BACKING:
            raise
        texts = strings_of(name)
        scanned.append(name)
        missing += [f"{name}.{a}" for a in attrs if not any(a.encode() in t for t in texts)]
        continue
    missing += [f"{name}.{a}" for a in attrs if not has(modules[name], a)]
for key, attrs in wanted["classes"].items():
    mod, cls = key.rsplit(".", 1)
    klass = getattr(modules[mod], cls)
    missing += [f"{key}.{a}" for a in attrs if not has(klass, a)]
print(json.dumps({"version": cupy.__version__, "missing": missing, "scanned": scanned}))
"""


def _public(obj: object) -> list[str]:
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def test_attribute_surface_matches_real_cupy(real_cupy):
    """Every public name of the simulated modules and classes exists in real CuPy."""
    sim = sc.SimulatedCupy()
    wanted = {
        "modules": {name: _public(mod) for name, mod in sim.modules.items()},
        "classes": {
            f"{mod}.{cls}": _public(getattr(sim.modules[mod], cls))
            for mod, cls in sc.SIMULATED_CLASSES
        },
    }
    assert sum(len(v) for v in wanted["modules"].values()) > 100
    report = real_cupy(_PROBE, wanted)
    assert report["missing"] == [], (
        f"the simulated CuPy defines names real CuPy {report['version']} lacks: "
        f"{report['missing']}"
    )
