"""``SessionOptions``, ``RunOptions`` and their enums, as onnxruntime users know them.

Session config entries onyxrt understands (``add_session_config_entry``):

* ``session.strict_providers`` = ``"1"`` — a requested provider that is not installed or
  not usable raises :class:`~onyxrt.errors.ProviderUnavailable` instead of warning and
  falling back (see docs/providers.md, "Fallback policy").
* ``session.disable_cpu_ep_fallback`` = ``"1"`` — creation fails if any node would run
  on the CPU provider (onnxruntime's key).
* ``session.pin_nodes`` = ``"node_or_op=Provider;..."`` — run the named nodes (or every
  node of an op type) on a given provider.
* ``session.max_partitions`` / ``session.max_copies_per_run`` = ``"N"`` — warn
  (``PlacementWarning``; an error in strict mode) when the placement exceeds them.
* ``session.max_tensor_bytes`` = ``"N"`` or ``"64GiB"`` — the largest single tensor a
  kernel may build (default min(4 GiB, a quarter of physical memory)); past it the run
  raises :class:`~onyxrt.errors.ResourceLimitExceeded` before allocating.
* ``session.max_run_bytes`` = ``"N"`` or ``"8GiB"`` — the most memory one run's tensors
  may hold at once (default half of physical memory); see onyxrt.limits.
* ``session.optimized_model_external_initializers_file_name`` /
  ``session.optimized_model_external_initializers_min_size_in_bytes`` — with
  ``optimized_model_filepath``, initializers of at least that many bytes (default 1024)
  are written to that file beside the saved model (onnxruntime's keys).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .errors import ConfigEntryNotFound, InvalidArgument

__all__ = [
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "SessionOptions",
    "RunOptions",
    "STRICT_PROVIDERS_KEY",
    "DISABLE_CPU_FALLBACK_KEY",
    "PIN_NODES_KEY",
    "EXTRA_OPTIMIZERS_KEY",
    "MAX_PARTITIONS_KEY",
    "MAX_COPIES_KEY",
    "MAX_TENSOR_BYTES_KEY",
    "MAX_RUN_BYTES_KEY",
    "EXTERNAL_DATA_FOLDER_KEY",
    "OrtExecutionProviderDevicePolicy",
    "policy_device_order",
]

STRICT_PROVIDERS_KEY = "session.strict_providers"
DISABLE_CPU_FALLBACK_KEY = "session.disable_cpu_ep_fallback"
PIN_NODES_KEY = "session.pin_nodes"
#: Comma-separated optimizer passes that are off by default (``onyxrt.optimizer.OPT_IN``),
#: turned on for the session: ``"fuse_elementwise"``.
EXTRA_OPTIMIZERS_KEY = "session.extra_optimizers"
MAX_PARTITIONS_KEY = "session.max_partitions"
MAX_COPIES_KEY = "session.max_copies_per_run"
MAX_TENSOR_BYTES_KEY = "session.max_tensor_bytes"  # read by onyxrt.limits
MAX_RUN_BYTES_KEY = "session.max_run_bytes"  # read by onyxrt.limits
#: onnxruntime's key naming the folder external data is read from (a model given as bytes
#: has none of its own); read by onyxrt.external_data.
EXTERNAL_DATA_FOLDER_KEY = "session.model_external_initializers_file_folder_path"
OPTIMIZED_EXTERNAL_FILE_KEY = "session.optimized_model_external_initializers_file_name"
OPTIMIZED_EXTERNAL_MIN_SIZE_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"


class GraphOptimizationLevel(enum.IntEnum):
    """How much the graph optimizer may rewrite (onnxruntime's levels and values)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Sequential (default) or parallel execution of independent branches."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """Node ordering strategy (accepted for compatibility; onyxrt keeps model order)."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


def _check_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"SessionOptions.{name} must be an int >= {minimum}, got {value!r}")
    return value


class SessionOptions:
    """Options for creating an :class:`~onyxrt.InferenceSession` (onnxruntime's names)."""

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.enable_profiling = False
        self.profile_file_prefix = "onyxrt_profile"
        self.optimized_model_filepath = ""
        # -1 (onnxruntime's default): follow the default logger's severity
        # (set_default_logger_severity / set_default_logger_callback).
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config: dict[str, str] = {}
        self._external_initializers: dict[str, Any] = {}
        self._external_files: dict[str, Any] = {}
        self._added_providers: list[tuple[str, dict[str, Any]]] = []
        self._custom_op_libraries: list[str] = []
        self._load_cancelled = False
        self._ep_context_read_func: Any = None
        self._selection_delegate: Any = None
        self._free_dims_by_name: dict[str, int] = {}
        self._free_dims_by_denotation: dict[str, int] = {}
        self._initializers: dict[str, Any] = {}
        self._provider_devices: list[tuple[list[Any], dict[str, Any]]] = []
        self._selection_policy: Any = None

    def __setattr__(self, name: str, value: Any) -> None:
        # Typos in option names are silent no-ops in onnxruntime; here they are errors.
        if not name.startswith("_") and name not in _KNOWN_ATTRS:
            import difflib

            close = difflib.get_close_matches(name, sorted(_KNOWN_ATTRS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise AttributeError(f"SessionOptions has no option {name!r}.{hint}")
        if name == "graph_optimization_level":
            value = GraphOptimizationLevel(int(value))
        elif name == "execution_mode":
            value = ExecutionMode(int(value))
        elif name in ("intra_op_num_threads", "inter_op_num_threads"):
            value = _check_int(name, value)
        elif name == "log_severity_level":
            value = _check_int(name, value, -1)
            if value > 4:
                raise InvalidArgument(
                    "SessionOptions.log_severity_level must be -1 (the default logger's) or 0 (verbose) .. 4 (fatal)"
                )
        object.__setattr__(self, name, value)

    # -- config entries ----------------------------------------------------------------
    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a session config entry (string key and value)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The value of a session config entry; raises
        :class:`~onyxrt.errors.ConfigEntryNotFound` (a RuntimeError, as onnxruntime
        raises) if it was never set."""
        try:
            return self._config[key]
        except KeyError:
            raise ConfigEntryNotFound(f"SessionOptions does not have configuration with key: {key}") from None

    def config_entries(self) -> Mapping[str, str]:
        """All config entries set on these options."""
        return dict(self._config)

    def config_flag(self, key: str) -> bool:
        """Whether a boolean config entry is set to a true value."""
        return self._config.get(key, "0").strip().lower() in ("1", "true", "yes", "on")

    # -- model edits -------------------------------------------------------------------
    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dimension ``dim_name`` to ``dim_value`` in the model's inputs."""
        self._free_dims_by_name[str(dim_name)] = _check_int("dim_value", dim_value, 1)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Fix every dimension with denotation ``dim_denotation`` (e.g. DATA_BATCH)."""
        self._free_dims_by_denotation[str(dim_denotation)] = _check_int("dim_value", dim_value, 1)

    def add_initializer(self, name: str, ortvalue: Any) -> None:
        """Replace the initializer ``name`` with a value the caller owns."""
        self._initializers[str(name)] = ortvalue

    def add_external_initializers(self, names: list[str], ortvalues: list[Any]) -> None:
        """Supply the values of initializers the model stores as external data: they are
        used instead of reading the model's external files (each must match the
        initializer's declared shape and type)."""
        names, ortvalues = list(names), list(ortvalues)
        if len(names) != len(ortvalues):
            raise InvalidArgument(
                f"add_external_initializers: {len(names)} names but {len(ortvalues)} values; "
                "give one OrtValue per name"
            )
        for name, value in zip(names, ortvalues):
            self._external_initializers[str(name)] = value

    def add_external_initializers_from_files_in_memory(
        self, file_names: list[str], buffers: list[Any], lengths: list[int]
    ) -> None:
        """Supply the contents of the model's external-data files: a tensor whose
        ``location`` is one of ``file_names`` is read from the matching buffer (its first
        ``length`` bytes) instead of the disk."""
        file_names, buffers, lengths = list(file_names), list(buffers), list(lengths)
        if not len(file_names) == len(buffers) == len(lengths):
            raise InvalidArgument(
                "add_external_initializers_from_files_in_memory: file_names, buffers and "
                f"lengths differ in length ({len(file_names)}, {len(buffers)}, {len(lengths)})"
            )
        for name, buffer, length in zip(file_names, buffers, lengths):
            view = memoryview(buffer).cast("B")
            if not 0 <= int(length) <= view.nbytes:
                raise InvalidArgument(
                    f"add_external_initializers_from_files_in_memory: length {length} of "
                    f"{name!r} is outside its buffer of {view.nbytes} bytes"
                )
            self._external_files[str(name)] = view[: int(length)]

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any] | None = None) -> None:
        """Append a provider (with options) to the providers a session created with
        ``providers=None`` uses, in the order added."""
        self._added_providers.append((str(provider_name), dict(provider_options or {})))

    def register_custom_ops_library(self, library_path: str) -> None:
        """onnxruntime loads native custom-operator libraries (onnxruntime-extensions...)
        here. onyxrt cannot load native libraries; it records the path and warns, and a
        model that uses one of its operators then fails to load naming it. Custom
        operators run on onyxrt as kernels of a provider plugin
        (docs/writing-a-provider.md)."""
        import warnings

        self._custom_op_libraries.append(str(library_path))
        warnings.warn(
            f"register_custom_ops_library({str(library_path)!r}): onyxrt cannot load native "
            "custom-op libraries; models using its operators will not load. Provide the "
            "operators as an onyxrt provider plugin instead.",
            UserWarning,
            stacklevel=2,
        )

    def custom_op_libraries(self) -> list[str]:
        """Paths given to :meth:`register_custom_ops_library` (not loaded; see there)."""
        return list(self._custom_op_libraries)

    def set_load_cancellation_flag(self, cancel: bool) -> None:
        """Ask sessions being created with these options to stop: creation raises
        ``ModelLoadCanceled`` at its next step (onnxruntime's flag)."""
        self._load_cancelled = bool(cancel)

    def set_ep_context_data_read_func(self, read_func: Any) -> None:
        """Where a compiling provider would read EP-context data from. Recorded; onyxrt's
        compiling provider keeps its own cache, so nothing calls it yet."""
        self._ep_context_read_func = read_func

    def clear_ep_context_data_read_func(self) -> None:
        """Forget the function of :meth:`set_ep_context_data_read_func`."""
        self._ep_context_read_func = None

    # -- device selection ---------------------------------------------------------------
    def add_provider_for_devices(self, devices: list[Any], options: Mapping[str, Any] | None = None) -> None:
        """Use the providers of these ``EpDevice`` objects (from ``get_ep_devices()``)."""
        self._provider_devices.append((list(devices), dict(options or {})))

    def set_provider_selection_policy(self, policy: Any) -> None:
        """Choose providers automatically by a policy (see ``OrtExecutionProviderDevicePolicy``)."""
        self._selection_policy = policy

    def set_provider_selection_policy_delegate(self, delegate: Any) -> None:
        """Choose providers with your own function:
        ``delegate(ep_devices, model_metadata, runtime_metadata, max_selections)`` gets the
        usable ``OrtEpDevice`` list and returns the ones to use, best first."""
        if not callable(delegate):
            raise InvalidArgument(f"set_provider_selection_policy_delegate takes a callable, got {type(delegate).__name__}")
        self._selection_delegate = delegate

    def has_providers(self) -> bool:
        """Whether providers were configured on these options (devices, a policy, a
        delegate or :meth:`add_provider`)."""
        return bool(self._provider_devices or self._added_providers) or (
            self._selection_policy is not None or self._selection_delegate is not None)


_KNOWN_ATTRS = {
    "graph_optimization_level", "execution_mode", "execution_order", "intra_op_num_threads",
    "inter_op_num_threads", "enable_profiling", "profile_file_prefix", "optimized_model_filepath",
    "log_severity_level", "log_verbosity_level", "logid", "enable_cpu_mem_arena",
    "enable_mem_pattern", "enable_mem_reuse", "use_deterministic_compute",
    "use_per_session_threads",
}


class RunOptions:
    """Options for one ``run`` call. Set ``terminate = True`` from another thread to stop
    runs using these options (they raise :class:`~onyxrt.errors.RunTerminated`)."""

    def __init__(self) -> None:
        self.log_severity_level = -1  # the session's severity (onnxruntime's default)
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}
        self._adapters: list[Any] = []

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Set a run config entry."""
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """The value of a run config entry; raises
        :class:`~onyxrt.errors.ConfigEntryNotFound` (a RuntimeError, as onnxruntime
        raises) if it was never set."""
        try:
            return self._config[key]
        except KeyError:
            raise ConfigEntryNotFound(f"RunOptions does not have configuration with key: {key}") from None

    def add_active_adapter(self, adapter: Any) -> None:
        """Run with a LoRA adapter (:class:`onyxrt.LoraAdapter`): its parameters feed the
        model inputs of the same names in runs using these options."""
        if not callable(getattr(adapter, "parameters", None)):
            raise InvalidArgument(
                f"add_active_adapter takes a LoraAdapter (loaded with .Load(path)), got {type(adapter).__name__}"
            )
        self._adapters.append(adapter)

    def adapter_feeds(self) -> dict[str, Any]:
        """The parameters of the active adapters by name (later adapters win)."""
        feeds: dict[str, Any] = {}
        for adapter in self._adapters:
            feeds.update(adapter.parameters())
        return feeds


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    """Automatic provider selection policies (onnxruntime's names).

    Device order for the preferring policies: the preferred type first, then NPU, GPU,
    CPU. onyxrt maps MAX_PERFORMANCE to PREFER_GPU and MAX_EFFICIENCY/MIN_OVERALL_POWER to
    PREFER_NPU.
    """

    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


def policy_device_order(policy: OrtExecutionProviderDevicePolicy) -> tuple[str, ...]:
    """Device types in preference order for ``policy``."""
    P = OrtExecutionProviderDevicePolicy
    if policy in (P.PREFER_NPU, P.MAX_EFFICIENCY, P.MIN_OVERALL_POWER):
        return ("npu", "gpu", "cpu")
    if policy in (P.PREFER_GPU, P.MAX_PERFORMANCE):
        return ("gpu", "npu", "cpu")
    return ("cpu",)
