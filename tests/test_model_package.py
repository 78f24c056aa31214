"""Model packages side by side with onnxruntime's (1.32+): the same files written, the
same answers read, the same mistakes refused with the same kind of error, the same
variant chosen and run."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidArgument, OnyxError, ProviderUnavailable
from onyxrt.status import Fail, NoSuchFile, NotImplementedStatus

ort_ref = pytest.importorskip("onnxruntime")
#: onyxrt's side of every comparison: the same five names as onnxruntime's module.
mine = onyxrt
if not hasattr(ort_ref, "ModelPackage"):
    pytest.skip("this onnxruntime has no ModelPackage API (added in 1.32)", allow_module_level=True)

CPU = "CPUExecutionProvider"
BASE = {"schema_version": "1.0"}
EMPTY = {"m": {"variants": {}}}
URI = "sha256:" + "a" * 64
SESSION_OPTIONS = {ort_ref: ort_ref.SessionOptions, mine: onyxrt.SessionOptions}


# -- helpers ----------------------------------------------------------------------------
def _kind(exc: BaseException) -> str:
    """The builtin (or onnxruntime status) class a caller would catch."""
    for status, name in (
        (NoSuchFile, "NoSuchFile"),
        (NotImplementedStatus, "NotImplemented"),
        (Fail, "Fail"),
    ):
        if isinstance(exc, status) or type(exc).__name__ == name:
            return name
    for cls in (FileNotFoundError, OSError, ValueError, RuntimeError, TypeError):
        if isinstance(exc, cls):
            return cls.__name__
    return type(exc).__name__


def _core(message: object) -> str:
    """onnxruntime's message without its source-location and status prefixes."""
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(message).strip())
    match = re.search(r"\.cc:\d+ (?:\S+?(?:\(.*?\))?(?:::<lambda\(.*?\)>)?|\w+) (.*)$", text, re.S)
    return (match.group(1) if match else text).strip().rstrip(".")


def _outcome(fn: Callable[[Any], Any], module: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(module)
    except Exception as exc:  # the comparison is the point
        return "err", exc


def assert_same(fn: Callable[[Any], Any], key: str | None = None, root: Path | None = None) -> Any:
    """Run ``fn(onnxruntime)`` and ``fn(onyxrt.model_package)``: both return equal values
    (paths under ``root`` compared relatively), or both raise the same kind of error whose
    message carries onnxruntime's (or ``key``)."""
    (ref_state, ref), (my_state, got) = _outcome(fn, ort_ref), _outcome(fn, mine)
    assert (ref_state, my_state) == (ref_state, ref_state), f"onnxruntime: {ref!r}\nonyxrt: {got!r}"
    if ref_state == "ok":
        if root is not None:
            ref, got = (json.loads(json.dumps(v).replace(str(root), "<root>")) for v in (ref, got))
        assert got == ref
        return got
    assert isinstance(got, OnyxError), f"not an onyxrt error: {got!r}"
    assert _kind(got) == _kind(ref), f"onnxruntime: {ref!r}\nonyxrt: {got!r}"
    assert (key or _core(ref)) in str(got), f"onnxruntime: {_core(ref)!r}\nonyxrt: {got}"
    if key:
        assert key in str(ref)
    return got


def _tree(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def _model(path: Path, k: float = 1.0) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    c = helper.make_tensor("c", TensorProto.FLOAT, [2], [k, k])
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g", [x], [y], [c])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
        str(path),
    )


def _package(root: Path, manifest: Any, files: dict[str, Any] | None = None) -> str:
    """Write a package folder: ``files`` maps paths to text/JSON, None (a folder) or a
    Path (a symlink to it)."""
    root.mkdir(parents=True, exist_ok=True)
    if manifest is not None:
        (root / "manifest.json").write_text(
            manifest if isinstance(manifest, str) else json.dumps(manifest)
        )
    for rel, value in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if value is None:
            path.mkdir()
        elif isinstance(value, Path):
            path.symlink_to(value)
        else:
            path.write_text(value if isinstance(value, str) else json.dumps(value))
    return str(root)


def _runnable(root: Path, variants: dict[str, dict[str, Any]]) -> str:
    """A package whose variants each run a model adding 1, 2, 3... (declaration order)."""
    variants = json.loads(json.dumps(variants))  # the parametrized cases stay untouched
    root.mkdir(parents=True)
    for i, (name, body) in enumerate(variants.items()):
        _model(root / body.get("variant_directory", name) / "model.onnx", float(i + 1))
        body.setdefault("executor_info", {"ort": {"model_file": "model.onnx"}})
    return _package(root, {**BASE, "components": {"main": {"variants": variants}}}, {})


def _author(module: Any, dest: Path, asset: Path) -> Any:
    """The same authoring session, on either implementation."""
    pkg = module.ModelPackage()
    pkg.set_metadata("phi", "4.0.0", "A small package")
    pkg.set_component_inline("main", '{"component_name": "main", "variants": {}}')
    pkg.set_variant("main", "cpu", json.dumps({"ep": CPU, "device": "cpu"}))
    pkg.set_variant(
        "main",
        "gpu",
        '{"ep": "CUDAExecutionProvider", "device": "gpu", "compatibility_string": "sm80"}',
    )
    pkg.set_variant_executor_info_inline(
        "main", "cpu", "ort", '{"model_file": "model.onnx", "session_options": {"a": "b"}}'
    )
    pkg.set_variant_executor_info_inline("main", "gpu", "ort", '{"model_file": "model.onnx"}')
    pkg.set_additional_metadata_json(
        "manifest", None, None, '{"producer": "tëst", "n": [1, 2.5, null, true]}'
    )
    pkg.set_additional_metadata_json("component", "main", None, '{"k": 1}')
    uri = pkg.add_shared_asset(str(asset))
    pkg.commit(str(dest))
    pkg.set_component_external("ext", "ext")
    pkg.set_variant("ext", "v1", json.dumps({"ep": CPU}))
    pkg.set_component_external("ext2", "comps/e2.json")
    pkg.set_variant("ext2", "v", "{}")
    pkg.commit()
    return uri


@pytest.fixture
def asset(tmp_path: Path) -> Path:
    folder = tmp_path / "tokenizer"
    (folder / "sub").mkdir(parents=True)
    (folder / "vocab.txt").write_text("alpha")
    (folder / "sub" / "merges.bin").write_bytes(bytes(range(256)))
    return folder


# -- round trips -------------------------------------------------------------------------
def test_authoring_writes_the_same_files_as_onnxruntime(tmp_path: Path, asset: Path) -> None:
    uri_ref = _author(ort_ref, tmp_path / "ref", asset)
    uri_mine = _author(mine, tmp_path / "mine", asset)
    assert uri_mine == uri_ref
    assert _tree(tmp_path / "mine") == _tree(tmp_path / "ref")  # byte for byte


@pytest.mark.parametrize(
    "writer", [ort_ref, mine], ids=["written_by_onnxruntime", "written_by_onyxrt"]
)
def test_a_package_reads_the_same_in_both(tmp_path: Path, asset: Path, writer: Any) -> None:
    uri = _author(writer, tmp_path / "pkg", asset)
    root = str(tmp_path / "pkg")
    info = assert_same(lambda m: m.ModelPackage.open(root).get_info(), root=tmp_path)
    assert [c["name"] for c in info["components"]] == ["main", "ext", "ext2"]
    assert info["schema_version_major"] == 1 and info["package_name"] == "phi"
    assert_same(
        lambda m: [m.ModelPackage.open(root).get_component_json(c) for c in ("main", "ext", "ext2")]
    )
    assert_same(lambda m: m.ModelPackage.open(root).get_variant_json("main", "gpu"))
    assert_same(
        lambda m: (
            m.ModelPackage.open(root).resolve_asset_uri(uri),
            m.ModelPackage.open(root).resolve_string_ref(uri + "/sub/merges.bin", must_exist=True),
        )
    )

    def context(m: Any) -> Any:
        ctx = m.ModelPackageContext(root)
        names = ctx.get_component_names()
        return (
            ctx.get_schema_version(),
            ctx.get_component_count(),
            names,
            {n: (ctx.get_variant_count(n), ctx.get_variant_names(n)) for n in names},
            [ctx.get_variant_ep_name("main", v) for v in ("cpu", "gpu")],
            ctx.resolve_string_ref("main/cpu/model.onnx"),
        )

    assert assert_same(context)[4] == [CPU, "CUDAExecutionProvider"]


def test_json_getters_keep_the_authors_key_order_and_unknown_fields(tmp_path: Path) -> None:
    root = _package(
        tmp_path / "p",
        {
            "schema_version": "1.2",
            "components": {
                "m": {
                    "variants": {
                        "v": {"device": "cpu", "ep": CPU, "future_field": {"z": 1, "a": 2}}
                    },
                    "extra": True,
                }
            },
        },
    )
    text = assert_same(lambda m: m.ModelPackage.open(root).get_component_json("m"))
    assert (
        text
        == '{"variants":{"v":{"device":"cpu","ep":"CPUExecutionProvider","future_field":{"z":1,"a":2}}},"extra":true}'
    )


# -- reading errors ----------------------------------------------------------------------
BROKEN = {
    "no_manifest": None,
    "bad_json": "{bad",
    "not_an_object": "[]",
    "no_schema_version": {"components": EMPTY},
    "schema_major_2": {"schema_version": "2.0", "components": EMPTY},
    "schema_float": {"schema_version": 1.0, "components": EMPTY},
    "schema_three_parts": {"schema_version": "1.0.0", "components": EMPTY},
    "no_components": BASE,
    "components_array": {**BASE, "components": []},
    "unknown_top_field": {**BASE, "components": EMPTY, "zzz": 1},
    "unknown_component_field": {**BASE, "components": {"m": {"variants": {}, "zz": 1}}},
    "unknown_variant_field": {**BASE, "components": {"m": {"variants": {"v": {"zz": 1}}}}},
    "no_variants": {**BASE, "components": {"main": {}}},
    "variants_array": {**BASE, "components": {"m": {"variants": []}}},
    "component_number": {**BASE, "components": {"m": 3}},
    "variant_number": {**BASE, "components": {"m": {"variants": {"v": 3}}}},
    "ep_number": {**BASE, "components": {"m": {"variants": {"v": {"ep": 3}}}}},
    "layout_unknown": {**BASE, "layout": "x", "components": EMPTY},
    "name_number": {**BASE, "package_name": 1, "components": EMPTY},
    "variant_dir_missing": {
        **BASE,
        "components": {"m": {"variants": {"v": {"variant_directory": "gone"}}}},
    },
    "executor_info_number": {
        **BASE,
        "components": {"m": {"variants": {"v": {"executor_info": {"ort": 3}}}}},
    },
    "executor_info_file_without_folder": {
        **BASE,
        "components": {"m": {"variants": {"v": {"executor_info": {"ort": "o.json"}}}}},
    },
    "component_file_missing": {**BASE, "components": {"m": "c.json"}},
    "shared_asset_bad_uri": {**BASE, "components": EMPTY, "shared_assets": {"sha256:AB": "x"}},
    "shared_asset_outside": {**BASE, "components": EMPTY, "shared_assets": {URI: "/elsewhere"}},
}


@pytest.mark.parametrize("manifest", BROKEN.values(), ids=BROKEN.keys())
def test_broken_packages_are_refused_alike(tmp_path: Path, manifest: Any) -> None:
    root = _package(tmp_path / "p", manifest)
    assert_same(lambda m: m.ModelPackage.open(root).get_info())
    ctx_err = assert_same(lambda m: m.ModelPackageContext(root))  # RuntimeError naming the package
    assert isinstance(ctx_err, RuntimeError) and f"Failed to open model package at '{root}'" in str(
        ctx_err
    )


def test_a_schema_error_names_what_to_fix(tmp_path: Path) -> None:
    root = _package(tmp_path / "p", {**BASE, "components": {"main": {}}})
    with pytest.raises(
        InvalidArgument, match="component 'main': missing required 'variants' object"
    ) as info:
        mine.ModelPackage.open(root)
    assert 'Add "variants"' in str(info.value) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "version", ["1.0", "1", 1, "01.00", "1.7", "0.9", "", "1.", ".1", "a.b", -1, True]
)
def test_schema_versions_read_alike(tmp_path: Path, version: Any) -> None:
    root = _package(tmp_path / "p", {"schema_version": version, "components": EMPTY})
    assert_same(
        lambda m: [
            m.ModelPackage.open(root).get_info()[k]
            for k in ("schema_version_major", "schema_version_minor")
        ]
    )


def test_unknown_fields_need_non_strict_opening_or_a_newer_minor(tmp_path: Path) -> None:
    strict = _package(tmp_path / "a", {**BASE, "components": EMPTY, "x-note": 1})
    assert_same(lambda m: m.ModelPackage.open(strict))
    assert (
        assert_same(
            lambda m: m.ModelPackage.open(strict, strict_unknown_fields=False).get_info()["layout"]
        )
        == "portable"
    )
    newer = _package(
        tmp_path / "b",
        {"schema_version": "1.4", "components": {"m": {"variants": {"v": {"hint": 1}}}}},
    )
    assert assert_same(lambda m: m.ModelPackageContext(newer).get_variant_names("m")) == ["v"]


# -- authoring errors --------------------------------------------------------------------
def _fresh(module: Any) -> Any:
    pkg = module.ModelPackage()
    pkg.set_component_inline("m", '{"variants": {}}')
    pkg.set_variant("m", "o", json.dumps({"ep": CPU}))
    return pkg


AUTHORING = {
    "commit_without_root": (lambda m, p, t: p.commit(), None),
    "external_component_without_root": (
        lambda m, p, t: p.set_component_external("e", "e"),
        "requires a package_root",
    ),
    "variant_of_missing_component": (lambda m, p, t: p.set_variant("zz", "v", "{}"), None),
    "component_bad_json": (lambda m, p, t: p.set_component_inline("n", "{bad"), None),
    "component_array": (lambda m, p, t: p.set_component_inline("n", "[]"), None),
    "component_unknown_field": (
        lambda m, p, t: p.set_component_inline("n", '{"variants": {}, "x": 1}'),
        None,
    ),
    "variant_unknown_field": (lambda m, p, t: p.set_variant("m", "v", '{"zz": 1}'), None),
    "variant_dir_missing": (
        lambda m, p, t: p.set_variant("m", "v", '{"variant_directory": "gone"}'),
        None,
    ),
    "variant_dir_escapes": (
        lambda m, p, t: p.set_variant("m", "v", '{"variant_directory": "../x"}'),
        None,
    ),
    "missing_variant_json": (lambda m, p, t: p.get_variant_json("m", "zz"), None),
    "missing_component_json": (lambda m, p, t: p.get_component_json("zz"), None),
    "executor_info_array": (
        lambda m, p, t: p.set_variant_executor_info_inline("m", "o", "ort", "[]"),
        None,
    ),
    "executor_info_missing_variant": (
        lambda m, p, t: p.set_variant_executor_info_inline("m", "zz", "ort", "{}"),
        None,
    ),
    "layout_unknown": (lambda m, p, t: p.set_layout("weird"), None),
    "metadata_bad_scope": (
        lambda m, p, t: p.set_additional_metadata_json("pkg", None, None, "3"),
        None,
    ),
    "metadata_scope_mismatch": (
        lambda m, p, t: p.set_additional_metadata_json("manifest", "m", None, "{}"),
        None,
    ),
    "metadata_missing_variant": (
        lambda m, p, t: p.set_additional_metadata_json("variant", "m", "zz", "3"),
        None,
    ),
    "metadata_bad_json": (
        lambda m, p, t: p.set_additional_metadata_json("manifest", None, None, "{bad"),
        None,
    ),
    "asset_not_copied_in_portable": (
        lambda m, p, t: p.add_shared_asset(str(t / "asset"), None, False),
        None,
    ),
    "asset_missing": (lambda m, p, t: p.add_shared_asset(str(t / "gone")), None),
    "asset_hash_mismatch": (
        lambda m, p, t: p.add_shared_asset(str(t / "asset"), "sha256:" + "0" * 64),
        "hash mismatch",
    ),
    "unknown_asset": (lambda m, p, t: p.resolve_asset_uri(URI), None),
    "dense_with_external_executor_info": (
        lambda m, p, t: (
            p.set_variant_executor_info_external("m", "o", "ort", "x.json"),
            p.commit(str(t / f"new_{m.__name__}"), m.ModelPackageWriteMode.DENSE),
        ),
        "has external executor_info 'ort'",
    ),
    "commit_to_a_non_empty_folder": (lambda m, p, t: p.commit(str(t)), None),
    "commit_to_a_file": (lambda m, p, t: p.commit(str(t / "asset" / "a.txt")), None),
    "closed": (lambda m, p, t: (p.close(), p.get_info()), None),
    "after_with_block": (lambda m, p, t: (p.__exit__(None, None, None), p.commit()), None),
}


@pytest.mark.parametrize("case", AUTHORING.values(), ids=AUTHORING.keys())
def test_authoring_mistakes_raise_alike(
    tmp_path: Path, case: tuple[Callable[..., Any], str | None]
) -> None:
    (tmp_path / "asset").mkdir()
    (tmp_path / "asset" / "a.txt").write_text("a")
    action, key = case
    assert_same(lambda m: action(m, _fresh(m), tmp_path), key=key)


def test_authoring_answers_match(tmp_path: Path, asset: Path) -> None:
    def session(m: Any) -> Any:
        pkg = _fresh(m)
        pkg.set_variant("m", "v", '{"device": "cpu", "ep": "E", "additional_metadata": {"b": 1}}')
        pkg.set_variant_executor_info_inline("m", "v", "a", "{}")
        pkg.set_variant_executor_info_external("m", "v", "b", "b.json")
        pkg.remove_variant_executor_info("m", "v", "a")
        pkg.set_additional_metadata_json("component", "m", None, "[3]")
        pkg.set_metadata("n", "1", "d")
        pkg.set_metadata(None, "", None)  # "" clears
        uri = pkg.add_shared_asset(str(asset))
        pkg.remove_variant("m", "o")
        pkg.remove_component("zz")  # absent: nothing happens
        return uri, pkg.get_variant_json("m", "v"), pkg.get_component_json("m"), pkg.get_info()

    uri, variant, _, info = assert_same(session, root=tmp_path)
    assert (
        variant
        == '{"device":"cpu","ep":"E","additional_metadata":{"b":1},"executor_info":{"b":"b.json"}}'
    )
    assert info["package_version"] is None and info["shared_assets"][0]["uri"] == uri


# -- directory hashes --------------------------------------------------------------------
FOLDERS = {
    "one_file": {"a.txt": b"alpha"},
    "empty": {},
    "nested_and_empty_files": {
        "e": b"",
        "sub/e": b"",
        "sub/deeper/x.bin": bytes(range(256)) * 64,
        "empty_dir": None,
    },
    "sort_order": {"a-b": b"1", "a/b": b"2", "a.b": b"3", "B": b"4", "_x": b"5", ".hidden": b"6"},
    "unicode_names": {"ünïcödé.txt": "ü".encode(), "日本/語": b"x", "sp ace": b"y"},
}


@pytest.mark.parametrize("files", FOLDERS.values(), ids=FOLDERS.keys())
def test_directory_hash_matches_onnxruntime(tmp_path: Path, files: dict[str, bytes | None]) -> None:
    for rel, data in files.items():
        path = tmp_path / "d" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if data is None else path.write_bytes(data)
    (tmp_path / "d").mkdir(exist_ok=True)
    digest = assert_same(lambda m: m.ModelPackage.compute_directory_hash(str(tmp_path / "d")))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)


def test_directory_hash_refuses_links_and_files(tmp_path: Path, asset: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link").symlink_to(asset / "vocab.txt")
    assert_same(lambda m: m.ModelPackage.compute_directory_hash(str(tmp_path / "d")))
    assert_same(lambda m: m.ModelPackage.compute_directory_hash(str(asset / "vocab.txt")))


# -- paths ---------------------------------------------------------------------------------
def _escapes(tmp_path: Path) -> dict[str, tuple[Any, dict[str, Any]]]:
    out = tmp_path / "outside"
    (out / "c.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "c.json").write_text('{"variants": {}}')
    variant = {"m": {"variants": {"v": {}}}}
    return {
        "dotdot_variant_dir": (
            {**BASE, "components": {"m": {"variants": {"v": {"variant_directory": "../outside"}}}}},
            {},
        ),
        "absolute_variant_dir": (
            {**BASE, "components": {"m": {"variants": {"v": {"variant_directory": str(out)}}}}},
            {},
        ),
        "dotdot_component": ({**BASE, "components": {"m": "../outside/c.json"}}, {}),
        "symlinked_variant_dir": ({**BASE, "components": variant}, {"v": out}),
        "symlinked_component_file": (
            {**BASE, "components": {"m": "c.json"}},
            {"c.json": out / "c.json"},
        ),
        "dotdot_executor_info": (
            {
                **BASE,
                "components": {
                    "m": {"variants": {"v": {"executor_info": {"ort": "../../outside/c.json"}}}}
                },
            },
            {"v": None},
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "dotdot_variant_dir",
        "absolute_variant_dir",
        "dotdot_component",
        "symlinked_variant_dir",
        "symlinked_component_file",
        "dotdot_executor_info",
    ],
)
def test_paths_out_of_a_portable_package_are_refused(tmp_path: Path, case: str) -> None:
    manifest, files = _escapes(tmp_path)[case]
    root = _package(tmp_path / "p", manifest, files)
    for follow in (True, False):
        err = assert_same(
            lambda m, follow=follow: m.ModelPackage.open(root, follow_symlinks=follow).get_info()
        )
        assert isinstance(err, ValueError)
        assert "portable layout" in str(err) or "escapes package_root" in str(err)
    # Allowed on request (or in the installed layout): both then read the same.
    assert_same(
        lambda m: m.ModelPackage.open(root, allow_external_paths=True).get_info(), root=tmp_path
    )


def test_installed_layout_reads_outside_paths(tmp_path: Path) -> None:
    (tmp_path / "shared" / "c.json").parent.mkdir()
    (tmp_path / "shared" / "c.json").write_text(
        '{"variants": {"v": {"ep": "CPUExecutionProvider"}}}'
    )
    root = _package(
        tmp_path / "p",
        {
            **BASE,
            "layout": "installed",
            "components": {"m": str(tmp_path / "shared/c.json")},
            "shared_assets": {URI: str(tmp_path / "shared")},
        },
    )
    info = assert_same(lambda m: m.ModelPackage.open(root).get_info(), root=tmp_path)
    assert info["shared_assets"] == [{"uri": URI, "resolved_path": "<root>/shared"}]


REFS = [
    ("cpu/model.onnx", None, False),
    ("cpu/model.onnx", None, True),
    ("cpu/gone", None, True),
    ("./cpu/./model.onnx", None, False),
    ("cpu/", None, False),
    ("gone/", None, False),
    (".", None, False),
    ("", None, False),
    ("model.onnx", "<root>/cpu", False),
    ("model.onnx", "<tmp>", False),
    ("../x", None, False),
    ("<tmp>/outside/m.onnx", None, False),
    ("link/m.onnx", None, False),
    ("sha256:abc", None, False),
    (URI, None, False),
    (URI + "/x", None, False),
]


@pytest.mark.parametrize("ref,base,must_exist", REFS)
def test_resolve_string_ref_matches(
    tmp_path: Path, ref: str, base: str | None, must_exist: bool
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "m.onnx").write_text("x")
    root = _package(
        tmp_path / "p",
        {**BASE, "components": EMPTY},
        {"cpu/model.onnx": "x", "link": tmp_path / "outside"},
    )
    ref, base = (
        None if s is None else s.replace("<root>", root).replace("<tmp>", str(tmp_path))
        for s in (ref, base)
    )
    for options in ({}, {"allow_external_paths": True}):
        assert_same(
            lambda m, o=options: m.ModelPackage.open(root, **o).resolve_string_ref(
                ref, base, must_exist
            )
        )
    assert_same(lambda m: m.ModelPackageContext(root).resolve_string_ref(ref, base, must_exist))


def test_a_link_out_of_the_package_is_refused_even_below_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    root = _package(tmp_path / "p", {**BASE, "components": EMPTY}, {"link": tmp_path / "outside"})
    pkg = mine.ModelPackage.open(root, follow_symlinks=False)
    # onnxruntime returns <root>/link/new.onnx here, a path that writes outside the package.
    with pytest.raises(ValueError, match="escapes package_root"):
        pkg.resolve_string_ref("link/new.onnx")


# -- selection and sessions -------------------------------------------------------------------
SELECTIONS = {
    "cpu_over_gpu": {
        "gpu": {"ep": "CUDAExecutionProvider", "device": "gpu"},
        "cpu": {"ep": CPU, "device": "cpu"},
    },
    "only_gpu": {"gpu": {"ep": "CUDAExecutionProvider"}},
    "no_ep_is_never_chosen": {"any": {}, "dev": {"device": "cpu"}},
    "first_declared_wins": {"b": {"ep": CPU}, "a": {"ep": CPU}},
    "device_must_match": {"npu": {"ep": CPU, "device": "npu"}, "cpu": {"ep": CPU, "device": "CPU"}},
    "compatibility_string": {"c": {"ep": CPU, "compatibility_string": "v2"}, "d": {"ep": CPU}},
    "ep_name_is_exact": {"lower": {"ep": "cpuexecutionprovider"}},
    "no_variants": {},
}


@pytest.mark.parametrize("variants", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_variant_selection_matches_onnxruntime(tmp_path: Path, variants: dict[str, Any]) -> None:
    root = _runnable(tmp_path / "p", variants)

    def select(m: Any) -> Any:
        chosen = m.ModelPackageContext(root).select_component(
            "main", m.ModelPackageOptions(SESSION_OPTIONS[m]())
        )
        return chosen.get_selected_variant_name(), chosen.get_selected_variant_folder_path()

    assert_same(select)
    assert_same(
        lambda m: m.ModelPackageContext(root).select_component(
            "zz", m.ModelPackageOptions(SESSION_OPTIONS[m]())
        ),
        key="Component model not found",
    )


def test_create_session_runs_the_selected_variant(tmp_path: Path) -> None:
    root = _runnable(tmp_path / "p", {"gpu": {"ep": "CUDAExecutionProvider"}, "cpu": {"ep": CPU}})

    def run(m: Any) -> Any:
        chosen = m.ModelPackageContext(root).select_component(
            "main", m.ModelPackageOptions(SESSION_OPTIONS[m]())
        )
        session = chosen.create_session()
        return session.get_providers(), session.run(None, {"x": np.zeros(2, np.float32)})[
            0
        ].tolist()

    assert assert_same(run) == ([CPU], [2.0, 2.0])


def test_package_session_options_apply_and_caller_options_win(tmp_path: Path) -> None:
    root = _runnable(
        tmp_path / "p",
        {
            "cpu": {
                "ep": CPU,
                "executor_info": {
                    "ort": {
                        "model_file": "model.onnx",
                        "session_options": {
                            "custom.key": "pkg",
                            "session.model_external_initializers_file_folder_path": "weights",
                            "ep.context_file_path": "c.onnx",
                        },
                    }
                },
            }
        },
    )
    keys = [
        "custom.key",
        "session.model_external_initializers_file_folder_path",
        "ep.context_file_path",
        "mine",
    ]

    def entries(options: Any) -> dict[str, str]:
        found = {}
        for key in keys:
            try:
                found[key] = options.get_session_config_entry(key)
            except Exception:  # not set
                pass
        return found

    def configure(m: Any, own: bool) -> Any:
        chosen = m.ModelPackageContext(root).select_component(
            "main", m.ModelPackageOptions(SESSION_OPTIONS[m]())
        )
        caller = None
        if own:
            caller = SESSION_OPTIONS[m]()
            caller.add_session_config_entry("mine", "1")
            caller.add_session_config_entry("ep.context_file_path", "user.onnx")
        session = chosen.create_session(caller)
        return entries(session.get_session_options()), entries(caller) if caller else None

    default, _ = assert_same(lambda m: configure(m, False))
    assert (
        default["custom.key"] == "pkg" and default["ep.context_file_path"] == f"{root}/cpu/c.onnx"
    )
    given, untouched = assert_same(lambda m: configure(m, True))
    assert "custom.key" not in given and given["ep.context_file_path"] == "user.onnx"
    assert untouched == {
        "mine": "1",
        "ep.context_file_path": "user.onnx",
    }  # caller's options not modified


RUN_ERRORS = {
    "no_executor_info": {"ep": CPU, "executor_info": {}},
    "no_model_file": {"ep": CPU, "executor_info": {"ort": {"session_options": {}}}},
    "cpu_provider_options": {
        "ep": CPU,
        "executor_info": {"ort": {"model_file": "model.onnx", "provider_options": {"a": "b"}}},
    },
}


@pytest.mark.parametrize("variant", RUN_ERRORS.values(), ids=RUN_ERRORS.keys())
def test_create_session_mistakes_raise_alike(tmp_path: Path, variant: dict[str, Any]) -> None:
    root = _runnable(tmp_path / "p", {"cpu": variant})
    assert_same(
        lambda m: (
            m.ModelPackageContext(root)
            .select_component("main", m.ModelPackageOptions(SESSION_OPTIONS[m]()))
            .create_session()
        )
    )


def test_a_missing_model_file_fails_at_create_session_alike(tmp_path: Path) -> None:
    root = _runnable(
        tmp_path / "p", {"cpu": {"ep": CPU, "executor_info": {"ort": {"model_file": "gone.onnx"}}}}
    )
    err = assert_same(
        lambda m: (
            m.ModelPackageContext(root)
            .select_component("main", m.ModelPackageOptions(SESSION_OPTIONS[m]()))
            .create_session()
        ),
        key=f"{root}/cpu/gone.onnx",
    )
    assert isinstance(err, NoSuchFile)


EXECUTOR_INFO_ERRORS = {
    "model_file_number": {"model_file": 3},
    "model_file_escapes": {"model_file": "../x.onnx"},
    "model_file_empty": {"model_file": ""},
    "session_options_array": {"model_file": "m", "session_options": []},
    "session_option_number": {"model_file": "m", "session_options": {"a": 1}},
    "profiling_forbidden": {
        "model_file": "m",
        "session_options": {"session.enable_profiling": "1"},
    },
    "path_option_unknown_asset": {
        "model_file": "m",
        "session_options": {"ep.context_file_path": URI},
    },
}


@pytest.mark.parametrize("info", EXECUTOR_INFO_ERRORS.values(), ids=EXECUTOR_INFO_ERRORS.keys())
def test_bad_ort_executor_info_is_refused_alike(tmp_path: Path, info: dict[str, Any]) -> None:
    root = _runnable(tmp_path / "p", {"cpu": {"ep": CPU, "executor_info": {"ort": info}}})
    err = assert_same(lambda m: m.ModelPackageContext(root))
    assert "for variant 'cpu' in component 'main'" in str(err)


def test_context_lookups_match(tmp_path: Path) -> None:
    root = _runnable(tmp_path / "p", {"cpu": {"ep": CPU}, "plain": {}})
    assert assert_same(
        lambda m: [
            m.ModelPackageContext(root).get_variant_ep_name("main", v) for v in ("cpu", "plain")
        ]
    ) == [CPU, None]
    for call in (
        lambda c: c.get_variant_ep_name("main", "zz"),
        lambda c: c.get_variant_ep_name("zz", "cpu"),
        lambda c: c.get_variant_names("zz"),
        lambda c: c.get_variant_count("zz"),
    ):
        assert isinstance(
            assert_same(lambda m, call=call: call(m.ModelPackageContext(root))), RuntimeError
        )


needs_npu = pytest.mark.skipif(
    "SimNPUExecutionProvider" not in onyxrt.get_available_providers(),
    reason="the simulated NPU provider is not installed",
)


@needs_npu
@pytest.mark.parametrize(
    "configure",
    [
        lambda so: so.add_provider("SimNPUExecutionProvider", {}),
        lambda so: so.set_provider_selection_policy(
            onyxrt.OrtExecutionProviderDevicePolicy.PREFER_NPU
        ),
        lambda so: so.add_provider_for_devices(
            [d for d in onyxrt.get_ep_devices() if d.ep_name == "SimNPUExecutionProvider"], {}
        ),
    ],
    ids=["add_provider", "policy", "devices"],
)
def test_the_configured_provider_chooses_its_variant(
    tmp_path: Path, configure: Callable[[Any], None]
) -> None:
    root = _runnable(
        tmp_path / "p",
        {"cpu": {"ep": CPU}, "npu": {"ep": "SimNPUExecutionProvider", "device": "npu"}},
    )
    so = onyxrt.SessionOptions()
    configure(so)
    chosen = mine.ModelPackageContext(root).select_component("main", mine.ModelPackageOptions(so))
    session = chosen.create_session()
    assert chosen.get_selected_variant_name() == "npu"
    assert session.get_providers()[0] == "SimNPUExecutionProvider"
    assert session.run(None, {"x": np.zeros(2, np.float32)})[0].tolist() == [2.0, 2.0]


def test_an_unusable_provider_falls_back_with_a_warning_or_fails_in_strict_mode(
    tmp_path: Path,
) -> None:
    root = _runnable(tmp_path / "p", {"cpu": {"ep": CPU}})
    so = onyxrt.SessionOptions()
    so.add_provider("NoSuchExecutionProvider", {})
    with pytest.warns(
        UserWarning, match="NoSuchExecutionProvider was configured .* not usable here"
    ):
        options = mine.ModelPackageOptions(so)
    assert (
        mine.ModelPackageContext(root).select_component("main", options).get_selected_variant_name()
        == "cpu"
    )
    so.add_session_config_entry("session.strict_providers", "1")
    with pytest.raises(ProviderUnavailable, match="NoSuchExecutionProvider"):
        mine.ModelPackageOptions(so)


def test_options_are_a_snapshot(tmp_path: Path) -> None:
    root = _runnable(
        tmp_path / "p", {"cpu": {"ep": CPU}, "other": {"ep": "OtherExecutionProvider"}}
    )
    so = onyxrt.SessionOptions()
    options = mine.ModelPackageOptions(so)
    so.add_provider("OtherExecutionProvider", {})  # after the snapshot: not seen
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            mine.ModelPackageContext(root)
            .select_component("main", options)
            .get_selected_variant_name()
            == "cpu"
        )


def test_no_match_says_what_to_add(tmp_path: Path) -> None:
    root = _runnable(tmp_path / "p", {"gpu": {"ep": "CUDAExecutionProvider", "device": "gpu"}})
    with pytest.raises(RuntimeError, match="No suitable model variant found") as info:
        mine.ModelPackageContext(root).select_component(
            "main", mine.ModelPackageOptions(onyxrt.SessionOptions())
        )
    assert "gpu (CUDAExecutionProvider, gpu)" in str(info.value) and f'"ep": "{CPU}"' in str(
        info.value
    )


# -- commits ---------------------------------------------------------------------------------
def _existing(root: Path) -> Path:
    for variant in ("a", "b"):
        (root / "c" / variant).mkdir(parents=True)
        (root / "c" / variant / "f.txt").write_text(variant)
    (root / "c" / "component.json").write_text(
        json.dumps({"variants": {"a": {}, "b": {"ep": CPU}}})
    )
    (root / "e.json").write_text(json.dumps({"variants": {"z": {}}}))
    (root / "inline" / "x").mkdir(parents=True)
    (root / "manifest.json").write_text(
        json.dumps(
            {
                **BASE,
                "components": {
                    "c": "c",
                    "e": "e.json",
                    "inl": {"variants": {"x": {"variant_directory": "inline/x"}}},
                },
            }
        )
    )
    return root


EDITS = {
    "dense_in_place": lambda m, p, d, b: p.commit(None, m.ModelPackageWriteMode.DENSE),
    "remove_variant_and_prune": lambda m, p, d, b: (
        p.remove_variant("c", "a"),
        p.prune(),
        p.commit(),
    ),
    "remove_components_and_prune": lambda m, p, d, b: (
        p.remove_component("inl"),
        p.remove_component("c"),
        p.prune(),
        p.commit(),
    ),
    "edit_in_place": lambda m, p, d, b: (
        p.set_variant("c", "n", '{"ep": "X"}'),
        p.set_component_external("d", "ddir"),
        p.set_variant("d", "q", "{}"),
        p.set_component_inline("e", '{"variants": {"k": {}}}'),
        p.set_layout("installed"),
        p.commit(),
    ),
    "asset_added_then_removed": lambda m, p, d, b: (
        p.commit(),
        p.remove_shared_asset(p.add_shared_asset(str(d))),
        p.commit(),
    ),
    "dense_copy_with_asset": lambda m, p, d, b: (
        p.remove_component("c"),
        p.remove_component("inl"),
        p.add_shared_asset(str(d)),
        p.commit(str(b / "copy"), m.ModelPackageWriteMode.DENSE),
    ),
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_edits_and_commits_leave_the_same_files(
    tmp_path: Path, asset: Path, edit: Callable[..., Any]
) -> None:
    trees = []
    for module in (ort_ref, mine):
        base = tmp_path / module.__name__
        root = _existing(base / "pkg")
        edit(module, module.ModelPackage.open(str(root)), asset, base)
        info = json.dumps(module.ModelPackage.open(str(root)).get_info()).replace(
            str(base), "<base>"
        )
        trees.append((_tree(base), json.loads(info)))
    assert trees[1] == trees[0]


def test_a_copy_keeps_a_component_folder_a_folder(tmp_path: Path) -> None:
    root = _existing(tmp_path / "pkg")
    pkg = mine.ModelPackage.open(str(root))
    pkg.remove_component("inl")  # its folder is not copied: the copy would not open
    pkg.commit(str(tmp_path / "copy"))
    # onnxruntime writes copy/c as a file, which moves variants a and b to copy/a, copy/b.
    assert (tmp_path / "copy" / "c" / "component.json").is_file()
    # The copy is the package now.
    assert pkg.resolve_string_ref(".") == str((tmp_path / "copy").resolve())
    (tmp_path / "copy" / "c" / "a").mkdir()  # variant folders are the user's to copy
    info = assert_same(
        lambda m: m.ModelPackage.open(str(tmp_path / "copy")).get_info(), root=tmp_path
    )
    folders = {v["name"]: v["variant_directory"] for v in info["components"][0]["variants"]}
    assert folders == {"a": "<root>/copy/c/a", "b": None}


def test_write_modes_have_onnxruntimes_values() -> None:
    assert {m.name: int(m) for m in mine.ModelPackageWriteMode} == {
        name: int(value) for name, value in ort_ref.ModelPackageWriteMode.__members__.items()
    }
