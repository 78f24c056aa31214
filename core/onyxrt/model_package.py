"""Model packages: one folder holding several variants of a model (one per execution
provider or device), a manifest describing them, and content-addressed shared assets —
onnxruntime 1.32's ``ModelPackage`` API, file-compatible with it.

The layout (details in :mod:`onyxrt.model_package_schema`)::

    package_root/
    ├── manifest.json        {"schema_version": "1.0", "components": {"main": "main"}}
    ├── main/                # component "main", kept in its own file
    │   ├── component.json   {"variants": {"cpu": {"ep": "CPUExecutionProvider", "executor_info":
    │   │                        {"ort": {"model_file": "model.onnx"}}}, "npu": {...}}}
    │   ├── cpu/model.onnx   # variant folders sit in their component's folder (for a
    │   └── npu/model.onnx   # component written inline in the manifest: the root)
    └── shared_assets/sha256-<hex>/   # e.g. a tokenizer, referenced as "sha256:<hex>/file"

Authoring and inspecting::

    pkg = ModelPackage()
    pkg.set_component_inline("main", '{"variants": {}}')
    pkg.set_variant("main", "cpu", '{"ep": "CPUExecutionProvider"}')
    pkg.set_variant_executor_info_inline("main", "cpu", "ort", '{"model_file": "model.onnx"}')
    pkg.commit("my_package")        # then put my_package/cpu/model.onnx in place

Running a package (choosing a variant for the session's providers) is
:mod:`onyxrt.model_package_selection`.
"""

from __future__ import annotations

import copy
import enum
import os
import shutil
import time
from collections.abc import Mapping
from typing import Any, TypeAlias

from .errors import (
    InvalidPackage,
    PackageEntryNotFound,
    PackageIOError,
    PackageStateError,
)
from .model_package_schema import (
    AUTHORED_SCHEMA_VERSION,
    COMPONENT_FILE,
    KNOWN_MINOR,
    MANIFEST_FILE,
    MANIFEST_KEYS,
    SHARED_ASSETS_DIR,
    ComponentRecord,
    PathRules,
    VariantRecord,
    asset_dir_name,
    asset_table,
    check_unknown_fields,
    compute_directory_hash,
    copy_asset,
    dump_compact,
    dump_pretty,
    executor_info_text,
    expect_object,
    is_asset_uri,
    is_inside,
    json_arg,
    load_component,
    makedirs,
    parse_component,
    parse_schema_version,
    parse_variant,
    read_json_file,
    resolve_path,
    split_asset_ref,
    write_atomic,
)

__all__ = ["ModelPackage", "ModelPackageWriteMode"]

PathArg: TypeAlias = "str | os.PathLike[str]"
_PRUNE_GRACE_S = 60.0


class ModelPackageWriteMode(enum.IntEnum):
    """How :meth:`ModelPackage.commit` writes components: PRESERVE keeps external
    components in their own files; DENSE writes every component inline in the manifest."""

    PRESERVE = 0
    DENSE = 1


class ModelPackage:
    """A model package being read or authored. ``ModelPackage()`` starts an empty one
    (``schema_version`` "1.0", portable layout); :meth:`open` reads a folder. Changes stay in
    memory until :meth:`commit`. JSON arguments and results are strings, as in onnxruntime.
    Usable as a context manager (closes on exit)."""

    def __init__(self) -> None:
        self._root = ""  # canonical package folder; "" until opened or committed somewhere
        self._manifest: dict[str, Any] = {
            "schema_version": AUTHORED_SCHEMA_VERSION,
            "layout": "portable",
            "components": {},
        }
        self._components: dict[str, ComponentRecord] = {}
        self._allow_external = False
        self._follow_symlinks = True
        self._strict = True
        self._schema = (0, 0)  # (major, minor) as read from disk; 0.0 before that
        self._pending_assets: dict[str, str] = {}  # uri → source folder, copied on commit
        self._assets: dict[str, str] = {}  # uri → resolved folder
        self._orphans: list[str] = []  # folders of removed components/variants, for prune()
        self._closed = False

    # -- opening --------------------------------------------------------------------
    @staticmethod
    def open(
        package_root: PathArg,
        allow_external_paths: bool = False,
        follow_symlinks: bool = True,
        strict_unknown_fields: bool = True,
    ) -> ModelPackage:
        """Read the package in ``package_root``. ``allow_external_paths`` admits absolute
        paths, ``..`` and targets outside the folder (the ``installed`` layout always
        does); ``strict_unknown_fields=False`` keeps fields this build does not know."""
        pkg = ModelPackage()
        pkg._load(
            os.fspath(package_root),
            bool(allow_external_paths),
            bool(follow_symlinks),
            bool(strict_unknown_fields),
        )
        return pkg

    @staticmethod
    def compute_directory_hash(source_dir: PathArg) -> str:
        """The ``sha256:<hex>`` content URI of a folder: the hash of the sorted lines
        ``<sha256 of file>  <relative/path>`` of its files (symlinks refused)."""
        return compute_directory_hash(source_dir)

    def _load(self, root: str, allow: bool, follow: bool, strict: bool) -> None:
        if not os.path.isdir(root):
            raise PackageIOError(
                f"package_root '{root}' is not a directory. Pass the folder that holds "
                f"{MANIFEST_FILE}."
            )
        self._root = os.path.realpath(root)
        self._allow_external, self._follow_symlinks = allow, follow
        manifest = expect_object(
            read_json_file(os.path.join(self._root, MANIFEST_FILE)), "manifest"
        )
        self._manifest = manifest
        if "schema_version" not in manifest:
            raise InvalidPackage(
                f"manifest: missing required 'schema_version'. Add \"schema_version\": "
                f'"{AUTHORED_SCHEMA_VERSION}".'
            )
        self._schema = parse_schema_version(manifest["schema_version"])
        self._strict = strict and self._schema[1] <= KNOWN_MINOR  # newer minor: tolerate new fields
        rules = PathRules(allow or manifest.get("layout") == "installed", follow)
        check_unknown_fields(manifest, MANIFEST_KEYS, "manifest", self._strict)
        components = manifest.get("components")
        if "components" not in manifest:
            raise InvalidPackage(
                "manifest: missing required 'components' object. Add \"components\": "
                "{name: component}."
            )
        if not isinstance(components, dict):
            raise InvalidPackage(
                "manifest: 'components' must be an object (name → component or path)."
            )
        for name, value in components.items():
            self._components[name] = load_component(self._root, rules, self._strict, name, value)
        self._refresh_assets()
        self._check_metadata()
        self._refresh_executor_info(strict=True)

    # -- state helpers ----------------------------------------------------------------
    @property
    def _layout(self) -> str:
        layout = self._manifest.get("layout")
        return layout if layout in ("portable", "installed") else "portable"

    def _rules(self) -> PathRules:
        return PathRules(self._allow_external or self._layout == "installed", self._follow_symlinks)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidPackage("Model package is closed. Open it again with ModelPackage.open().")

    def _component(self, name: str, where: str = "") -> ComponentRecord:
        record = self._components.get(name)
        if record is None:
            raise PackageEntryNotFound(
                f"{where}component '{name}' not found. Components: "
                f"{sorted(self._components) or 'none'}."
            )
        return record

    def _variant(self, component: str, variant: str, where: str = "") -> VariantRecord:
        record = self._component(component, where).variants.get(variant)
        if record is None:
            raise PackageEntryNotFound(
                f"{where}variant '{variant}' not found in component '{component}'."
            )
        return record

    def _check_metadata(self) -> None:
        m = self._manifest
        for key in ("package_name", "package_version", "description"):
            if key in m and not isinstance(m[key], str):
                raise InvalidPackage(f"manifest: '{key}' must be a string.")
        if "layout" in m and not isinstance(m["layout"], str):
            raise InvalidPackage("manifest: 'layout' must be a string.")
        if "layout" in m and m["layout"] not in ("portable", "installed"):
            raise InvalidPackage("manifest: 'layout' must be 'portable' or 'installed'.")

    def _refresh_assets(self) -> None:
        self._assets = asset_table(
            self._manifest, self._root, self._layout == "installed", self._pending_assets
        )

    def _refresh_executor_info(self, strict: bool) -> None:
        """The JSON text of each variant's executor_info entries (files read); ``strict``
        (when opening) makes a missing or unreadable file an error, else it reads ""."""
        rules = self._rules()
        for comp in self._components.values():
            for var in comp.variants.values():
                info = var.body.get("executor_info")
                entries = info.items() if isinstance(info, dict) else ()
                var.executor_info = {
                    ns: executor_info_text(var, ns, e, self._root, rules, strict)
                    for ns, e in entries
                }

    def _after_change(self, assets: bool = True) -> None:
        if assets:
            self._refresh_assets()
        self._check_metadata()
        self._refresh_executor_info(strict=False)

    def _orphan_variant(self, var: VariantRecord) -> None:
        if var.directory and self._root and is_inside(var.directory, self._root):
            self._orphans.append(var.directory)

    def _orphan_component(self, comp: ComponentRecord) -> None:
        for var in comp.variants.values():
            self._orphan_variant(var)
        if comp.external_path and self._root and is_inside(comp.directory, self._root):
            self._orphans.insert(0, comp.directory)  # components before their variants

    # -- inspecting -------------------------------------------------------------------
    def get_info(self) -> dict[str, Any]:
        """Package metadata, components with their variants, and shared assets, as a dict
        (onnxruntime's keys: ``schema_version_major``, ``package_name``, ``layout``,
        ``components`` → ``variants`` → ``variant_directory``/``ep``/``executor_info``...,
        ``shared_assets`` → ``uri``/``resolved_path``; JSON values as strings)."""
        self._check_open()
        m = self._manifest

        def meta(body: Mapping[str, Any]) -> str | None:
            return (
                dump_compact(body["additional_metadata"]) if "additional_metadata" in body else None
            )

        return {
            "schema_version_major": self._schema[0],
            "schema_version_minor": self._schema[1],
            **{key: m.get(key) for key in ("package_name", "package_version", "description")},
            "layout": self._layout,
            "additional_metadata_json": meta(m),
            "components": [
                {
                    "name": comp.name,
                    "additional_metadata_json": meta(comp.body),
                    "variants": [
                        {
                            "name": var.name,
                            "variant_directory": var.directory,
                            "ep": var.text("ep"),
                            "device": var.text("device"),
                            "compatibility_string": var.text("compatibility_string"),
                            "additional_metadata_json": meta(var.body),
                            "executor_info": dict(var.executor_info),
                        }
                        for var in comp.variants.values()
                    ],
                }
                for comp in self._components.values()
            ],
            "shared_assets": [
                {"uri": uri, "resolved_path": path} for uri, path in self._assets.items()
            ],
        }

    def get_component_json(self, component_name: str) -> str:
        """The component's JSON (``{"variants": {...}, ...}``), unknown fields kept."""
        self._check_open()
        return dump_compact(self._component(component_name).body)

    def get_variant_json(self, component_name: str, variant_name: str) -> str:
        """The variant's JSON (``{"ep": ..., "executor_info": {...}, ...}``)."""
        self._check_open()
        return dump_compact(self._variant(component_name, variant_name).body)

    def resolve_asset_uri(self, uri: str) -> str:
        """The folder of the shared asset ``sha256:<hex>``."""
        self._check_open()
        if uri not in self._assets:
            raise PackageEntryNotFound(
                f"Asset URI not declared in this package: '{uri}'. Add it with "
                f"add_shared_asset(); known: {list(self._assets) or 'none'}."
            )
        return self._assets[uri]

    def resolve_string_ref(
        self, string_ref: str, base_dir: PathArg | None = None, must_exist: bool = False
    ) -> str:
        """Resolve a path as the package's consumers do: ``sha256:<hex>[/sub/path]`` names a
        file in a shared asset; other paths are relative to ``base_dir`` (default: the
        package root) and, in a portable package, must stay inside it."""
        self._check_open()
        ref = os.fspath(string_ref)
        asset = split_asset_ref(ref)
        if asset is not None:
            folder = self.resolve_asset_uri(asset[0])
            if not asset[1]:
                return folder
            return resolve_path(
                folder, folder, asset[1], PathRules(False, self._follow_symlinks), bool(must_exist)
            )
        base = self._root if base_dir is None else os.fspath(base_dir)
        return resolve_path(base, self._root, ref, self._rules(), bool(must_exist))

    # -- authoring --------------------------------------------------------------------
    def set_component_inline(self, name: str, component_json: str) -> None:
        """Add or replace a component written inside the manifest (its variant folders are
        relative to the package root)."""
        self._check_open()
        body = expect_object(json_arg(component_json, f"component '{name}'"), f"component '{name}'")
        record = parse_component(self._root, self._rules(), self._strict, name, body, self._root)
        self._replace_component(name, record, body)

    def set_component_external(self, name: str, path: str) -> None:
        """Add or replace a component kept in its own file: ``path`` (relative to the root) is
        a folder holding ``component.json`` or a file; an existing one is read, else the
        component starts empty and is written on commit."""
        self._check_open()
        if not self._root:
            raise PackageStateError(
                "SetComponentExternal requires a package_root: commit(dest_root) the "
                "package to a folder first, or open an existing package."
            )
        path = os.fspath(path)
        resolved = resolve_path(self._root, self._root, path, self._rules(), must_exist=False)
        if os.path.isdir(resolved):
            file, folder = os.path.join(resolved, COMPONENT_FILE), resolved
        else:
            file, folder = resolved, os.path.dirname(resolved)
        body: Any = {"variants": {}}
        if os.path.exists(file):
            with open(file, "rb") as f:
                body = json_arg(f.read().decode("utf-8", "replace"), f"component '{name}'")
        body = expect_object(body, f"component '{name}'")
        record = parse_component(self._root, self._rules(), self._strict, name, body, folder)
        record.external_path = file
        self._replace_component(name, record, path)

    def _replace_component(self, name: str, record: ComponentRecord, entry: Any) -> None:
        if not isinstance(self._manifest.get("components"), dict):
            self._manifest["components"] = {}
        if name in self._components:
            self._orphan_component(self._components[name])
        self._manifest["components"][name] = entry
        self._components[name] = record
        self._after_change()

    def remove_component(self, name: str) -> None:
        """Remove a component (nothing happens if there is none). Its folders go on
        :meth:`prune`."""
        self._check_open()
        if name in self._components:
            self._orphan_component(self._components.pop(name))
            self._manifest.get("components", {}).pop(name, None)
            self._after_change()

    def set_variant(self, component_name: str, variant_name: str, variant_json: str) -> None:
        """Add or replace a variant of a component (an explicit ``variant_directory`` must
        exist, relative to the component's folder)."""
        self._check_open()
        comp = self._component(component_name, "SetVariant: ")
        body = json_arg(variant_json, f"variant '{variant_name}'")
        record = parse_variant(
            comp.directory, self._root, self._rules(), self._strict, variant_name, body
        )
        if variant_name in comp.variants:
            self._orphan_variant(comp.variants[variant_name])
        if not isinstance(comp.body.get("variants"), dict):
            comp.body["variants"] = {}
        comp.body["variants"][variant_name] = record.body
        comp.variants[variant_name] = record
        self._after_change()

    def remove_variant(self, component_name: str, variant_name: str) -> None:
        """Remove a variant (nothing happens if there is none). Its folder goes on :meth:`prune`."""
        self._check_open()
        comp = self._components.get(component_name)
        if comp is not None:
            if variant_name in comp.variants:
                self._orphan_variant(comp.variants.pop(variant_name))
            comp.body.get("variants", {}).pop(variant_name, None)
            self._after_change()

    def set_variant_executor_info_inline(
        self, component_name: str, variant_name: str, namespace_key: str, info_json: str
    ) -> None:
        """Set a consumer's executor_info as an inline object (onyxrt and onnxruntime read the
        ``"ort"`` one: ``model_file``, ``session_options``, ``provider_options``)."""
        self._check_open()
        value = expect_object(json_arg(info_json, "executor_info"), "executor_info inline value")
        self._set_executor_info(component_name, variant_name, namespace_key, value)

    def set_variant_executor_info_external(
        self, component_name: str, variant_name: str, namespace_key: str, path: str
    ) -> None:
        """Set a consumer's executor_info as the path of a JSON file in the variant folder."""
        self._check_open()
        self._set_executor_info(component_name, variant_name, namespace_key, os.fspath(path))

    def remove_variant_executor_info(
        self, component_name: str, variant_name: str, namespace_key: str
    ) -> None:
        """Remove a consumer's executor_info entry (nothing happens if there is none)."""
        self._check_open()
        self._set_executor_info(component_name, variant_name, namespace_key, None)

    def _set_executor_info(self, component: str, variant: str, ns: str, value: Any) -> None:
        comp = self._component(component)
        var = self._variant(component, variant)
        body = dict(var.body)
        info = body.get("executor_info")
        if not isinstance(info, dict):
            if value is None:
                return
            info = {}
        info = dict(info)
        if value is None:
            info.pop(ns, None)
        else:
            info[ns] = value
        if info:
            body["executor_info"] = info
        else:
            body.pop("executor_info", None)
        record = parse_variant(
            comp.directory, self._root, self._rules(), self._strict, variant, body
        )
        comp.body["variants"][variant] = body
        comp.variants[variant] = record
        self._after_change(assets=False)

    def add_shared_asset(
        self, source_dir: PathArg, expected_uri: str | None = None, copy_in: bool = True
    ) -> str:
        """Add a folder as a content-addressed shared asset and return its ``sha256:<hex>``
        URI. ``copy_in`` copies it to ``shared_assets/sha256-<hex>/`` on commit; without it
        the manifest points at ``source_dir`` (installed layout only). ``expected_uri``
        makes a different content an error (a reproducible-build check)."""
        self._check_open()
        source = os.fspath(source_dir)
        if not copy_in and self._layout == "portable":
            raise PackageStateError(
                "AddSharedAsset: copy_in=false rejected in portable layout (the path would "
                "point outside <package_root>). Use copy_in=True or set_layout('installed')."
            )
        uri = compute_directory_hash(source, where="AddSharedAsset")
        if expected_uri is not None and uri != expected_uri:
            raise PackageStateError(
                f"AddSharedAsset: hash mismatch — computed {uri}, expected {expected_uri}. "
                f"The content of '{source}' is not the expected one."
            )
        if not isinstance(self._manifest.get("shared_assets"), dict):
            self._manifest["shared_assets"] = {}
        if copy_in:
            self._pending_assets[uri] = source
        else:
            self._manifest["shared_assets"][uri] = source
        self._after_change()
        return uri

    def remove_shared_asset(self, uri: str) -> None:
        """Forget a shared asset and delete its folder under ``shared_assets/``."""
        self._check_open()
        overrides = self._manifest.get("shared_assets")
        if isinstance(overrides, dict):
            overrides.pop(uri, None)
            if not overrides:
                del self._manifest["shared_assets"]
        self._pending_assets.pop(uri, None)
        if self._root and is_asset_uri(uri):
            folder = os.path.join(self._root, SHARED_ASSETS_DIR, asset_dir_name(uri))
            if os.path.isdir(folder) and is_inside(os.path.realpath(folder), self._root):
                shutil.rmtree(folder, ignore_errors=True)
        self._after_change()

    def set_metadata(
        self, name: str | None = None, version: str | None = None, description: str | None = None
    ) -> None:
        """Set ``package_name``, ``package_version``, ``description``: None leaves a field,
        "" removes it."""
        self._check_open()
        for key, value in (
            ("package_name", name),
            ("package_version", version),
            ("description", description),
        ):
            if value == "":
                self._manifest.pop(key, None)
            elif value is not None:
                self._manifest[key] = str(value)
        self._after_change(assets=False)

    def set_layout(self, layout: str) -> None:
        """``"portable"`` (paths confined to the package) or ``"installed"`` (absolute and
        outside paths allowed)."""
        self._check_open()
        if layout not in ("portable", "installed"):
            raise InvalidPackage(
                f"SetLayout: layout must be 'portable' or 'installed', got {layout!r}."
            )
        self._manifest["layout"] = layout
        self._after_change(assets=False)

    def set_additional_metadata_json(
        self,
        scope: str,
        component_name: str | None = None,
        variant_name: str | None = None,
        json: str | None = None,
    ) -> None:
        """Set (JSON text) or clear (None) ``additional_metadata`` of the ``"manifest"``, a
        ``"component"`` or a ``"variant"``."""
        self._check_open()
        target: dict[str, Any]
        if scope == "manifest":
            if component_name is not None or variant_name is not None:
                raise InvalidPackage(
                    "SetAdditionalMetadataJson: 'manifest' scope takes no component/variant."
                )
            target = self._manifest
        elif scope in ("component", "variant"):
            if component_name is None:
                raise InvalidPackage(
                    f"model_package: 'component' must not be null (scope '{scope}')."
                )
            if scope == "component" and variant_name is not None:
                raise InvalidPackage(
                    "SetAdditionalMetadataJson: 'component' scope takes no variant."
                )
            if scope == "variant" and variant_name is None:
                raise InvalidPackage("model_package: 'variant' must not be null (scope 'variant').")
            comp = self._component(component_name)
            if variant_name is None:
                target = comp.body
            elif variant_name in comp.variants:
                target = comp.variants[variant_name].body
            else:
                raise PackageEntryNotFound(
                    f"variant '{variant_name}' not found. Component '{component_name}' "
                    f"has variants {list(comp.variants)}."
                )
        else:
            raise InvalidPackage(
                "SetAdditionalMetadataJson: scope must be 'manifest', 'component', or "
                f"'variant', got {scope!r}."
            )
        if json is None:
            target.pop("additional_metadata", None)
        else:
            target["additional_metadata"] = json_arg(json, "additional_metadata")
        self._after_change(assets=False)

    # -- writing ----------------------------------------------------------------------
    def commit(
        self,
        dest_root: PathArg | None = None,
        mode: ModelPackageWriteMode = ModelPackageWriteMode.PRESERVE,
    ) -> None:
        """Write the package: in place (``dest_root=None``), or to a new or empty folder
        (which becomes the package's root). Writes the manifest, external component files
        and shared assets — not variant folders (model files): put those in place yourself.
        Sources of shared assets must stay readable until then."""
        self._check_open()
        try:
            mode = ModelPackageWriteMode(mode)
        except ValueError:
            raise InvalidPackage(
                f"commit: mode must be ModelPackageWriteMode.PRESERVE or DENSE, got {mode!r}."
            ) from None
        if dest_root is None:
            self._commit_in_place(mode)
        else:
            self._commit_to(os.fspath(dest_root), mode)

    def _check_dense(self) -> None:
        for comp in self._components.values():
            for var in comp.variants.values():
                info = var.body.get("executor_info")
                for ns, entry in info.items() if isinstance(info, dict) else ():
                    if isinstance(entry, str):
                        raise PackageStateError(
                            f"WRITE_DENSE: component '{comp.name}' variant '{var.name}' has external executor_info "
                            f"'{ns}' (string path). Convert to inline via set_variant_executor_info_inline before "
                            "dense commit."
                        )

    def _commit_in_place(self, mode: ModelPackageWriteMode) -> None:
        root = self._root
        if not root:
            raise PackageStateError(
                "Commit: package has no package_root. Use dest_root variant: "
                "commit('some/folder') first."
            )
        makedirs(root)
        if self._layout == "portable":
            for comp in self._components.values():
                if comp.external_path and not is_inside(os.path.realpath(comp.external_path), root):
                    raise InvalidPackage(
                        f"component '{comp.name}': absolute path '{comp.external_path}' escapes "
                        f"package_root '{root}' (portable layout)."
                    )
        if mode == ModelPackageWriteMode.DENSE:
            self._check_dense()
            for comp in self._components.values():
                if comp.external_path:
                    self._manifest["components"][comp.name] = comp.body
                    comp.external_path, comp.directory = None, root
        for uri, source in self._pending_assets.items():
            final = os.path.join(root, SHARED_ASSETS_DIR, asset_dir_name(uri))
            if not os.path.exists(final):
                copy_asset(uri, source, final, "Shared asset source mutated during commit")
        for comp in self._components.values():
            if comp.external_path:
                write_atomic(comp.external_path, dump_pretty(comp.body))
        write_atomic(os.path.join(root, MANIFEST_FILE), dump_pretty(self._manifest))
        self._pending_assets.clear()
        self._refresh_assets()

    def _commit_to(self, dest: str, mode: ModelPackageWriteMode) -> None:
        if os.path.exists(dest):
            if not os.path.isdir(dest):
                raise PackageStateError(
                    f"Commit dest_root '{dest}' exists and is not a directory. "
                    "Commit to a new or empty folder."
                )
            if os.listdir(dest):
                raise PackageStateError(
                    f"Commit dest_root '{dest}' is not empty. Commit to a new or empty "
                    "folder, or call commit() to update the package in place."
                )
        makedirs(dest)
        manifest = copy.deepcopy(self._manifest)
        if mode == ModelPackageWriteMode.DENSE:
            self._check_dense()
            for comp in self._components.values():
                if comp.external_path:
                    manifest["components"][comp.name] = copy.deepcopy(comp.body)
        sources = {uri: self._pending_assets.get(uri, path) for uri, path in self._assets.items()}
        for uri, source in {**self._pending_assets, **sources}.items():
            if not os.path.isdir(source):
                raise PackageEntryNotFound(
                    f"Portable path does not exist: '{source}'. Shared asset {uri} has "
                    "no folder to copy; restore it or remove_shared_asset()."
                )
            copy_asset(
                uri,
                source,
                os.path.join(dest, SHARED_ASSETS_DIR, asset_dir_name(uri)),
                "Shared asset hash mismatch during dest_root commit",
            )
        manifest.pop("shared_assets", None)  # every asset now lives at its default place
        if mode == ModelPackageWriteMode.PRESERVE:
            for name, entry in manifest.get("components", {}).items():
                if isinstance(entry, str):
                    write_atomic(
                        self._external_target(dest, name, entry),
                        dump_pretty(self._components[name].body),
                    )
        write_atomic(os.path.join(dest, MANIFEST_FILE), dump_pretty(manifest))
        fresh = ModelPackage()
        fresh._load(dest, self._allow_external, self._follow_symlinks, self._strict)
        for attr in ("_root", "_manifest", "_components", "_schema", "_assets"):
            setattr(self, attr, getattr(fresh, attr))
        self._pending_assets.clear()

    def _external_target(self, dest: str, name: str, entry: str) -> str:
        if os.path.isabs(entry):
            if self._layout == "portable":
                raise InvalidPackage(
                    f"dest_root commit (portable): component '{name}' has absolute path '{entry}'."
                )
            return entry
        target = os.path.normpath(os.path.join(dest, entry))
        if not is_inside(os.path.abspath(target), os.path.abspath(dest)):
            raise InvalidPackage(
                f"dest_root commit (portable): component '{name}' relative path '{entry}' "
                "escapes dest_root."
            )
        source = self._components[name].external_path or ""
        # A component named by its folder keeps its folder form (variant paths are relative to it).
        if os.path.basename(source) == COMPONENT_FILE and not entry.endswith(".json"):
            target = os.path.join(target, COMPONENT_FILE)
        return target

    def prune(self) -> None:
        """Delete what removals left behind inside the package: folders of removed
        variants and components (unless still in use) and stale ``.tmp.`` staging folders
        of interrupted commits. Shared assets are never pruned."""
        self._check_open()
        root = self._root
        if not root:
            return
        staging = os.path.join(root, SHARED_ASSETS_DIR)
        if os.path.isdir(staging):
            for name in os.listdir(staging):
                path = os.path.join(staging, name)
                if (
                    ".tmp." in name
                    and os.path.isdir(path)
                    and time.time() - os.path.getmtime(path) >= _PRUNE_GRACE_S
                ):
                    shutil.rmtree(path, ignore_errors=True)
        live = [comp.directory for comp in self._components.values() if comp.external_path]
        live += [
            var.directory
            for comp in self._components.values()
            for var in comp.variants.values()
            if var.directory
        ]
        for path in self._orphans:
            # Never the root itself (onnxruntime would delete it for a root-level component file).
            if (
                path != root
                and is_inside(path, root)
                and os.path.isdir(path)
                and not any(is_inside(other, path) for other in live)
            ):
                shutil.rmtree(path, ignore_errors=True)
        self._orphans = [p for p in self._orphans if os.path.exists(p)]

    def close(self) -> None:
        """Release the package; later calls raise."""
        self._closed = True

    def __enter__(self) -> ModelPackage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ModelPackage {self._root or '(not on disk)'}: {list(self._components)}>"
