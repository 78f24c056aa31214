"""The on-disk format of a model package: its JSON schema, its path rules and the
content hash of its shared assets (what :mod:`onyxrt.model_package` reads and writes).

A model package is a folder; the layout is onnxruntime's (1.32), so packages move freely
between the two runtimes::

    package_root/
    ├── manifest.json                 # required: schema_version, components, ...
    ├── decoder/                      # an external component: "decoder": "decoder"
    │   ├── component.json            #   {"variants": {...}}
    │   └── cpu/                      #   a variant folder (variant_directory)
    │       ├── model.onnx
    │       └── ort.json              #   executor_info["ort"] as a file
    ├── encoder/cuda/model.onnx       # a variant of an inline component
    └── shared_assets/
        └── sha256-<64 hex>/          # content-addressed folder ("sha256:<64 hex>")

``manifest.json`` holds ``schema_version`` (``"<major>.<minor>"``; major 1 is read, any
minor; a newer minor tolerates unknown fields), optional ``package_name``,
``package_version``, ``description``, ``layout`` (``"portable"``, the default, or
``"installed"``), ``components`` (name → inline component object, or a path to a
component folder holding ``component.json`` or to a component file), optional
``shared_assets`` (``"sha256:<hex>"`` → folder, overriding the default location) and
``additional_metadata`` (any JSON). A component holds ``variants`` (name → variant), an
optional ``component_name`` and ``additional_metadata``. A variant holds
``variant_directory`` (relative to its component's folder; defaults to the variant name),
``ep``, ``device`` (cpu/gpu/npu), ``compatibility_string``, ``executor_info`` (consumer
namespace → inline object or path of a JSON file in the variant folder) and
``additional_metadata``.

In a portable package every path is relative and stays inside the package root: absolute
paths, ``..`` segments and symlinks leading out are refused (``allow_external_paths`` or
the ``installed`` layout lift that).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import field
from pathlib import PurePath
from typing import Any

from .errors import (
    InvalidPackage,
    ModelPackageError,
    PackageEntryNotFound,
    PackageIOError,
    PackageStateError,
)
from .records import record

__all__ = [
    "PathRules",
    "VariantRecord",
    "ComponentRecord",
    "MANIFEST_FILE",
    "COMPONENT_FILE",
    "SHARED_ASSETS_DIR",
    "compute_directory_hash",
    "resolve_path",
    "weakly_canonical",
    "is_inside",
    "is_asset_uri",
    "split_asset_ref",
    "asset_dir_name",
    "asset_uri_from_dir_name",
    "parse_json",
    "read_json_file",
    "dump_compact",
    "dump_pretty",
    "parse_schema_version",
    "parse_component",
    "parse_variant",
    "load_component",
    "asset_table",
    "executor_info_text",
    "makedirs",
    "write_atomic",
    "copy_asset",
]

MANIFEST_FILE = "manifest.json"
COMPONENT_FILE = "component.json"
SHARED_ASSETS_DIR = "shared_assets"
SCHEMA_MAJOR = 1  # the schema majors this build reads (onnxruntime 1.32: exactly 1)
KNOWN_MINOR = 0  # a newer minor may carry fields this build does not know: tolerated
AUTHORED_SCHEMA_VERSION = "1.0"

MANIFEST_KEYS = frozenset(
    {
        "schema_version",
        "package_name",
        "package_version",
        "description",
        "layout",
        "components",
        "shared_assets",
        "additional_metadata",
    }
)
COMPONENT_KEYS = frozenset({"component_name", "variants", "additional_metadata"})
VARIANT_KEYS = frozenset(
    {
        "variant_directory",
        "ep",
        "device",
        "compatibility_string",
        "executor_info",
        "additional_metadata",
    }
)
_HEX = frozenset("0123456789abcdef")


# -- errors ---------------------------------------------------------------------------
# Each also derives from the builtin onnxruntime raises for the same mistake.
# -- JSON -----------------------------------------------------------------------------
def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text, keeping object key order (NaN/Infinity are refused, as strict
    JSON parsers do). Raises ValueError."""
    if isinstance(text, bytes):
        text = text.decode("utf-8-sig")
    return json.loads(text, parse_constant=_no_constants)


def read_json_file(path: str) -> Any:
    """Read and parse a JSON file, with onnxruntime's messages for missing or bad files."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise PackageIOError(
            f"Cannot open file: '{path}': {exc.strerror or exc}. Check that the file exists "
            "and is readable."
        ) from None
    try:
        return parse_json(data)
    except ValueError as exc:
        raise InvalidPackage(
            f"Failed to parse JSON at '{path}'. Fix the JSON syntax ({exc})."
        ) from None


def dump_compact(value: Any) -> str:
    """JSON without spaces, keys in insertion order (what the JSON getters return)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dump_pretty(value: Any) -> str:
    """JSON indented by two spaces with a final newline (how package files are written)."""
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def json_arg(text: str, where: str) -> Any:
    """Parse a JSON string given to an authoring call."""
    try:
        return parse_json(text)
    except (ValueError, TypeError) as exc:
        raise InvalidPackage(f"{where}: JSON parse error. Pass valid JSON text ({exc}).") from None


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a boolean" if isinstance(value, bool) else "a number"


def expect_object(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an InvalidPackage naming ``where``."""
    if not isinstance(value, dict):
        raise InvalidPackage(
            f"{where}: expected a JSON object. Got {_json_type(value)}; write the "
            "fields inside {...}."
        )
    return value


def check_unknown_fields(
    obj: dict[str, Any], known: frozenset[str], where: str, strict: bool
) -> None:
    """Refuse fields outside ``known`` when ``strict``."""
    if strict:
        for key in obj:
            if key not in known:
                raise InvalidPackage(
                    f"{where}: unknown field '{key}'. Known fields: {', '.join(sorted(known))}; "
                    "open with strict_unknown_fields=False to keep fields of a newer schema."
                )


# -- paths ----------------------------------------------------------------------------
@record(frozen=True)
class PathRules:
    """How paths of a package resolve: ``allow_external_paths`` lets absolute paths,
    ``..`` segments and targets outside the root through (open option, or the
    ``installed`` layout); ``follow_symlinks`` is onnxruntime's open option of that name."""

    allow_external_paths: bool = False
    follow_symlinks: bool = True


def _lexical(path: str) -> str:
    # std::filesystem's lexically_normal: '.' and 'x/..' collapse; a trailing '/' stays.
    if not path:
        return path
    out = os.path.normpath(path)
    if path.endswith(("/", os.sep)) and not out.endswith(("/", os.sep)):
        out += os.sep
    return out


def weakly_canonical(path: str) -> str:
    """The path with the symlinks of its longest existing prefix resolved and the rest
    normalized lexically (std::filesystem::weakly_canonical). A relative path none of
    which exists stays relative."""
    if os.path.exists(path):
        return os.path.realpath(path)
    head, tail = path, list[str]()
    while head and not os.path.exists(head):
        parent, name = os.path.split(head)
        tail.insert(0, name)
        if parent == head:
            break
        head = parent
    if not head or not os.path.exists(head):
        return _lexical(path)
    return _lexical(os.path.join(os.path.realpath(head), *tail))


def is_inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalized)."""
    root = root.rstrip("/" + os.sep) or os.sep
    return path.rstrip("/" + os.sep) == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_path(base_dir: str, root: str, ref: str, rules: PathRules, must_exist: bool) -> str:
    """Resolve ``ref`` against ``base_dir`` the way onnxruntime's packages do.

    Without ``rules.allow_external_paths``: absolute paths and ``..`` segments are refused,
    and the result (symlinks resolved) must stay under ``root`` (unless ``root`` is empty:
    a package not yet committed anywhere). ``must_exist`` makes a missing target an error.
    """
    if not ref:
        raise InvalidPackage(
            "ResolvePath: input must not be empty. Give a path relative to the "
            "package (or its variant folder)."
        )
    absolute = os.path.isabs(ref)
    if not rules.allow_external_paths:
        if absolute:
            raise InvalidPackage(
                f"ResolvePath: absolute or drive-rooted path '{ref}' is not allowed in portable layout. "
                "Use a path relative to the package, or open it with allow_external_paths=True "
                '(or give the manifest "layout": "installed").'
            )
        if ".." in PurePath(ref).parts:
            raise InvalidPackage(
                f"ResolvePath: '..' segments are not allowed in portable layout: '{ref}'. Keep paths "
                "inside the package, or open it with allow_external_paths=True."
            )
    joined = ref if absolute or not base_dir else os.path.join(base_dir, ref)
    exists = os.path.exists(joined)
    if not exists and must_exist:
        raise PackageEntryNotFound(
            f"ResolvePath: '{joined}' does not exist. Create it or fix the path."
        )
    checked = weakly_canonical(joined)  # symlinks resolved: what a read would really open
    resolved = checked if exists or rules.follow_symlinks else _lexical(joined)
    if not rules.allow_external_paths and root:
        # onnxruntime checks `resolved` only; checking the symlink-resolved path as well also
        # refuses a link out of the package below a path that does not exist yet.
        for candidate in dict.fromkeys((resolved, checked)):
            if not is_inside(candidate, root):
                raise InvalidPackage(
                    f"ResolvePath: '{candidate}' escapes package_root '{root}'. Keep files (and the "
                    "targets of symlinks) inside the package, or open it with allow_external_paths=True."
                )
    return resolved


def is_asset_uri(uri: str) -> bool:
    """Whether ``uri`` is ``sha256:`` followed by 64 lower-case hex digits."""
    return len(uri) == 71 and uri.startswith("sha256:") and set(uri[7:]) <= _HEX


def split_asset_ref(ref: str) -> tuple[str, str] | None:
    """``(uri, sub_path)`` for ``sha256:<hex>`` or ``sha256:<hex>/sub/path``; None otherwise."""
    if not is_asset_uri(ref[:71]):
        return None
    if len(ref) == 71:
        return ref, ""
    return (ref[:71], ref[72:]) if ref[71] == "/" else None


def asset_dir_name(uri: str) -> str:
    """The folder name of a shared asset under ``shared_assets/``: ``sha256-<hex>``."""
    return "sha256-" + uri[7:]


def asset_uri_from_dir_name(name: str) -> str | None:
    """The URI of a ``sha256-<hex>`` folder name; None for other names."""
    uri = "sha256:" + name[7:]
    return uri if name.startswith("sha256-") and is_asset_uri(uri) else None


def _walk_files(source: str) -> Iterator[tuple[bytes, str]]:
    def fail(exc: OSError) -> None:
        raise PackageIOError(
            f"ComputeDirectoryAssetUri: cannot iterate '{source}': {exc}"
        ) from None

    for dirpath, dirnames, filenames in os.walk(source, onerror=fail):
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise InvalidPackage(
                    f"ComputeDirectoryAssetUri: symlink not allowed: '{full}'. Copy "
                    "the file into the folder instead of linking to it."
                )
            if stat.S_ISREG(mode):
                rel = os.path.relpath(full, source).replace(os.sep, "/")
                yield os.fsencode(rel), full
            elif not stat.S_ISDIR(mode):
                raise InvalidPackage(
                    f"ComputeDirectoryAssetUri: unsupported file kind: '{full}' (only regular files "
                    "and directories allowed)."
                )


def compute_directory_hash(
    source_dir: str | os.PathLike[str], where: str = "ComputeDirectoryAssetUri"
) -> str:
    """The content URI of a folder, ``sha256:<hex>``: the SHA-256 of the lines
    ``<sha256 of file>  <relative/posix/path>\\n`` of its regular files, sorted by path
    (bytes). Empty folders do not count; symlinks are refused. onnxruntime's algorithm."""
    source = os.fspath(source_dir)
    if not os.path.isdir(source):
        raise PackageEntryNotFound(
            f"{where}: '{source}' is not a directory. Pass the folder to hash."
        )
    lines = []
    for rel, full in _walk_files(source):
        digest = hashlib.sha256()
        try:
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        except OSError as exc:
            raise PackageIOError(f"{where}: failed to hash file '{full}': {exc}") from None
        lines.append((rel, digest.hexdigest().encode() + b"  " + rel + b"\n"))
    lines.sort(key=lambda item: item[0])
    return "sha256:" + hashlib.sha256(b"".join(line for _, line in lines)).hexdigest()


# -- schema ---------------------------------------------------------------------------
def parse_schema_version(value: Any) -> tuple[int, int]:
    """``(major, minor)`` of a manifest's ``schema_version`` (``"1.0"``, ``"1"`` or ``1``);
    a major other than 1 is refused."""
    bad = InvalidPackage(
        "manifest: 'schema_version' must be a \"<major>.<minor>\" string. Use e.g. "
        f'"{AUTHORED_SCHEMA_VERSION}".'
    )
    if isinstance(value, str):
        major_s, dot, minor_s = value.partition(".")
        if not dot:
            minor_s = "0"
        if not all(p and p.isascii() and p.isdigit() and len(p) < 19 for p in (major_s, minor_s)):
            raise bad
        major, minor = int(major_s), int(minor_s)
    elif isinstance(value, int) and not isinstance(value, bool):
        major, minor = value, 0
    else:
        raise bad
    if major != SCHEMA_MAJOR:
        raise InvalidPackage(
            f"manifest: schema_version major {major} is not supported (this build supports major "
            f"{SCHEMA_MAJOR}). Re-author the package for schema {AUTHORED_SCHEMA_VERSION}."
        )
    return major, minor


@record
class VariantRecord:
    """One variant: its JSON ``body`` (the very object inside its component's body) and
    its folder on disk when that exists."""

    name: str
    body: dict[str, Any]
    directory: str | None = None
    executor_info: dict[str, str] = field(default_factory=dict)  # namespace → JSON text

    def text(self, key: str) -> str | None:
        """A string field of the body (``ep``, ``device``, ``compatibility_string``)."""
        value = self.body.get(key)
        return value if isinstance(value, str) else None


@record
class ComponentRecord:
    """One component: its JSON ``body``, the folder its variant paths are relative to,
    the file it lives in when external, and its variants in declaration order."""

    name: str
    body: dict[str, Any]
    directory: str
    external_path: str | None = None
    variants: dict[str, VariantRecord] = field(default_factory=dict)


def parse_variant(
    component_dir: str, root: str, rules: PathRules, strict: bool, name: str, body: Any
) -> VariantRecord:
    """Check a variant body against the schema and find its folder (an explicit
    ``variant_directory`` must exist; the default, the variant name, may not)."""
    where = f"variant '{name}'"
    body = expect_object(body, where)
    check_unknown_fields(body, VARIANT_KEYS, where, strict)
    for key in ("ep", "device", "compatibility_string"):
        if key in body and not isinstance(body[key], str):
            raise InvalidPackage(
                f"{where}: '{key}' must be a string. Got {dump_compact(body[key])}."
            )
    info = body.get("executor_info")
    if "executor_info" in body:
        if not isinstance(info, dict):
            raise InvalidPackage(
                f"{where}: executor_info must be an object (namespace → path or object)."
            )
        for ns, entry in info.items():
            if not isinstance(entry, (str, dict)):
                raise InvalidPackage(
                    f"{where}: executor_info['{ns}'] must be a string (path) or object (inline)."
                )
    explicit = "variant_directory" in body
    ref = body.get("variant_directory", name)
    if not isinstance(ref, str):
        raise InvalidPackage(
            f"{where}: variant_directory must be a string (a folder relative to the component)."
        )
    folder = resolve_path(component_dir, root, ref, rules, must_exist=explicit)
    return VariantRecord(name, body, folder if os.path.exists(folder) else None)


def parse_component(
    root: str, rules: PathRules, strict: bool, name: str, body: Any, component_dir: str
) -> ComponentRecord:
    """Check a component body against the schema, with its variants."""
    where = f"component '{name}'"
    body = expect_object(body, where)
    check_unknown_fields(body, COMPONENT_KEYS, where, strict)
    if "component_name" in body and not isinstance(body["component_name"], str):
        raise InvalidPackage(f"{where}: component_name must be a string.")
    if "variants" not in body:
        raise InvalidPackage(
            f"{where}: missing required 'variants' object. Add \"variants\": {{}} "
            "(variant name → variant)."
        )
    if not isinstance(body["variants"], dict):
        raise InvalidPackage(f"{where}: 'variants' must be an object (variant name → variant).")
    record = ComponentRecord(name, body, component_dir)
    for vname, vbody in body["variants"].items():
        record.variants[vname] = parse_variant(component_dir, root, rules, strict, vname, vbody)
    return record


def load_component(
    root: str, rules: PathRules, strict: bool, name: str, value: Any
) -> ComponentRecord:
    """A manifest's ``components[name]``: an inline object, or the path of a component
    folder (holding ``component.json``) or file."""
    if isinstance(value, dict):
        return parse_component(root, rules, strict, name, value, root)
    if not isinstance(value, str):
        raise InvalidPackage(
            f"component '{name}': value must be a string (path) or object (inline)."
        )
    path = resolve_path(root, root, value, rules, must_exist=True)
    if os.path.isdir(path):
        path = os.path.join(path, COMPONENT_FILE)
        if not os.path.exists(path):
            raise PackageEntryNotFound(
                f"component '{name}': directory has no '{COMPONENT_FILE}'. Add {path} "
                "or point the manifest at the component file."
            )
    record = parse_component(root, rules, strict, name, read_json_file(path), os.path.dirname(path))
    record.external_path = path
    return record


def asset_table(
    manifest: dict[str, Any], root: str, installed: bool, pending: dict[str, str]
) -> dict[str, str]:
    """Where each shared asset is: manifest overrides first, then the ``sha256-<hex>``
    folders under ``shared_assets/`` (sorted), then assets added but not committed."""
    table: dict[str, str] = {}
    if "shared_assets" in manifest:
        overrides = manifest["shared_assets"]
        if not isinstance(overrides, dict):
            raise InvalidPackage(
                'manifest: shared_assets must be an object ("sha256:<hex>" → folder).'
            )
        for uri, path in overrides.items():
            if not is_asset_uri(uri):
                raise InvalidPackage(
                    f"manifest: shared_assets key '{uri}' is not a valid sha256:<hex> URI."
                )
            if not isinstance(path, str):
                raise InvalidPackage(f"manifest: shared_assets['{uri}'] must be a string path.")
            joined = path if os.path.isabs(path) or not root else os.path.join(root, path)
            table[uri] = weakly_canonical(joined)
            if root and not installed and not is_inside(table[uri], root):
                raise InvalidPackage(
                    f"Portable path '{joined}' escapes package_root '{root}'. Keep shared "
                    "assets inside the package, or use the 'installed' layout."
                )
    folder = os.path.join(root, SHARED_ASSETS_DIR)
    if root and os.path.isdir(folder):
        found = {}
        for name in os.listdir(folder):
            uri = asset_uri_from_dir_name(name)
            if uri and uri not in table and os.path.isdir(os.path.join(folder, name)):
                found[uri] = os.path.join(folder, name)
        table.update(sorted(found.items()))
    for uri, source in pending.items():
        table.setdefault(uri, source)
    return table


def executor_info_text(
    var: VariantRecord, ns: str, entry: Any, root: str, rules: PathRules, strict: bool
) -> str:
    """The JSON text of one executor_info entry: inline objects serialized, files read
    from the variant folder. ``strict`` (when opening) makes a missing file an error;
    otherwise it reads as ""."""
    if isinstance(entry, dict):
        return dump_compact(entry)
    if var.directory is None:
        if not strict:
            return ""
        raise PackageEntryNotFound(
            f"variant '{var.name}': executor_info['{ns}'] points at an external file but the variant has no "
            "resolved variant_directory to anchor it. Create the variant folder or inline the entry."
        )
    path = ""
    try:
        path = resolve_path(var.directory, root, str(entry), rules, must_exist=strict)
        with open(path, "rb") as f:
            data = f.read()
    except ModelPackageError:
        if strict:
            raise
        return ""
    except OSError as exc:
        if strict:
            raise PackageIOError(
                f"Cannot open executor_info file: '{path}'. ({exc.strerror})"
            ) from None
        return ""
    try:
        text = data.decode("utf-8")
        parse_json(text)
    except ValueError as exc:
        raise InvalidPackage(
            f"Failed to parse executor_info JSON at '{path}'. Fix the file ({exc})."
        ) from None
    return text


# -- writing --------------------------------------------------------------------------
def makedirs(path: str) -> None:
    """``os.makedirs(exist_ok=True)`` raising :class:`PackageIOError`."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise PackageIOError(f"Cannot create '{path}': {exc.strerror or exc}.") from None


def write_atomic(path: str, text: str) -> None:
    """Write through a temporary file renamed over ``path`` (readers never see half a file)."""
    makedirs(os.path.dirname(path) or ".")
    tmp = f"{path}.tmp.{secrets.token_hex(8)}"
    try:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise PackageIOError(f"Cannot write '{path}': {exc.strerror or exc}.") from None


def copy_asset(uri: str, source: str, final: str, mismatch: str) -> None:
    """Copy a shared asset folder through a staging folder, checking its hash before it
    lands at ``final``."""
    stage = f"{final}.tmp.{secrets.token_hex(8)}"
    try:
        makedirs(os.path.dirname(final))
        shutil.copytree(source, stage, symlinks=True)
        staged = compute_directory_hash(stage)
        if staged != uri:
            raise PackageStateError(
                f"{mismatch}: expected {uri}, staged {staged}. '{source}' changed after it "
                "was added; add it again."
            )
        os.rename(stage, final)
    except ModelPackageError:
        raise
    except OSError as exc:
        raise PackageIOError(f"Cannot copy shared asset '{source}' to '{final}': {exc}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
