"""CPU kernels: the ai.onnx.ml domain.

Every ai.onnx.ml operator (LabelEncoder, the tree ensembles, linear models, SVMs, ZipMap,
DictVectorizer, OneHotEncoder, ...) is written once in the operator library
(:mod:`onyxrt_ops.ml`) and bound over numpy with the rest of the library; the CPU provider
has no override of its own for them.
"""

from __future__ import annotations
