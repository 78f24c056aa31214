"""Models of issue 23's benchmark families (c) ``recurrent``, (d) ``tiny`` and (e)
``sklearn``, and the quantizers that make family (b) ``quantized`` from the real torch
exports.

Recurrent models are written with ``onnx.helper`` the way ``torch.onnx.export`` (opset 17)
writes the corresponding modules: an ``nn.LSTM``/``nn.GRU`` with ``batch_first=True`` becomes
``Transpose`` to time-major, one ONNX ``LSTM``/``GRU`` node per layer (both directions in
one node), ``Transpose(0, 2, 1, 3)`` + ``Reshape(0, 0, -1)`` between layers, zero initial
states made from the input's shape (``Shape``/``Gather``/``Unsqueeze``/``Concat``/
``ConstantOfShape``) and the final states ``Concat``-ed into ``h_n``. Weights are random,
drawn from ``numpy.random.default_rng(0)``, scaled by 1/sqrt(fan-in) so activations stay
finite. Every builder takes its sizes as parameters (the defaults are the benchmark's
realistic sizes; the tests use tiny ones).

The scikit-learn models are converted with skl2onnx's defaults, as users get them: the
classifiers keep skl2onnx's default ``ZipMap`` (probabilities as a list of {class: p} dicts).

Quantizers (model production with onnxruntime's own tools; they need onnxruntime, and
MatMulNBits needs onnx-ir and sympy): :func:`quantize_dynamic_int8`,
:func:`quantize_static_qdq` and :func:`quantize_matmul_4bits`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9
SEED = 0


class _Builder:
    """Nodes and initializers of one graph, with unique generated names."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, value: np.ndarray, prefix: str = "onnx::Constant") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int, prefix: str) -> str:
        scale = 1.0 / math.sqrt(max(fan_in, 1))
        value = self.rng.uniform(-scale, scale, size=shape).astype(np.float32)
        return self.const(value, prefix)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> list[str]:
        node_name = self.name(f"/{op_type}")
        outputs = [f"{node_name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=node_name, **attrs))
        return outputs

    def op1(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, inputs, 1, **attrs)[0]

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="pytorch", producer_version="2.14.0")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


# --------------------------------------------------------------------------- (c) recurrent


def _zero_state(b: _Builder, x: str, batch_axis: int, directions: int, hidden: int) -> str:
    """[directions, batch, hidden] zeros with the batch taken from ``x``'s shape."""
    shape = b.op1("Shape", [x])
    batch = b.op1("Gather", [shape, b.const(np.array(batch_axis, np.int64))], axis=0)
    batch1 = b.op1("Unsqueeze", [batch, b.const(np.array([0], np.int64))])
    dims = b.op1("Concat", [b.const(np.array([directions], np.int64)), batch1,
                            b.const(np.array([hidden], np.int64))], axis=0)
    return b.op1("ConstantOfShape", [dims], value=helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0]))


def _recurrent_layers(b: _Builder, x_tbf: str, cell: str, layers: int, features: int,
                      hidden: int) -> tuple[str, list[str]]:
    """Stacked bidirectional ``cell`` layers over time-major ``x_tbf`` [T, B, F]: returns
    [T, B, 2H] and the final hidden state of each layer ([2, B, H])."""
    gates = 4 if cell == "LSTM" else 3
    h_finals = []
    inp, width = x_tbf, features
    for layer in range(layers):
        w = b.weight((2, gates * hidden, width), hidden, f"onnx::{cell}_W_l{layer}")
        r = b.weight((2, gates * hidden, hidden), hidden, f"onnx::{cell}_R_l{layer}")
        bias = b.weight((2, 2 * gates * hidden), hidden, f"onnx::{cell}_B_l{layer}")
        h0 = _zero_state(b, inp, 1, 2, hidden)
        if cell == "LSTM":
            c0 = _zero_state(b, inp, 1, 2, hidden)
            y, y_h, _ = b.op("LSTM", [inp, w, r, bias, "", h0, c0], 3, direction="bidirectional",
                             hidden_size=hidden)
        else:
            y, y_h = b.op("GRU", [inp, w, r, bias, "", h0], 2, direction="bidirectional",
                          hidden_size=hidden, linear_before_reset=1)
        h_finals.append(y_h)
        # Y: [T, 2, B, H] -> [T, B, 2, H] -> [T, B, 2H]
        y = b.op1("Transpose", [y], perm=[0, 2, 1, 3])
        inp = b.op1("Reshape", [y, b.const(np.array([0, 0, -1], np.int64))])
        width = 2 * hidden
    return inp, h_finals


def _rnn_encoder(cell: str, steps: int, features: int, hidden: int, layers: int) -> onnx.ModelProto:
    b = _Builder()
    x = "input"
    x_tbf = b.op1("Transpose", [x], perm=[1, 0, 2])  # batch_first=True
    y, h_finals = _recurrent_layers(b, x_tbf, cell, layers, features, hidden)
    out = b.op1("Transpose", [y], perm=[1, 0, 2])
    b.nodes.append(helper.make_node("Identity", [out], ["output"], name="/Identity_output"))
    b.nodes.append(helper.make_node("Concat", h_finals, ["h_n"], name="/Concat_h_n", axis=0))
    return b.model(
        f"{cell.lower()}_encoder",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", steps, features])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", steps, 2 * hidden]),
         helper.make_tensor_value_info("h_n", TensorProto.FLOAT, [2 * layers, "batch", hidden])],
    )


def lstm_encoder(steps: int = 200, features: int = 80, hidden: int = 256, layers: int = 2) -> onnx.ModelProto:
    """``nn.LSTM(features, hidden, layers, bidirectional=True, batch_first=True)`` on
    [batch, steps, features]; outputs the sequence [batch, steps, 2*hidden] and ``h_n``."""
    return _rnn_encoder("LSTM", steps, features, hidden, layers)


def gru_encoder(steps: int = 200, features: int = 80, hidden: int = 256, layers: int = 2) -> onnx.ModelProto:
    """The same with ``nn.GRU`` (``linear_before_reset=1``, as torch exports it)."""
    return _rnn_encoder("GRU", steps, features, hidden, layers)


def _mel_matrix(n_freqs: int, n_mels: int, sample_rate: int) -> np.ndarray:
    """[n_freqs, n_mels] triangular HTK mel filters (as torchaudio's melscale_fbanks)."""
    def mel(f: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    freqs = np.linspace(0, sample_rate / 2, n_freqs)
    m_pts = np.linspace(mel(np.array(0.0)), mel(np.array(sample_rate / 2)), n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    slopes = f_pts[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / np.diff(f_pts)[:-1]
    up = slopes[:, 2:] / np.diff(f_pts)[1:]
    return np.maximum(0.0, np.minimum(down, up)).astype(np.float32)


def logmel_frontend(samples: int = 16000, n_fft: int = 512, win_length: int = 400, hop: int = 160,
                    n_mels: int = 80, sample_rate: int = 16000) -> onnx.ModelProto:
    """A conv-STFT log-mel front end on a waveform [batch, 1, samples]: reflect ``Pad``
    (center=True), a 1-D ``Conv`` with 2x(n_fft/2+1) real/imaginary filters (Hann window of
    ``win_length`` centered in ``n_fft`` taps), stride ``hop``; ``Slice`` into real and
    imaginary parts, ``Pow``/``Add`` for the power, ``MatMul`` with the mel matrix,
    ``Clip``/``Log``. Output [batch, n_mels, frames]."""
    b = _Builder()
    n_freqs = n_fft // 2 + 1
    window = np.zeros(n_fft)
    start = (n_fft - win_length) // 2
    window[start:start + win_length] = np.hanning(win_length + 1)[:-1]
    t = np.arange(n_fft)
    k = np.arange(n_freqs)[:, None]
    real = np.cos(2 * np.pi * k * t / n_fft) * window
    imag = -np.sin(2 * np.pi * k * t / n_fft) * window
    filters = np.concatenate([real, imag])[:, None, :].astype(np.float32)  # [2F, 1, n_fft]
    pads = b.const(np.array([0, 0, n_fft // 2, 0, 0, n_fft // 2], np.int64))
    x = b.op1("Pad", ["waveform", pads], mode="reflect")
    spec = b.op1("Conv", [x, b.const(filters, "stft.filters")], kernel_shape=[n_fft], strides=[hop],
                 pads=[0, 0], dilations=[1], group=1)
    axis = b.const(np.array([1], np.int64))
    re = b.op1("Slice", [spec, b.const(np.array([0], np.int64)), b.const(np.array([n_freqs], np.int64)), axis])
    im = b.op1("Slice", [spec, b.const(np.array([n_freqs], np.int64)),
                         b.const(np.array([2 * n_freqs], np.int64)), axis])
    two = b.const(np.array(2.0, np.float32))
    power = b.op1("Add", [b.op1("Pow", [re, two]), b.op1("Pow", [im, two])])  # [B, F, T]
    frames = b.op1("Transpose", [power], perm=[0, 2, 1])
    mel = b.op1("MatMul", [frames, b.const(_mel_matrix(n_freqs, n_mels, sample_rate), "mel.fb")])
    clipped = b.op1("Clip", [mel, b.const(np.array(1e-10, np.float32)), ""])
    logged = b.op1("Log", [clipped])
    b.nodes.append(helper.make_node("Transpose", [logged], ["log_mel"], name="/Transpose_out", perm=[0, 2, 1]))
    frames_out = (samples + 2 * (n_fft // 2) - n_fft) // hop + 1
    return b.model(
        "logmel_frontend",
        [helper.make_tensor_value_info("waveform", TensorProto.FLOAT, ["batch", 1, samples])],
        [helper.make_tensor_value_info("log_mel", TensorProto.FLOAT, ["batch", n_mels, frames_out])],
    )


def crnn_ocr(height: int = 32, width: int = 320, channels: tuple[int, ...] = (32, 64, 128, 128),
             hidden: int = 128, classes: int = 100) -> onnx.ModelProto:
    """A small CRNN text recognizer on [batch, 1, height, width]: 3x3 ``Conv`` + ``Relu`` +
    ``MaxPool`` blocks (2x2 pools, then (2,1) pools that keep the width) until the height
    is 1, ``Squeeze``, ``Transpose`` to [width', batch, C], a bidirectional ``LSTM`` and a
    ``MatMul``/``Add`` to ``classes``, ``LogSoftmax``. Output [width', batch, classes]."""
    b = _Builder()
    x, c_in, h, w = "image", 1, height, width
    for i, c_out in enumerate(channels):
        wt = b.weight((c_out, c_in, 3, 3), 9 * c_in, f"cnn.{i}.weight")
        bias = b.weight((c_out,), 9 * c_in, f"cnn.{i}.bias")
        x = b.op1("Conv", [x, wt, bias], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
        x = b.op1("Relu", [x])
        pool = [2, 2] if i < 2 else [2, 1]
        if i == len(channels) - 1:
            pool = [h, 1]  # the last pool brings the height to 1
        x = b.op1("MaxPool", [x], kernel_shape=pool, strides=pool)
        h, w, c_in = h // pool[0], w // pool[1], c_out
    if h != 1:
        raise ValueError(f"height {height} does not pool down to 1 with {len(channels)} blocks")
    x = b.op1("Squeeze", [x, b.const(np.array([2], np.int64))])  # [B, C, W]
    x = b.op1("Transpose", [x], perm=[2, 0, 1])  # [W, B, C]
    y, _ = _recurrent_layers(b, x, "LSTM", 1, c_in, hidden)
    logits = b.op1("Add", [b.op1("MatMul", [y, b.weight((2 * hidden, classes), 2 * hidden, "fc.weight")]),
                           b.weight((classes,), 2 * hidden, "fc.bias")])
    b.nodes.append(helper.make_node("LogSoftmax", [logits], ["log_probs"], name="/LogSoftmax", axis=2))
    return b.model(
        "crnn_ocr",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, height, width])],
        [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [w, "batch", classes])],
    )


# --------------------------------------------------------------------------- (d) tiny


def mlp(layers: int = 8, width: int = 256) -> onnx.ModelProto:
    """``layers`` ``nn.Linear(width, width)`` (``Gemm`` with transB=1) + ``Relu`` on [batch, width]."""
    b = _Builder()
    x = "input"
    for i in range(layers):
        w = b.weight((width, width), width, f"layers.{i}.weight")
        bias = b.weight((width,), width, f"layers.{i}.bias")
        x = b.op1("Gemm", [x, w, bias], alpha=1.0, beta=1.0, transB=1)
        if i < layers - 1:
            x = b.op1("Relu", [x])
    b.nodes.append(helper.make_node("Identity", [x], ["output"], name="/Identity_output"))
    return b.model(
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", width])],
    )


def elementwise_mix(width: int = 64) -> onnx.ModelProto:
    """16 nodes of elementwise and mixed ops on [batch, width] (the per-node overhead case)."""
    b = _Builder()
    x = "input"
    scale = b.weight((width,), 1, "scale")
    shift = b.weight((width,), 1, "shift")
    a = b.op1("Mul", [x, scale])                                   # 1
    a = b.op1("Add", [a, shift])                                   # 2
    s = b.op1("Sigmoid", [a])                                      # 3
    t = b.op1("Tanh", [x])                                         # 4
    m = b.op1("Mul", [s, t])                                       # 5
    r = b.op1("Relu", [a])                                         # 6
    d = b.op1("Sub", [m, r])                                       # 7
    ab = b.op1("Abs", [d])                                         # 8
    sq = b.op1("Sqrt", [b.op1("Add", [ab, b.const(np.array(1.0, np.float32))])])  # 9, 10
    q = b.op1("Div", [d, sq])                                      # 11
    mx = b.op1("Max", [q, t])                                      # 12
    e = b.op1("Exp", [b.op1("Neg", [b.op1("Abs", [mx])])])         # 13, 14, 15
    b.nodes.append(helper.make_node("Softmax", [e], ["output"], name="/Softmax", axis=-1))  # 16
    return b.model(
        "elementwise_mix",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", width])],
    )


def _sklearn_data(samples: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((samples, features)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1).astype(np.int64)
    return x, y


def sklearn_logistic(samples: int = 500, features: int = 20) -> onnx.ModelProto:
    """``make_pipeline(StandardScaler(), LogisticRegression())`` on a random 3-class set,
    converted by skl2onnx's ``to_onnx`` with its defaults (ZipMap kept)."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _sklearn_data(samples, features)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    return to_onnx(pipe, x[:1])


def sklearn_forest(samples: int = 500, features: int = 20, trees: int = 20, depth: int | None = None) -> onnx.ModelProto:
    """``RandomForestClassifier(n_estimators=trees)`` on the same data, skl2onnx defaults."""
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    x, y = _sklearn_data(samples, features)
    forest = RandomForestClassifier(n_estimators=trees, max_depth=depth, random_state=SEED).fit(x, y)
    return to_onnx(forest, x[:1])


def _skl2onnx(estimator: Any, x: np.ndarray, y: np.ndarray | None, **options: Any) -> onnx.ModelProto:
    """``estimator`` fitted on (x, y) and converted by skl2onnx's ``to_onnx`` with its
    defaults (ZipMap kept), at the opsets the test suite's scikit-learn cases use."""
    from skl2onnx import to_onnx

    fitted = estimator.fit(x) if y is None else estimator.fit(x, y)
    return to_onnx(fitted, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}, **options)


def _sklearn(make: Callable[[], Any], regression: bool = False, unsupervised: bool = False) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        x, y = _sklearn_data(500, 20)
        target = None if unsupervised else (x @ np.linspace(-1, 1, 20)).astype(np.float32) if regression else y
        return _skl2onnx(make(), x, target)

    build.__doc__ = f"``{make.__name__}`` on the 20-feature set, skl2onnx defaults."
    return build


def _knn() -> Any:
    from sklearn.neighbors import KNeighborsClassifier

    return KNeighborsClassifier(5)


def _svc() -> Any:
    from sklearn.svm import SVC

    return SVC(probability=True, random_state=SEED)


def _svr() -> Any:
    from sklearn.svm import SVR

    return SVR()


def _polynomial_ridge() -> Any:
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures

    return make_pipeline(PolynomialFeatures(2), Ridge())


def _isolation_forest() -> Any:
    from sklearn.ensemble import IsolationForest

    return IsolationForest(n_estimators=50, random_state=SEED)


def _gaussian_nb() -> Any:
    from sklearn.naive_bayes import GaussianNB

    return GaussianNB()


def _mlp_classifier() -> Any:
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier((64, 32), max_iter=300, random_state=SEED)


def _gradient_boosting() -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(n_estimators=100, random_state=SEED)


def _pca_kmeans() -> Any:
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline

    return make_pipeline(PCA(8), KMeans(5, n_init=3, random_state=SEED))


#: Family (e): scikit-learn estimators as skl2onnx converts them — the operators a
#: converter writes (Scan for distances, SVMs, hundreds of tiny nodes), not a builder's.
SKLEARN: dict[str, Callable[[], onnx.ModelProto]] = {
    "knn_classifier": _sklearn(_knn),
    "svc_probabilities": _sklearn(_svc),
    "svr": _sklearn(_svr, regression=True),
    "polynomial_ridge": _sklearn(_polynomial_ridge, regression=True),
    "isolation_forest": _sklearn(_isolation_forest, unsupervised=True),
    "gaussian_nb": _sklearn(_gaussian_nb),
    "mlp_classifier": _sklearn(_mlp_classifier),
    "gradient_boosting": _sklearn(_gradient_boosting, regression=True),
    "pca_kmeans": _sklearn(_pca_kmeans, unsupervised=True),
}

#: Family (c) and (d) builders at the benchmark's sizes, by model name.
RECURRENT: dict[str, Callable[[], onnx.ModelProto]] = {
    "lstm_encoder": lstm_encoder,
    "gru_encoder": gru_encoder,
    "logmel_frontend": logmel_frontend,
    "crnn_ocr": crnn_ocr,
}
TINY: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": mlp,
    "elementwise_mix": elementwise_mix,
    "sklearn_logistic": sklearn_logistic,
    "sklearn_forest": sklearn_forest,
}


# --------------------------------------------------------------------------- (b) quantizers


def _input_shapes(path: Path, batch: int = 1, seq: int = 128) -> list[tuple[str, int, list[int]]]:
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    shapes = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (seq if "seq" in d.dim_param else batch)
                for d in tt.shape.dim]
        shapes.append((inp.name, tt.elem_type, dims))
    return shapes


def quantize_dynamic_int8(src: Path, dst: Path) -> None:
    """``quantize_dynamic`` with its default weight type (QInt8)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)


def quantize_dynamic_uint8(src: Path, dst: Path) -> None:
    """``quantize_dynamic`` with QUInt8 weights (the type onnxruntime's ConvInteger kernel
    is built for; with its default QInt8 a CNN's ConvIntegers take a much slower path)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8)


def quantize_static_qdq(src: Path, dst: Path, batches: int = 4) -> None:
    """``quantize_static`` in QDQ format (default int8 types, MinMax calibration) with a few
    random calibration batches, after ``quant_pre_process`` as onnxruntime's docs advise."""
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    shapes = _input_shapes(src)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(SEED)
            self._feeds = iter([{name: rng.standard_normal(dims).astype(np.float32) for name, _, dims in shapes}
                                for _ in range(batches)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(src), str(pre))
        quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ)


def quantize_matmul_4bits(src: Path, dst: Path, block_size: int = 32) -> None:
    """``MatMulNBitsQuantizer`` (4 bits, block 32, symmetric as in onnxruntime's docs' example)."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # It logs one INFO line per node it skips (thousands for GPT-2).
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    model = onnx.load(str(src))
    quant = MatMulNBitsQuantizer(model, bits=4, block_size=block_size, is_symmetric=True)
    quant.process()
    ops = {node.op_type for node in quant.model.model.graph.node}
    if "MatMulNBits" not in ops:
        # GPT-2's torch export spells its linear layers as Gemm (transformers' Conv1D is an
        # addmm); the tool quantizes MatMul (and Gather) only, so it would leave a float model.
        raise ValueError("MatMulNBitsQuantizer quantized no node: the export's linear layers are "
                         f"{'Gemm' if 'Gemm' in ops else 'not MatMul with constant weights'} "
                         "and the tool takes MatMul with constant weights (and Gather) only")
    quant.model.save_model_to_file(str(dst), use_external_data_format=False)


#: Family (b): quantized model name -> (float export it comes from, quantizer, what it is).
QUANTIZED: dict[str, tuple[str, Callable[[Path, Path], None], str]] = {
    "bert_int8_dynamic": ("bert", quantize_dynamic_int8, "int8"),
    "gpt2_int8_dynamic": ("gpt2", quantize_dynamic_int8, "int8"),
    "vit_int8_dynamic": ("vit", quantize_dynamic_int8, "int8"),
    # a CNN through quantize_dynamic: every convolution a ConvInteger between
    # DynamicQuantizeLinear and float scaling (slower than float32 in both runtimes)
    "mobilenet_v2_int8_dynamic": ("mobilenet_v2", quantize_dynamic_int8, "int8"),
    "mobilenet_v2_uint8_dynamic": ("mobilenet_v2", quantize_dynamic_uint8, "int8"),
    "resnet50_int8_qdq": ("resnet50", quantize_static_qdq, "int8"),
    "mobilenet_v2_int8_qdq": ("mobilenet_v2", quantize_static_qdq, "int8"),
    "bert_int4_matmulnbits": ("bert", quantize_matmul_4bits, "int4"),
    "gpt2_int4_matmulnbits": ("gpt2", quantize_matmul_4bits, "int4"),
}


def produce_quantized(name: str, exports: Path, cache: Path) -> Path:
    """The quantized model ``name`` in ``cache`` (made from ``exports`` the first time)."""
    source, quantizer, _ = QUANTIZED[name]
    dst = cache / f"{name}.onnx"
    if dst.exists():
        return dst
    src = exports / f"{source}.onnx"
    if not src.exists():
        raise FileNotFoundError(f"{src} is missing")
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f"{name}.partial.onnx"
    quantizer(src, partial)
    partial.replace(dst)
    return dst
