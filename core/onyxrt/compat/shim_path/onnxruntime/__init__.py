# onyxrt's stand-in for onnxruntime (onyxrt.compat.shim_pythonpath()): a folder first on
# PYTHONPATH whose `onnxruntime` package installs the shim and replaces itself with the
# shimmed module, so any Python process started with it runs onnxruntime code on onyxrt.
import sys

import onyxrt.compat

del sys.modules[__name__]
onyxrt.compat.install()
import onnxruntime  # noqa: E402  (now the shimmed module, through the finder)

sys.modules[__name__] = onnxruntime
