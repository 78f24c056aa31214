"""Every public name of onnxruntime's Python package and what onyxrt does with it.

The table in docs/migrating-from-onnxruntime.md is rendered from this module
(``python -m onyxrt.compat.api_table --write docs/migrating-from-onnxruntime.md``), and
tests/test_api_table.py holds it to the installed onnxruntime wheel: a public name of
``onnxruntime`` (module attributes, members of its classes) or of
``onnxruntime.capi._pybind_state`` that the table does not list fails the test, as does a
listed name onyxrt lacks.

Names are written as onnxruntime spells them: ``InferenceSession.run`` is a member of a
top-level class, ``capi.X`` a name only ``onnxruntime.capi._pybind_state`` has. A status
is one of:

* ``same``: onnxruntime's behaviour;
* ``better``: onnxruntime's behaviour where it is sound, more where it hurts users
  (the note says what);
* ``differs``: works, differently (the note says how and why);
* ``absent``: not provided (the note says why);
* ``not API``: a module onnxruntime's namespace leaks (``os``, ``contextlib``).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["STATUSES", "ENTRIES", "onyxrt_object", "render", "write"]

STATUSES = ("same", "better", "differs", "absent", "not API")

#: Names whose behaviour is onnxruntime's.
_SAME = """
AdapterFormat AdapterFormat.export_adapter AdapterFormat.get_adapter_version
AdapterFormat.get_format_version AdapterFormat.get_model_version AdapterFormat.get_parameters
AdapterFormat.read_adapter AdapterFormat.set_adapter_version AdapterFormat.set_model_version
AdapterFormat.set_parameters
ExecutionMode ExecutionMode.ORT_PARALLEL ExecutionMode.ORT_SEQUENTIAL
ExecutionOrder.DEFAULT ExecutionOrder.MEMORY_EFFICIENT ExecutionOrder.PRIORITY_BASED
GraphOptimizationLevel GraphOptimizationLevel.ORT_DISABLE_ALL GraphOptimizationLevel.ORT_ENABLE_ALL
GraphOptimizationLevel.ORT_ENABLE_BASIC GraphOptimizationLevel.ORT_ENABLE_EXTENDED
GraphOptimizationLevel.ORT_ENABLE_LAYOUT
IOBinding IOBinding.bind_cpu_input IOBinding.bind_ortvalue_input IOBinding.clear_binding_inputs
IOBinding.clear_binding_outputs IOBinding.copy_outputs_to_cpu IOBinding.get_outputs
IOBinding.get_outputs_as_ortvaluevector IOBinding.synchronize_inputs IOBinding.synchronize_outputs
InferenceSession.create_ortvalue_from_shape_and_type InferenceSession.end_profiling
InferenceSession.get_input_memory_infos InferenceSession.get_output_memory_infos
InferenceSession.get_input_epdevices InferenceSession.get_modelmeta
InferenceSession.get_overridable_initializers InferenceSession.get_profiling_start_time_ns
InferenceSession.get_providers InferenceSession.get_session_options InferenceSession.io_binding
InferenceSession.run_async InferenceSession.run_with_ort_values
InferenceSession.run_with_ortvaluevector InferenceSession.get_tuning_results
LoraAdapter LoraAdapter.Load
ModelCompiler.clear_ep_context_data_write_func ModelCompiler.set_ep_context_data_write_func
ModelMetadata ModelMetadata.custom_metadata_map ModelMetadata.description ModelMetadata.domain
ModelMetadata.graph_description ModelMetadata.graph_name ModelMetadata.producer_name
ModelMetadata.version
NodeArg NodeArg.name NodeArg.type
OrtAllocatorType OrtAllocatorType.INVALID OrtAllocatorType.ORT_ARENA_ALLOCATOR
OrtAllocatorType.ORT_DEVICE_ALLOCATOR
OrtArenaCfg OrtArenaCfg.arena_extend_strategy OrtArenaCfg.initial_chunk_size_bytes
OrtArenaCfg.initial_growth_chunk_size_bytes OrtArenaCfg.max_dead_bytes_per_chunk OrtArenaCfg.max_mem
OrtArenaCfg.max_power_of_two_extend_bytes
OrtCompileApiFlags OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS OrtCompileApiFlags.NONE
OrtDevice OrtDevice.device_id OrtDevice.device_mem_type OrtDevice.device_type
OrtDevice.device_vendor_id OrtDevice.make
OrtDeviceMemoryType OrtDeviceMemoryType.DEFAULT OrtDeviceMemoryType.HOST_ACCESSIBLE
OrtDeviceVendorId OrtDeviceVendorId.AMD OrtDeviceVendorId.ARM OrtDeviceVendorId.HUAWEI
OrtDeviceVendorId.INTEL OrtDeviceVendorId.MICROSOFT OrtDeviceVendorId.NONE OrtDeviceVendorId.NVIDIA
OrtDeviceVendorId.QUALCOMM
OrtEpAssignedNode OrtEpAssignedNode.domain OrtEpAssignedNode.name OrtEpAssignedNode.op_type
OrtEpAssignedSubgraph OrtEpAssignedSubgraph.ep_name OrtEpAssignedSubgraph.get_nodes
OrtEpContextData OrtEpContextData.read OrtEpContextData.size
OrtEpContextDataBuffer OrtEpContextDataBuffer.allocate OrtEpContextDataBuffer.is_allocated
OrtEpContextDataBuffer.max_size OrtEpContextDataBuffer.size OrtEpContextDataBuffer.write
OrtEpDevice.ep_metadata OrtEpDevice.ep_name OrtEpDevice.ep_options OrtEpDevice.ep_vendor
OrtEpDevice.memory_info
OrtExecutionProviderDevicePolicy OrtExecutionProviderDevicePolicy.DEFAULT
OrtExecutionProviderDevicePolicy.PREFER_CPU OrtExecutionProviderDevicePolicy.PREFER_GPU
OrtExecutionProviderDevicePolicy.PREFER_NPU
OrtExternalInitializerInfo OrtExternalInitializerInfo.byte_size OrtExternalInitializerInfo.file_offset
OrtExternalInitializerInfo.filepath
OrtHardwareDevice.device_id OrtHardwareDevice.metadata OrtHardwareDevice.vendor
OrtHardwareDevice.vendor_id
OrtHardwareDeviceType OrtHardwareDeviceType.CPU OrtHardwareDeviceType.GPU OrtHardwareDeviceType.NPU
OrtMemType OrtMemType.CPU OrtMemType.CPU_INPUT OrtMemType.CPU_OUTPUT OrtMemType.DEFAULT
OrtMemoryInfo OrtMemoryInfo.allocator_type OrtMemoryInfo.create_v2 OrtMemoryInfo.device_id
OrtMemoryInfo.device_mem_type OrtMemoryInfo.device_vendor_id OrtMemoryInfo.mem_type OrtMemoryInfo.name
OrtMemoryInfoDeviceType OrtMemoryInfoDeviceType.CPU OrtMemoryInfoDeviceType.FPGA
OrtMemoryInfoDeviceType.GPU OrtMemoryInfoDeviceType.NPU
OrtSparseFormat OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE OrtSparseFormat.ORT_SPARSE_COO
OrtSparseFormat.ORT_SPARSE_CSRC OrtSparseFormat.ORT_SPARSE_UNDEFINED
OrtValue OrtValue.as_sparse_tensor OrtValue.data_type OrtValue.device_name OrtValue.element_type
OrtValue.has_value OrtValue.is_sparse_tensor OrtValue.is_tensor OrtValue.is_tensor_sequence
OrtValue.numpy OrtValue.ort_value_from_sparse_tensor OrtValue.ortvalue_from_shape_and_type
OrtValue.shape OrtValue.tensor_size_in_bytes OrtValue.update_inplace
RunOptions RunOptions.add_active_adapter RunOptions.add_run_config_entry RunOptions.log_severity_level
RunOptions.log_verbosity_level RunOptions.logid RunOptions.only_execute_path_to_fetches
SessionIOBinding SessionIOBinding.bind_ortvalue_input SessionIOBinding.clear_binding_inputs
SessionIOBinding.clear_binding_outputs SessionIOBinding.copy_outputs_to_cpu SessionIOBinding.get_outputs
SessionIOBinding.synchronize_inputs SessionIOBinding.synchronize_outputs
SessionOptions SessionOptions.add_external_initializers
SessionOptions.add_external_initializers_from_files_in_memory
SessionOptions.add_free_dimension_override_by_denotation SessionOptions.add_free_dimension_override_by_name
SessionOptions.add_initializer SessionOptions.add_provider SessionOptions.add_provider_for_devices
SessionOptions.add_session_config_entry SessionOptions.enable_profiling SessionOptions.execution_mode
SessionOptions.graph_optimization_level SessionOptions.has_providers
SessionOptions.inter_op_num_threads SessionOptions.log_severity_level SessionOptions.logid
SessionOptions.optimized_model_filepath SessionOptions.profile_file_prefix
SessionOptions.set_load_cancellation_flag SessionOptions.set_provider_selection_policy
SessionOptions.set_provider_selection_policy_delegate SessionOptions.use_per_session_threads
SparseTensor SparseTensor.as_blocksparse_view SparseTensor.as_coo_view SparseTensor.as_csrc_view
SparseTensor.data_type SparseTensor.dense_shape SparseTensor.device_name SparseTensor.format
SparseTensor.sparse_coo_from_numpy SparseTensor.sparse_csr_from_numpy SparseTensor.values
copy_tensors create_and_register_allocator_v2 get_available_providers
has_collective_ops import_capi_exception onnxruntime_validation set_default_logger_severity
set_global_thread_pool_sizes set_seed
capi capi.ArenaExtendStrategy capi.ArenaExtendStrategy.kNextPowerOfTwo
capi.ArenaExtendStrategy.kSameAsRequested capi.kNextPowerOfTwo capi.kSameAsRequested
capi.DeviceReset capi.EPFail capi.EngineError capi.Fail capi.InvalidProtobuf capi.ModelLoadCanceled
capi.ModelLoaded capi.ModelRequiresCompilation capi.NoModel capi.NoSuchFile capi.NotFound
capi.NotImplemented capi.RuntimeException
capi.OrtCompiledModelCompatibility capi.OrtCompiledModelCompatibility.EP_NOT_APPLICABLE
capi.OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL
capi.OrtCompiledModelCompatibility.EP_SUPPORTED_PREFER_RECOMPILATION
capi.OrtCompiledModelCompatibility.EP_UNSUPPORTED
capi.OrtDeviceEpIncompatibilityReason capi.OrtDeviceEpIncompatibilityReason.DEVICE_INCOMPATIBLE
capi.OrtDeviceEpIncompatibilityReason.DRIVER_INCOMPATIBLE
capi.OrtDeviceEpIncompatibilityReason.MISSING_DEPENDENCY capi.OrtDeviceEpIncompatibilityReason.NONE
capi.OrtDeviceEpIncompatibilityReason.UNKNOWN
capi.OrtValueVector capi.OrtValueVector.bool_tensor_indices capi.OrtValueVector.dlpack_at
capi.OrtValueVector.element_type_at capi.OrtValueVector.push_back capi.OrtValueVector.push_back_batch
capi.OrtValueVector.reserve capi.OrtValueVector.shrink_to_fit capi.OrtValueVector.to_dlpacks
capi.SparseBlockSparseView capi.SparseBlockSparseView.indices capi.SparseCooView
capi.SparseCooView.indices capi.SparseCsrView capi.SparseCsrView.inner capi.SparseCsrView.outer
capi.get_compatibility_info_from_model capi.get_compatibility_info_from_model_bytes
capi.get_default_session_options capi.get_session_initializer capi.SessionObjectInitializer
capi.is_dlpack_uint8_tensor
"""

#: Names onyxrt treats differently, with (status, note).
_NOTES: dict[str, tuple[str, str]] = {
    # -- module functions and attributes ----------------------------------------------
    "get_all_providers": ("differs", "the providers installed here (onnxruntime lists every provider any of its builds knows); "
                          "`get_ep_devices()` / `onyxrt providers` say why one is not usable"),
    "get_ep_devices": ("better", "also lists providers that are installed but unusable, with `state` and `reason`"),
    "get_build_info": ("differs", "'onyxrt Build Info: version=..., providers: ...' (each installed provider "
                       "package with its version)"),
    "get_device": ("same", "'CPU' or 'GPU', with '-NPU' appended when an NPU provider is usable ('CPU-NPU')"),
    "get_version_string": ("differs", "onyxrt's version; under `onyxrt.compat` the onnxruntime API version onyxrt mirrors"),
    "version": ("differs", "onyxrt's version; under `onyxrt.compat` the onnxruntime API version onyxrt mirrors"),
    "package_name": ("differs", "`'onyxrt'`; `'onnxruntime'` under `onyxrt.compat`"),
    "cuda_version": ("differs", "the CUDA version the usable CUDA provider reports, read when asked; '' without one"),
    "disable_telemetry_events": ("same", "a no-op: onyxrt sends no telemetry"),
    "enable_telemetry_events": ("same", "a no-op: onyxrt sends no telemetry, ever"),
    "preload_dlls": ("same", "a no-op: the GPU providers load their libraries through CuPy; `onyxrt doctor` names a missing one"),
    "print_debug_info": ("differs", "prints onyxrt's and onnx's versions and every provider with its state"),
    "set_default_logger_verbosity": ("same", "accepted; severity 0 already shows every message (no separate VLOG channel)"),
    "register_execution_provider_library": ("differs", "loads an onyxrt plugin module or `.py` file (what an "
                                            "`onyxrt.providers` entry point names); a native onnxruntime EP "
                                            "library (`.so`/`.dll`) is refused with the reason"),
    "unregister_execution_provider_library": ("same", "removes the providers registered under that name"),
    "create_and_register_allocator": ("differs", "recorded (`onyxrt.memory_info.registered_allocators()`); the CPU "
                                      "provider allocates through numpy, so nothing changes on the CPU"),
    "contextlib": ("not API", "a module onnxruntime's `__init__` imports"),
    # Subpackages that become attributes of onnxruntime once something imports them (its
    # tools, not its runtime API: their output models run on onyxrt).
    "quantization": ("not API", "onnxruntime's quantization tools (a subpackage, once imported); "
                     "the models they write run on onyxrt"),
    "transformers": ("not API", "onnxruntime's transformer optimization tools (a subpackage, once "
                     "imported); the models they write run on onyxrt"),
    # -- InferenceSession ---------------------------------------------------------------
    "InferenceSession": ("better", "also takes an `onnx.ModelProto`; a requested provider that cannot be used is "
                         "a `ProviderFallbackWarning` saying why (an error in strict mode); onnxruntime's "
                         "keyword arguments (`disabled_optimizers` by its transformer names, "
                         "`read_config_from_model`); `placement`, `fallbacks`, `memory_stats()`, "
                         "`profile_summary()` added"),
    "InferenceSession.run": ("better", "same results and errors (typed, naming the input); string inputs also "
                             "take bytes, `np.void` and object arrays; an out-of-range int list is an "
                             "`InvalidInput`, not a bare `OverflowError`; outputs are the kernels' own arrays "
                             "(no copy), sparse outputs `SparseTensor`s"),
    "InferenceSession.get_inputs": ("better", "dimension names the model declares are kept (`unk__214`); "
                                    "sequence/map/optional types spelled as onnxruntime spells them"),
    "InferenceSession.get_outputs": ("better", "as `get_inputs`"),
    "InferenceSession.get_provider_options": ("differs", "effective options of every provider; options a provider "
                                              "accepts without effect are left out (the placement lists them)"),
    "InferenceSession.set_providers": ("better", "as onnxruntime (an unknown provider name raises, a known but "
                                       "missing one warns); on failure the session keeps its previous providers "
                                       "instead of being left unusable"),
    "InferenceSession.disable_fallback": ("same", "a no-op: onyxrt never retries a failed creation on CPU behind your back"),
    "InferenceSession.enable_fallback": ("same", "a no-op (see `disable_fallback`)"),
    "InferenceSession.get_provider_graph_assignment_info": ("better", "always available (onnxruntime needs "
                                                            "`session.record_ep_graph_assignment_info=1`); "
                                                            "`placement` says more"),
    "InferenceSession.run_with_iobinding": ("same", "device outputs stay on the device"),
    "InferenceSession.set_ep_dynamic_options": ("differs", "recorded and logged; no onyxrt provider takes dynamic options"),
    "InferenceSession.set_tuning_results": ("same", "accepted; onyxrt has no tunable kernels"),
    "InferenceSession.release_captured_graph": ("same", "frees the CUDA graphs captured with `enable_cuda_graph=1` (all input shapes' graphs); a no-op without them"),
    # -- options --------------------------------------------------------------------------
    "SessionOptions.get_session_config_entry": ("same", "raises `ConfigEntryNotFound`, a RuntimeError as onnxruntime raises"),
    "RunOptions.get_run_config_entry": ("same", "raises `ConfigEntryNotFound`, a RuntimeError"),
    "RunOptions.terminate": ("same", "runs using the options stop with `RunTerminated` (a `Fail`)"),
    "SessionOptions.register_custom_ops_library": ("differs", "native custom-op libraries cannot load: recorded with a "
                                                   "warning, and a model using their operators fails to load naming "
                                                   "the library; custom operators come as provider plugins"),
    "SessionOptions.enable_cpu_mem_arena": ("differs", "accepted; the CPU provider keeps no arena (numpy allocates)"),
    "SessionOptions.enable_mem_pattern": ("differs", "accepted; buffers are released after their last use whatever it says"),
    "SessionOptions.enable_mem_reuse": ("differs", "accepted; see `enable_mem_pattern`"),
    "SessionOptions.use_deterministic_compute": ("same", "accepted: onyxrt's CPU kernels are deterministic for a "
                                                 "given thread count"),
    "SessionOptions.execution_order": ("differs", "accepted; nodes run in the model's topological order"),
    "ExecutionOrder": ("differs", "accepted (see `SessionOptions.execution_order`)"),
    "SessionOptions.intra_op_num_threads": ("same", "sizes the BLAS/compiled-kernel pool during runs"),
    "SessionOptions.log_verbosity_level": ("same", "accepted (see `set_default_logger_verbosity`)"),
    "SessionOptions.set_ep_context_data_read_func": ("differs", "recorded; no EPContext models are read (the NPU keeps a compile cache)"),
    "SessionOptions.clear_ep_context_data_read_func": ("same", "forgets the function"),
    "OrtExecutionProviderDevicePolicy.MAX_EFFICIENCY": ("differs", "taken as PREFER_NPU"),
    "OrtExecutionProviderDevicePolicy.MAX_PERFORMANCE": ("differs", "taken as PREFER_GPU"),
    "OrtExecutionProviderDevicePolicy.MIN_OVERALL_POWER": ("differs", "taken as PREFER_NPU"),
    # -- values and bindings ----------------------------------------------------------
    "NodeArg.shape": ("better", "declared dimension names kept, -1 read as unknown (None), as onnxruntime"),
    "OrtValue.ortvalue_from_numpy": ("same", "zero-copy on the CPU; `vendor_id` implied by the device name"),
    "OrtValue.ortvalue_from_numpy_with_onnx_type": ("better", "`numpy()` of the result works for bfloat16/float8 "
                                                    "(ml_dtypes), where onnxruntime cannot convert"),
    "OrtValue.from_dlpack": ("same", "objects with `__dlpack__` and bare capsules; device tensors through the matching provider"),
    "OrtValue.data_ptr": ("same", "host address, or the device address from `__cuda_array_interface__`"),
    "IOBinding.bind_input": ("differs", "raw pointers for host memory ('cpu') only; bind device data as an OrtValue"),
    "IOBinding.bind_output": ("differs", "a raw `buffer_ptr` for host memory only; without one, any device"),
    "IOBinding.bind_ortvalue_output": ("same", "the output is written into the bound value"),
    "SessionIOBinding.bind_input": ("differs", "as `IOBinding.bind_input`"),
    "SessionIOBinding.bind_output": ("differs", "as `IOBinding.bind_output`"),
    "SessionIOBinding.bind_ortvalue_output": ("same", "as `IOBinding.bind_ortvalue_output`"),
    "SparseTensor.to_cuda": ("same", "copies to a usable CUDA provider's device; a typed error without one"),
    "OrtEpDevice": ("better", "onyxrt's `EpDevice`: also lists unusable providers with `state` and `reason`"),
    "OrtEpDevice.device": ("same", "an `OrtHardwareDevice` (onyxrt's `Device`)"),
    "OrtEpDevice.create_sync_stream": ("differs", "an `OrtSyncStream` whose handle is 0: providers order their own work"),
    "OrtHardwareDevice": ("same", "onyxrt's `Device`"),
    "OrtHardwareDevice.type": ("better", "equals both `'gpu'` and `OrtHardwareDeviceType.GPU`"),
    "OrtSyncStream": ("differs", "see `OrtEpDevice.create_sync_stream`"),
    "OrtSyncStream.get_handle": ("differs", "0 (no native stream is exposed)"),
    # -- compile API ------------------------------------------------------------------
    "ModelCompiler": ("differs", "writes the model optimized for the session's providers; no EPContext nodes, "
                      "because onyxrt's compiling provider keeps a compile cache instead"),
    "ModelCompiler.compile_to_file": ("differs", "see `ModelCompiler`"),
    "ModelCompiler.compile_to_bytes": ("differs", "see `ModelCompiler`"),
    "ModelCompiler.compile_to_stream": ("differs", "see `ModelCompiler` (one write call)"),
    "OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED": ("differs", "always raises `CompileError` (a `Fail`, as onnxruntime "
                                                      "raises when nothing compiles): no node becomes an EPContext node"),
    "ModelCompiler.set_ep_context_binary_information": ("same", "the same checks; recorded (no binaries are written)"),
    "set_default_logger_callback": ("same", "`callback(severity, category, logid, code_location, message)`; "
                                    "category is 'onyxrt'"),
    # -- capi-only ----------------------------------------------------------------------
    "capi.InvalidArgument": ("same", "onyxrt's `InvalidArgument` (also a ValueError); `InvalidInput` and "
                             "`InvalidProviderOption` derive from it"),
    "capi.InvalidGraph": ("same", "onyxrt's `InvalidGraph`; unknown operators are `UnknownOperator`, an InvalidGraph too"),
    "capi.get_all_operator_schema": ("differs", "onnx's schemas (onyxrt's operators are onnx's)"),
    "capi.get_all_opkernel_def": ("same", "kernels of every usable kernel-registry provider"),
    "capi.get_registered_ep_kernel_defs": ("same", "kernels of one provider"),
    "capi.get_hardware_devices": ("same", "devices of the usable providers, CPU first"),
    "capi.get_hardware_device_ep_incompatibility_details": ("same", "with the provider's probe reason"),
    "capi.get_model_compatibility_for_ep_devices": ("differs", "always EP_NOT_APPLICABLE: no compiled model is required"),
    "capi.opkernel": ("differs", "a namespace with `KernelDef`, the type `get_all_opkernel_def` returns"),
    "capi.schemadef": ("differs", "a namespace with onnx's `OpSchema`"),
    "capi.os": ("not API", "a module the pybind state imports"),
    "capi.platform": ("not API", "a module the pybind state imports"),
    "capi.warnings": ("not API", "a module the pybind state imports"),
}

_MODEL_PACKAGE = """
ModelPackage ModelPackage.add_shared_asset ModelPackage.close ModelPackage.commit
ModelPackage.compute_directory_hash ModelPackage.get_component_json ModelPackage.get_info
ModelPackage.get_variant_json ModelPackage.open ModelPackage.prune ModelPackage.remove_component
ModelPackage.remove_shared_asset ModelPackage.remove_variant ModelPackage.remove_variant_executor_info
ModelPackage.resolve_asset_uri ModelPackage.resolve_string_ref ModelPackage.set_additional_metadata_json
ModelPackage.set_component_external ModelPackage.set_component_inline ModelPackage.set_layout
ModelPackage.set_metadata ModelPackage.set_variant ModelPackage.set_variant_executor_info_external
ModelPackage.set_variant_executor_info_inline
ModelPackageComponentContext ModelPackageComponentContext.create_session
ModelPackageComponentContext.get_selected_variant_folder_path
ModelPackageComponentContext.get_selected_variant_name
ModelPackageContext ModelPackageContext.get_component_count ModelPackageContext.get_component_names
ModelPackageContext.get_schema_version ModelPackageContext.get_variant_count
ModelPackageContext.get_variant_ep_name ModelPackageContext.get_variant_names
ModelPackageContext.resolve_string_ref ModelPackageContext.select_component
ModelPackageOptions ModelPackageWriteMode ModelPackageWriteMode.DENSE ModelPackageWriteMode.PRESERVE
"""
for _name in _MODEL_PACKAGE.split():
    _NOTES[_name] = ("same", "onnxruntime 1.32's model packages, file-compatible (`onyxrt.model_package`)")

_TOOL_HELPER = ("absent", "a weight-packing helper of onnxruntime's quantization tools (`onnxruntime.quantization`, "
                "out of scope: onyxrt runs the models they produce)")
for _name in ("pack_fp4_weights_for_cuda_moe_gemm", "quantize_matmul_2bits", "quantize_matmul_4bits",
              "quantize_matmul_8bits", "quantize_matmul_bnb4", "quantize_qdq_matmul_2bits",
              "quantize_qdq_matmul_4bits"):
    _NOTES[f"capi.{_name}"] = _TOOL_HELPER

#: Every listed name → (status, note).
ENTRIES: dict[str, tuple[str, str]] = {name: ("same", "") for name in _SAME.split()}
ENTRIES.update(_NOTES)


def onyxrt_object(name: str) -> object:
    """The onyxrt object a table name stands for (``capi.X`` in ``onyxrt.capi._pybind_state``,
    members through their class); raises AttributeError when onyxrt lacks it."""
    import onyxrt
    from onyxrt.capi import _pybind_state

    parts = name.split(".")
    obj: object = onyxrt
    if parts[0] == "capi" and len(parts) > 1:
        obj, parts = _pybind_state, parts[1:]
    for part in parts:
        obj = _member(obj, part)
    return obj


def _member(obj: object, part: str) -> object:
    try:
        return getattr(obj, part)
    except AttributeError:
        # Instance attributes and dataclass fields are not class attributes.
        fields = getattr(obj, "__dataclass_fields__", {})
        if part in fields:
            return fields[part]
        if isinstance(obj, type):
            try:
                instance_attrs = vars(_sample(obj))
            except TypeError:
                instance_attrs = {}
            if part in instance_attrs:
                return instance_attrs[part]
        raise


def _sample(cls: type) -> object:
    """An instance of an onyxrt options class, to read its instance attributes."""
    return cls()


_START = "<!-- api-table:start (generated by python -m onyxrt.compat.api_table --write) -->"
_END = "<!-- api-table:end -->"


def render() -> str:
    """The markdown table, names in onnxruntime's order (module, then members)."""
    lines = [_START, "", "| name | onyxrt | note |", "|---|---|---|"]
    for name in sorted(ENTRIES, key=lambda n: (n.startswith("capi"), n.lower())):
        status, note = ENTRIES[name]
        lines.append(f"| `{name}` | {status} | {note} |")
    counts = {s: sum(1 for v in ENTRIES.values() if v[0] == s) for s in STATUSES}
    lines += ["", "Totals: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", "", _END]
    return "\n".join(lines)


def write(doc: Path) -> bool:
    """Replace the generated section of ``doc`` with :func:`render`; whether it changed."""
    text = doc.read_text(encoding="utf-8")
    start, end = text.index(_START), text.index(_END) + len(_END)
    new = text[:start] + render() + text[end:]
    doc.write_text(new, encoding="utf-8")
    return new != text


def section(doc: Path) -> str:
    """The generated section currently in ``doc``."""
    text = doc.read_text(encoding="utf-8")
    return text[text.index(_START): text.index(_END) + len(_END)]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        changed = write(Path(sys.argv[2]))
        print(("updated " if changed else "unchanged ") + sys.argv[2])
    else:
        print(render())
