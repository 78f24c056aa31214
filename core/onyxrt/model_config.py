"""Session options a model carries itself: onnxruntime's ``ORT_LOAD_CONFIG_FROM_MODEL``.

With the environment variable ``ORT_LOAD_CONFIG_FROM_MODEL=1``, a model's metadata entry
``ort_config`` — JSON such as ``{"session_options": {"intra_op_num_threads": 2,
"execution_mode": 1}}`` — overrides the session options it is created with. The keys
onnxruntime reads are read here, with its value ranges: ``intra_op_num_threads``,
``inter_op_num_threads`` (ints >= 0), ``execution_mode`` (0 sequential, 1 parallel),
``graph_optimization_level`` (``GraphOptimizationLevel`` values: 0, 1, 2, 3 layout, 99
all) and ``enable_profiling`` (0/1). Other keys are ignored, as onnxruntime ignores them (onyxrt
logs them). Bad JSON or a bad value is an :class:`~onyxrt.errors.InvalidSetting` naming
the key (a RuntimeError too, as onnxruntime raises).
"""

from __future__ import annotations

import json
import os
from typing import Any

import onnx

from .errors import InvalidSetting

__all__ = ["LOAD_CONFIG_ENV_VAR", "CONFIG_KEY", "wanted", "session_options_from_model"]

LOAD_CONFIG_ENV_VAR = "ORT_LOAD_CONFIG_FROM_MODEL"
CONFIG_KEY = "ort_config"

# graph_optimization_level in ort_config: GraphOptimizationLevel's values (onnxruntime
# 1.32 reads them so; 4..98 are refused).
_LEVELS = {0: 0, 1: 1, 2: 2, 3: 3, 99: 99}


def wanted() -> bool:
    """Whether ``ORT_LOAD_CONFIG_FROM_MODEL`` asks for the model's config ("1"); "" and
    "0" do not, anything else is an error (as in onnxruntime)."""
    flag = os.environ.get(LOAD_CONFIG_ENV_VAR, "")
    if flag not in ("", "0", "1"):
        raise InvalidSetting(
            f"the only supported values for the environment variable {LOAD_CONFIG_ENV_VAR} "
            f"are '0' and '1', got {flag!r}"
        )
    return flag == "1"


def session_options_from_model(model: onnx.ModelProto, origin: str) -> tuple[dict[str, Any], list[str]]:
    """The session-option values of the model's ``ort_config`` (attribute name → value)
    and the keys it ignored."""
    text = next((p.value for p in model.metadata_props if p.key == CONFIG_KEY), None)
    if text is None:
        return {}, []
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSetting(f"{origin}: the metadata entry {CONFIG_KEY!r} is not valid JSON: {exc}") from None
    section = config.get("session_options") if isinstance(config, dict) else None
    if section is None:
        return {}, []
    if not isinstance(section, dict):
        raise InvalidSetting(f"{origin}: {CONFIG_KEY}.session_options must be a JSON object")
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for raw_key, value in section.items():
        key = raw_key.strip()  # onnxruntime's own parser once expected "intra_op_num_threads "
        if key not in ("intra_op_num_threads", "inter_op_num_threads", "execution_mode",
                       "graph_optimization_level", "enable_profiling"):
            ignored.append(raw_key)
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidSetting(f"{origin}: {key} option in the model's {CONFIG_KEY} must be an integer, got {value!r}")
        if key.endswith("_num_threads") and value < 0:
            raise InvalidSetting(f"{origin}: unsupported value for {key} in the model's {CONFIG_KEY}: {value}")
        if key in ("execution_mode", "enable_profiling") and value not in (0, 1):
            raise InvalidSetting(f"{origin}: unsupported value for {key} in the model's {CONFIG_KEY}: {value}")
        if key == "graph_optimization_level":
            if value not in _LEVELS:
                raise InvalidSetting(
                    f"{origin}: unsupported graph_optimization_level in the model's {CONFIG_KEY}: "
                    f"{value} (0, 1, 2, 3 or 99)"
                )
            value = _LEVELS[value]
        values[key] = bool(value) if key == "enable_profiling" else value
    return values, ignored
