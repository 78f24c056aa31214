"""onnxruntime preloads native libraries here; onyxrt has none to preload."""
