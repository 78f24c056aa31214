"""The program cache against a hostile file system.

Whoever can write into a cache folder must not be able to change a later session's
results, and nothing planted there may hang a session or exhaust its memory. What could
hang or eat memory on a regression runs in a child process with a timeout and an
address-space cap, so a regression fails the test instead of freezing the runner.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onyxrt as ort
from onyxrt.graph import Graph
from onyxrt.protocol import FusedSubgraph
from onyxrt_simnpu.cache import (
    DEFAULT_MAX_ENTRY_BYTES,
    ENTRY_MAGIC,
    SUFFIX,
    ProgramCache,
    key_file,
)
from onyxrt_simnpu.compiler import cache_key, compile_group, program_mismatch

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX ownership checks")

NPU = "SimNPUExecutionProvider"
CPU = "CPUExecutionProvider"
OPTIONS = {"precision": "fp16", "tops": 10.0, "bandwidth_gbps": 50.0}
VERSION = "0.1.0"
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


@pytest.fixture(autouse=True)
def key_home(tmp_path_factory, monkeypatch) -> Path:
    """Each test's MAC secret in a fresh folder, never the user's own ~/.config."""
    home = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def _model(scale: float = 1.0) -> onnx.ModelProto:
    w = (np.arange(24, dtype=np.float32).reshape(4, 6) / 10) * scale
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("LeakyRelu", ["m"], ["y"], name="act", alpha=0.1),
    ]
    graph = helper.make_graph(
        nodes, "k", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
        [helper.make_empty_tensor_value_info("y")], [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def _group(model: onnx.ModelProto) -> FusedSubgraph:
    graph = Graph.from_proto(model.graph, {"": 17})
    return FusedSubgraph("SimNPU_k_0", tuple(graph.nodes), ("x", "w"), ("y",), graph)


def _key(model: onnx.ModelProto, precision: str = "fp16") -> str:
    return cache_key(_group(model), {**OPTIONS, "precision": precision}, VERSION)


def _session(model: onnx.ModelProto, cache_dir: Path | str | None) -> ort.InferenceSession:
    options = {"cache_dir": str(cache_dir)} if cache_dir is not None else {}
    return ort.InferenceSession(model.SerializeToString(), providers=[(NPU, options), CPU])


def _cache(session: ort.InferenceSession) -> ProgramCache:
    return next(p for p in session._providers if p.name == NPU).cache


def _run(session: ort.InferenceSession) -> np.ndarray:
    return session.run(None, {"x": X})[0]


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == "onyxrt.simnpu" and r.levelno >= logging.WARNING
    ]


@pytest.fixture
def reference() -> np.ndarray:
    """What the model gives without any cache."""
    return _run(_session(_model(), None))


# -- planted entries cannot change results ------------------------------------------------
def _plant(kind: str, path: Path, tmp_path: Path, monkeypatch) -> None:
    """Replace the entry at ``path`` with a program for other weights (scale 100)."""
    evil = compile_group(_group(_model(scale=100.0)), "fp16")
    if kind == "checksummed":  # a well-formed program with valid checksums, no MAC
        path.write_bytes(evil.to_bytes())
    elif kind == "other-secret":  # the entry format, MAC'd under a secret of the attacker's
        home = os.environ["XDG_CONFIG_HOME"]
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "attacker-config"))
        ProgramCache(tmp_path / "attacker").store(path.name[: -len(SUFFIX)], evil)
        monkeypatch.setenv("XDG_CONFIG_HOME", home)
        path.write_bytes((tmp_path / "attacker" / path.name).read_bytes())
    else:  # an authentic entry of this user's, for another group, renamed over this one
        cache = ProgramCache(path.parent)
        cache.store(_key(_model(scale=100.0)), evil)
        os.replace(path.parent / (_key(_model(scale=100.0)) + SUFFIX), path)


@pytest.mark.parametrize("kind", ["checksummed", "other-secret", "renamed-authentic"])
def test_planted_entry_does_not_change_results(tmp_path, reference, caplog, monkeypatch, kind):
    cache_dir = tmp_path / "cache"
    first = _session(_model(), cache_dir)
    np.testing.assert_array_equal(_run(first), reference)
    (entry,) = cache_dir.glob("*" + SUFFIX)
    _plant(kind, entry, tmp_path, monkeypatch)
    planted = entry.read_bytes()

    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        second = _session(_model(), cache_dir)
    np.testing.assert_array_equal(_run(second), reference)
    cache = _cache(second)
    assert (cache.hits, cache.misses, cache.rebuilt) == (0, 1, 1)
    assert any(str(entry) in m and "rebuilt" in m for m in _warnings(caplog))
    # ... and rewritten: the next session loads the good program.
    assert entry.read_bytes() != planted
    third = _session(_model(), cache_dir)
    assert _cache(third).hits == 1
    np.testing.assert_array_equal(_run(third), reference)


def test_entry_that_does_not_fit_the_group_is_rebuilt(tmp_path, caplog):
    """An authentic entry whose program does not compile this group (here: another
    precision under this key) is caught by the provider's signature check."""
    group = _group(_model())
    key = _key(_model())
    cache = ProgramCache(tmp_path)
    cache.store(key, compile_group(group, "fp32"))
    verify = partial(program_mismatch, group=group, precision="fp16")
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        assert cache.load(key, verify=verify) is None
    assert cache.rebuilt == 1 and not (tmp_path / (key + SUFFIX)).exists()
    assert any("precision 'fp32'" in m for m in _warnings(caplog))
    cache.store(key, compile_group(group, "fp16"))
    assert cache.load(key, verify=verify) is not None


def test_program_mismatch_accepts_the_real_compilation():
    group = _group(_model())
    assert program_mismatch(compile_group(group, "fp16"), group, "fp16") is None
    other = _group(_model())
    program = compile_group(other, "fp16")
    program.io_types["x"] = ("float16", (5, 4))
    assert "value 'x'" in (program_mismatch(program, group, "fp16") or "")


# -- the folder: owner and mode -------------------------------------------------------------
@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda d, mp: d.chmod(0o770), "writable by its group"),
        (lambda d, mp: d.chmod(0o707), "writable by other users"),
        (lambda d, mp: d.chmod(0o1777), "writable by its group and other users"),
        (lambda d, mp: mp.setattr(os, "geteuid", lambda: d.stat().st_uid + 4242),
         "not by this user"),
    ],
    ids=["group-writable", "world-writable", "sticky-world-writable", "owned-by-someone-else"],
)
def test_unsafe_folder_is_refused_with_one_warning(
    tmp_path, reference, caplog, monkeypatch, setup, reason
):
    cache_dir = tmp_path / "shared"
    cache_dir.mkdir()
    key = _key(_model())
    evil = compile_group(_group(_model(scale=100.0)), "fp16").to_bytes()
    (cache_dir / (key + SUFFIX)).write_bytes(evil)  # planted, in the old checksummed format
    setup(cache_dir, monkeypatch)

    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        session = _session(_model(), cache_dir)
        np.testing.assert_array_equal(_run(session), reference)  # compiled in memory
        again = ProgramCache(cache_dir)  # another session on the same folder
        assert again.load(key) is None
        again.store(key, compile_group(_group(_model()), "fp16"))
    cache = _cache(session)
    assert not cache.enabled and reason in (cache.refused or "")
    assert (cache.hits, cache.misses, cache.stores) == (0, 1, 0)
    warned = _warnings(caplog)
    assert len(warned) == 1, warned  # once, though two caches used it
    assert str(cache_dir) in warned[0] and reason in warned[0]
    # Nothing was read, deleted or written there.
    assert sorted(os.listdir(cache_dir)) == [key + SUFFIX]
    assert (cache_dir / (key + SUFFIX)).read_bytes() == evil


def test_new_folders_and_files_are_private(tmp_path, key_home):
    cache_dir = tmp_path / "a" / "cache"
    cache = ProgramCache(cache_dir)
    key = _key(_model())
    cache.store(key, compile_group(_group(_model()), "fp16"))
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((cache_dir / (key + SUFFIX)).stat().st_mode) == 0o600
    assert os.listdir(cache_dir) == [key + SUFFIX]  # the cache folder holds entries only
    secret = key_file()
    assert secret.parent == key_home / "onyxrt"
    assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.stat().st_size == 32
    assert (cache_dir / (key + SUFFIX)).read_bytes().startswith(ENTRY_MAGIC)


def test_a_folder_that_is_the_users_own_link_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    key = _key(_model())
    ProgramCache(tmp_path / "link").store(key, compile_group(_group(_model()), "fp16"))
    cache = ProgramCache(tmp_path / "link")
    assert cache.load(key) is not None and cache.hits == 1
    assert os.listdir(real) == [key + SUFFIX]


def test_folder_swapped_for_a_symlink_after_first_use_is_refused(tmp_path, caplog):
    cache_dir = tmp_path / "cache"
    group = _group(_model())
    key = _key(_model())
    cache = ProgramCache(cache_dir)
    cache.store(key, compile_group(group, "fp16"))
    # Someone moves the folder away and links their own (with a planted entry) in its place.
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    (theirs / (key + SUFFIX)).write_bytes(cache_dir.joinpath(key + SUFFIX).read_bytes())
    cache_dir.rename(tmp_path / "moved")
    cache_dir.symlink_to(theirs)
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        assert cache.load(key) is None
        cache.store(key, compile_group(group, "fp16"))
    assert "replaced by a symbolic link" in (cache.refused or "")
    assert [str(cache_dir) in m for m in _warnings(caplog)] == [True]
    assert os.listdir(theirs) == [key + SUFFIX] and cache.stores == 1


def test_folder_swapped_for_a_symlink_to_a_shared_folder_before_use_is_refused(
    tmp_path, reference, caplog
):
    cache_dir = tmp_path / "cache"
    _session(_model(), cache_dir)  # populated by an earlier session
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for entry in cache_dir.iterdir():
        (shared / entry.name).write_bytes(
            compile_group(_group(_model(scale=100.0)), "fp16").to_bytes()
        )
    cache_dir.rename(tmp_path / "moved")
    cache_dir.symlink_to(shared)
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        session = _session(_model(), cache_dir)
    np.testing.assert_array_equal(_run(session), reference)
    assert "writable by" in (_cache(session).refused or "")
    assert any(str(shared) in m for m in _warnings(caplog))


# -- the secret -------------------------------------------------------------------------------
def _make_secret(path: Path, mode: int = 0o600, data: bytes = b"k" * 32) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda p: _make_secret(p, 0o640), "accessible by its group"),
        (lambda p: _make_secret(p, 0o604), "accessible by other users"),
        (lambda p: _make_secret(p, data=b"short"), "malformed"),
        (lambda p: (p.parent.mkdir(), p.parent.chmod(0o777)), "key folder"),
        (lambda p: (p.parent.mkdir(), p.symlink_to(p.parent / "elsewhere")), "cannot open"),
    ],
    ids=["group-readable", "world-readable", "malformed", "shared-key-folder", "symlink"],
)
def test_untrustworthy_secret_refuses_the_cache(tmp_path, reference, caplog, setup, reason):
    setup(key_file())
    before = key_file().read_bytes() if key_file().is_file() else None
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        session = _session(_model(), tmp_path / "cache")
    np.testing.assert_array_equal(_run(session), reference)
    assert reason in (_cache(session).refused or "")
    assert any(str(key_file().parent) in m for m in _warnings(caplog))
    assert not any((tmp_path / "cache").glob("*" + SUFFIX))
    if before is not None:
        assert key_file().read_bytes() == before  # never silently replaced


def test_entries_are_bound_to_the_secret(tmp_path):
    key = _key(_model())
    ProgramCache(tmp_path).store(key, compile_group(_group(_model()), "fp16"))
    key_file().unlink()  # a new secret: every old entry is unauthentic
    cache = ProgramCache(tmp_path)
    assert cache.load(key) is None and cache.rebuilt == 1


# -- entries: regular files of ours, bounded, read without following links ------------------
def test_entry_symlinked_to_an_authentic_entry_is_not_followed(tmp_path, caplog):
    key, other = _key(_model()), _key(_model(), "fp32")
    cache = ProgramCache(tmp_path)
    cache.store(other, compile_group(_group(_model()), "fp32"))
    (tmp_path / (key + SUFFIX)).symlink_to(tmp_path / (other + SUFFIX))
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        assert cache.load(key) is None
    assert any("symbolic link" in m and key in m for m in _warnings(caplog))
    assert not (tmp_path / (key + SUFFIX)).is_symlink()  # the link is removed
    assert (tmp_path / (other + SUFFIX)).is_file()  # its target is not


def test_store_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    key = _key(_model())
    (cache_dir / (key + SUFFIX)).symlink_to(victim)
    ProgramCache(cache_dir).store(key, compile_group(_group(_model()), "fp16"))
    assert victim.read_bytes() == b"precious"
    assert (cache_dir / (key + SUFFIX)).is_file() and not (cache_dir / (key + SUFFIX)).is_symlink()
    assert ProgramCache(cache_dir).load(key) is not None


@pytest.mark.parametrize("kind", ["directory", "group-writable", "too-large", "other-owner"])
def test_unsafe_entry_is_rejected_unread(tmp_path, caplog, kind):
    key = _key(_model())
    cache = ProgramCache(tmp_path, max_entry_bytes=64 << 10)
    cache.store(key, compile_group(_group(_model()), "fp16"))
    entry = tmp_path / (key + SUFFIX)
    expected = {
        "directory": "not a regular file (a folder)",
        "group-writable": "writable by its group",
        "too-large": "more than the 65536 bytes",
        "other-owner": "owned by uid 4242",
    }[kind]
    if kind == "directory":
        entry.unlink()
        entry.mkdir()
    elif kind == "group-writable":
        entry.chmod(0o660)
    elif kind == "too-large":
        with open(entry, "ab") as f:
            f.truncate(65537)
    else:
        if os.geteuid() != 0:
            pytest.skip("changing a file's owner needs root")
        os.chown(entry, 4242, -1)
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        assert cache.load(key) is None
    assert (cache.hits, cache.rebuilt) == (0, 1)
    assert any(expected in m and str(entry) in m for m in _warnings(caplog)), _warnings(caplog)


def _child_load(cache_dir: Path, key: str) -> dict:
    """``ProgramCache(cache_dir).load(key)`` in a child capped at 2 GiB of address space
    and 60 s: reading /dev/zero or a huge file fails it, a blocked open times it out."""
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        import json, logging, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        from onyxrt_simnpu.cache import ProgramCache
        cache = ProgramCache({str(cache_dir)!r})
        program = cache.load({key!r})
        print(json.dumps({{"loaded": program is not None, "hits": cache.hits,
                          "misses": cache.misses, "rebuilt": cache.rebuilt}}))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
            env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("loading the entry hung")
    assert done.returncode == 0, done.stderr[-2000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /dev/zero")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "sparse-64GiB"])
def test_entries_that_could_hang_or_exhaust_memory(tmp_path, kind):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o700)
    key = _key(_model())
    entry = cache_dir / (key + SUFFIX)
    expected = {
        "fifo": "not a regular file (a FIFO)",
        "dev-zero-link": "symbolic link",
        "sparse-64GiB": f"more than the {DEFAULT_MAX_ENTRY_BYTES} bytes",
    }[kind]
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "dev-zero-link":
        entry.symlink_to("/dev/zero")
    else:
        with open(entry, "wb") as f:
            try:
                f.truncate(64 << 30)  # sparse: no disk used
            except OSError as exc:
                pytest.skip(f"no sparse files here: {exc}")
    result = _child_load(cache_dir, key)
    assert (result["loaded"], result["hits"], result["misses"], result["rebuilt"]) == (
        False, 0, 1, 1
    )
    assert expected in result["stderr"] and str(entry) in result["stderr"], result["stderr"]
    assert not os.path.lexists(entry)  # removed, so the rebuilt entry can take its place
