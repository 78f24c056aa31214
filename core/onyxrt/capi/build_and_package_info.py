"""onnxruntime's build facts: the package name (onyxrt's)."""

package_name = "onyxrt"
