"""Running a model package (:mod:`onyxrt.model_package`): choosing a variant of a
component for the providers a ``SessionOptions`` configures, and creating its session —
onnxruntime 1.32's ``ModelPackageContext``, ``ModelPackageOptions`` and
``ModelPackageComponentContext``.

    ctx = ModelPackageContext("my_package")
    chosen = ctx.select_component("main", ModelPackageOptions(onyxrt.SessionOptions()))
    session = chosen.create_session()

A variant is chosen for the first provider configured on the session options
(``add_provider``, ``add_provider_for_devices``, a selection policy or delegate; the CPU
provider when none: :mod:`onyxrt.provider_selection`) that is usable here: its ``ep``
must name that provider, its ``device`` (if any) one of the provider's device types;
among those, a compatible ``compatibility_string`` scores higher, and the first declared
wins ties.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping
from typing import Any

from .discovery import CPU_PROVIDER, catalog
from .errors import (
    ModelPackageError,
    PackageContextError,
    ProviderOptionsNotApplicable,
    ProviderUnavailable,
    VariantNotRunnable,
)
from .model_package import ModelPackage, PathArg
from .model_package_schema import (
    VariantRecord,
    parse_json,
)
from .provider_selection import configured_providers
from .records import record
from .session_options import (
    STRICT_PROVIDERS_KEY,
    SessionOptions,
)

__all__ = ["ModelPackageContext", "ModelPackageComponentContext", "ModelPackageOptions"]

# Session config keys holding paths: resolved against the package (onnxruntime's list).
_PATH_SESSION_KEYS = (
    "session.model_external_initializers_file_folder_path",
    "ep.context_file_path",
)
# Output files only the caller may ask for, never a package (onnxruntime's list).
_FORBIDDEN_SESSION_KEYS = (
    "session.debug_layout_transformation",
    "session.collect_node_memory_stats_to_file",
    "session.enable_profiling",
    "session.optimized_model_filepath",
)


@record(frozen=True)
class _ProviderChoice:
    """A provider variants are chosen for: its options and the devices it would use."""

    name: str
    options: Mapping[str, Any]
    devices: tuple[Any, ...]

    @property
    def device_types(self) -> frozenset[str]:
        return frozenset(
            str(getattr(d.device, "type", "")).lower() for d in self.devices if hasattr(d, "device")
        )


class ModelPackageOptions:
    """The provider intent of a :class:`~onyxrt.SessionOptions`, taken when created (later
    changes to the options do not count): the providers variants are selected for, with
    their options and devices. A configured provider that is not usable here is skipped
    with a ``ProviderFallbackWarning`` (an error with ``session.strict_providers=1``)."""

    def __init__(self, sess_options: SessionOptions) -> None:
        if not isinstance(sess_options, SessionOptions):
            raise TypeError(
                f"ModelPackageOptions takes an onyxrt.SessionOptions, got {type(sess_options).__name__}"
            )
        from .api import get_ep_devices
        from .session import ProviderFallbackWarning

        cat = catalog()
        usable = cat.available()
        strict = sess_options.config_flag(STRICT_PROVIDERS_KEY)
        choices = []
        for configured in configured_providers(sess_options):
            name, options, devices = configured.name, configured.options, configured.devices or None
            if name not in usable:
                reason = cat.status(name).reason if name in cat.names() else "it is not installed"
                message = (
                    f"{name} was configured for model package variant selection but is not usable here "
                    f"({reason}). Usable providers: {usable}."
                )
                if strict:
                    raise ProviderUnavailable(
                        message + f" (strict mode: {STRICT_PROVIDERS_KEY}=1)", name
                    )
                warnings.warn(
                    message + " Variants are selected for the next configured provider (or "
                    f"{CPU_PROVIDER}); set {STRICT_PROVIDERS_KEY}=1 to make this an error.",
                    ProviderFallbackWarning,
                    stacklevel=2,
                )
                continue
            if devices is None:
                devices = [d for d in get_ep_devices() if d.ep_name == name and d.state == "usable"]
            choices.append(_ProviderChoice(name, options, tuple(devices)))
        if not choices:
            cpu = [d for d in get_ep_devices() if d.ep_name == CPU_PROVIDER]
            choices.append(_ProviderChoice(CPU_PROVIDER, {}, tuple(cpu)))
        self._providers = tuple(choices)

    def __repr__(self) -> str:
        return f"<ModelPackageOptions providers={[p.name for p in self._providers]}>"


@record(frozen=True)
class _RunnableVariant:
    """What the ``"ort"`` executor_info of a variant says, paths resolved."""

    name: str
    ep: str | None
    device: str | None
    compatibility_string: str | None
    folder: str
    model_path: str | None
    session_options: Mapping[str, str]
    provider_options: Mapping[str, str]


class ModelPackageContext:
    """A package opened to run its models: lists components and variants, resolves paths,
    and selects a component's variant for the configured providers
    (:meth:`select_component`). Errors are RuntimeErrors naming the package, as in
    onnxruntime."""

    def __init__(self, package_root: PathArg) -> None:
        root = os.fspath(package_root)
        try:
            self._package = ModelPackage.open(root)
        except ModelPackageError as exc:
            raise PackageContextError(f"Failed to open model package at '{root}': {exc}") from exc
        self._components = {
            comp.name: [self._runnable(comp.name, var) for var in comp.variants.values()]
            for comp in self._package._components.values()
        }

    def _runnable(self, component: str, var: VariantRecord) -> _RunnableVariant:
        where = f"for variant '{var.name}' in component '{component}'"
        folder = var.directory or ""
        text = var.executor_info.get("ort", "")
        model_path, session_options, provider_options = None, {}, {}
        if text:
            try:
                info = parse_json(text)
            except ValueError as exc:
                raise PackageContextError(
                    f'Failed to parse executor_info["ort"] JSON {where}: {exc}'
                ) from None
            if not isinstance(info, dict):
                raise PackageContextError(
                    f"ORT variant configuration must be a JSON object {where}: "
                    '{"model_file": ..., "session_options": {...}}.'
                )
            if "model_file" in info:
                if not isinstance(info["model_file"], str):
                    raise PackageContextError(
                        f"ORT variant configuration: model_file must be a string {where}"
                    )
                model_path = self._resolve_field("model_file", info["model_file"], folder, where)
            session_options = _string_map(info, "session_options", where)
            provider_options = _string_map(info, "provider_options", where)
            for key, value in session_options.items():
                if key in _PATH_SESSION_KEYS and value:
                    session_options[key] = self._resolve_field(key, value, folder, where)
            for key in session_options:
                if key in _FORBIDDEN_SESSION_KEYS:
                    raise PackageContextError(
                        f"ORT variant configuration: '{key}' cannot be set in model package session options "
                        f"{where}. Set it on the SessionOptions given to create_session() instead."
                    )
        return _RunnableVariant(
            var.name,
            var.text("ep"),
            var.text("device"),
            var.text("compatibility_string"),
            folder,
            model_path,
            session_options,
            provider_options,
        )

    def _resolve_field(self, field: str, value: str, folder: str, where: str) -> str:
        try:
            return self._package.resolve_string_ref(value, folder or None, False)
        except ModelPackageError as exc:
            raise PackageContextError(
                f"Failed to resolve ORT variant '{field}' = '{value}' {where}: {exc}"
            ) from exc

    def _variants(self, component_name: str) -> list[_RunnableVariant]:
        if component_name not in self._components:
            raise PackageContextError(
                f"Component model not found: {component_name}. The package has "
                f"{list(self._components) or 'no components'}."
            )
        return self._components[component_name]

    def get_schema_version(self) -> int:
        """The manifest's schema major version."""
        return self._package._schema[0]

    def get_component_count(self) -> int:
        """How many components the package has."""
        return len(self._components)

    def get_component_names(self) -> list[str]:
        """The component names, in manifest order."""
        return list(self._components)

    def get_variant_count(self, component_name: str) -> int:
        """How many variants a component has."""
        return len(self._variants(component_name))

    def get_variant_names(self, component_name: str) -> list[str]:
        """A component's variant names, in declaration order."""
        return [v.name for v in self._variants(component_name)]

    def get_variant_ep_name(self, component_name: str, variant_name: str) -> str | None:
        """The provider a variant is for (its ``ep``), or None when it names none."""
        for variant in self._variants(component_name):
            if variant.name == variant_name:
                return variant.ep
        raise PackageContextError(
            f"Variant '{variant_name}' not found in component '{component_name}'. "
            f"Variants: {self.get_variant_names(component_name)}."
        )

    def resolve_string_ref(
        self, string_ref: str, base_dir: PathArg | None = None, must_exist: bool = False
    ) -> str:
        """As :meth:`ModelPackage.resolve_string_ref` (errors are RuntimeErrors)."""
        try:
            return self._package.resolve_string_ref(string_ref, base_dir, must_exist)
        except ModelPackageError as exc:
            raise PackageContextError(
                f"Failed to resolve '{string_ref}' in model package: {exc}"
            ) from exc

    def select_component(
        self, component_name: str, options: ModelPackageOptions
    ) -> ModelPackageComponentContext:
        """Choose the component's variant for the first provider of ``options``: its ``ep``
        must be that provider and its ``device`` (if set) one the provider drives; a
        ``compatibility_string`` the provider rates better scores higher; the first
        declared variant wins ties."""
        if not isinstance(options, ModelPackageOptions):
            raise TypeError(
                f"select_component takes a ModelPackageOptions, got {type(options).__name__}"
            )
        variants = self._variants(component_name)
        provider = options._providers[0]
        chosen = _best_variant(variants, provider)
        if chosen is None:
            offered = [
                f"{v.name} ({v.ep or 'no ep'}{', ' + v.device if v.device else ''})"
                for v in variants
            ]
            raise PackageContextError(
                "No suitable model variant found for the configured execution providers. Component "
                f"'{component_name}' has variants {offered or '(none)'}; the session options select "
                f"{provider.name} (devices: {sorted(provider.device_types) or 'any'}). Add a variant with "
                f'"ep": "{provider.name}", or configure a provider one of the variants is for.'
            )
        return ModelPackageComponentContext._selected(component_name, chosen, provider)


def _string_map(info: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = info.get(key, {})
    if not isinstance(value, dict):
        raise PackageContextError(
            f"ORT variant configuration: '{key}' must be a JSON object {where}"
        )
    if not all(isinstance(v, str) for v in value.values()):
        raise PackageContextError(
            f"ORT variant configuration: '{key}' entries must be strings {where}"
        )
    return dict(value)


def _best_variant(
    variants: list[_RunnableVariant], provider: _ProviderChoice
) -> _RunnableVariant | None:
    from .capi.introspection import OrtCompiledModelCompatibility as Compat
    from .capi.introspection import get_model_compatibility_for_ep_devices

    best, best_score = None, -1
    for variant in variants:
        if variant.ep != provider.name:
            continue
        if (
            variant.device
            and provider.device_types
            and variant.device.lower() not in provider.device_types
        ):
            continue
        score = 10
        if variant.compatibility_string:
            verdict = get_model_compatibility_for_ep_devices(
                list(provider.devices), variant.compatibility_string
            )
            if verdict == Compat.EP_UNSUPPORTED:
                continue
            score += {
                Compat.EP_SUPPORTED_OPTIMAL: 100,
                Compat.EP_SUPPORTED_PREFER_RECOMPILATION: 50,
            }.get(verdict, 0)
        if score > best_score:
            best, best_score = variant, score
    return best


class ModelPackageComponentContext:
    """The variant :meth:`ModelPackageContext.select_component` chose for a component, and
    the provider it was chosen for; :meth:`create_session` runs it."""

    _component: str
    _variant: _RunnableVariant
    _provider: _ProviderChoice

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ModelPackageComponentContext has no public constructor; get one from "
            "ModelPackageContext.select_component(component_name, ModelPackageOptions(so))"
        )

    @classmethod
    def _selected(
        cls, component: str, variant: _RunnableVariant, provider: _ProviderChoice
    ) -> ModelPackageComponentContext:
        self = cls.__new__(cls)
        self._component, self._variant, self._provider = component, variant, provider
        return self

    def get_selected_variant_name(self) -> str:
        """The chosen variant's name."""
        return self._variant.name

    def get_selected_variant_folder_path(self) -> str:
        """The chosen variant's folder ("" when it has none on disk)."""
        return self._variant.folder

    def create_session(self, sess_options: SessionOptions | None = None) -> Any:
        """An :class:`onyxrt.InferenceSession` of the chosen variant's ``model_file`` on the
        provider it was chosen for. With ``sess_options=None`` the variant's
        ``session_options`` (config entries) and ``provider_options`` apply; given options
        are used as they are, plus the package's path entries they do not set (they are
        not modified)."""
        from .session import InferenceSession

        variant = self._variant
        if variant.model_path is None:
            raise VariantNotRunnable(
                f'Selected variant \'{variant.name}\' has no executor_info["ort"]["model_file"]. Component: '
                f'{self._component}. Give the variant "executor_info": {{"ort": {{"model_file": ...}}}}.'
            )
        options = dict(self._provider.options)
        if sess_options is None:
            opts = SessionOptions()
            for key, value in variant.session_options.items():
                opts.add_session_config_entry(key, value)
            if variant.provider_options:
                if self._provider.name == CPU_PROVIDER:
                    raise ProviderOptionsNotApplicable(
                        f"Cannot apply package provider_options: the selected EP does not expose OrtEpDevices "
                        f"({CPU_PROVIDER} takes no provider options from a package; variant '{variant.name}'). "
                        "Remove them from the variant, or pass your own SessionOptions."
                    )
                options.update(variant.provider_options)
        elif isinstance(sess_options, SessionOptions):
            opts = copy.copy(sess_options)
            opts._config = dict(sess_options._config)
            for key in _PATH_SESSION_KEYS:
                if key in variant.session_options and key not in opts._config:
                    opts.add_session_config_entry(key, variant.session_options[key])
        else:
            raise TypeError(
                f"create_session takes an onyxrt.SessionOptions or None, got {type(sess_options).__name__}"
            )
        return InferenceSession(
            variant.model_path, sess_options=opts, providers=[(self._provider.name, options)]
        )

    def __repr__(self) -> str:
        return (
            f"<ModelPackageComponentContext {self._component}/{self._variant.name} "
            f"on {self._provider.name}>"
        )
