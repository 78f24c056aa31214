"""Cases that are expected to fail on onyxrt today, one entry per model, each with the
exact reason and the text its error must contain.

An entry is strict: if the case stops failing, or fails with a different error, the report
says so and the session fails, so this list never outlives the reason it gives. Add an
entry only for a gap onyxrt knowingly has (an operator it does not implement yet, with the
issue that tracks it), never for a wrong result.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownFailure:
    """``library``'s case ``case`` fails on onyxrt with an error containing ``match``."""

    library: str
    case: str
    match: str
    reason: str


# Empty: ddddocr's default OCR model, listed here while com.microsoft::DynamicQuantizeLSTM had
# no kernel, now runs (issue 21) and matches onnxruntime exactly.
KNOWN_FAILURES: tuple[KnownFailure, ...] = ()


def known_failure(library: str, case: str) -> KnownFailure | None:
    """The entry for this case, if it has one."""
    for entry in KNOWN_FAILURES:
        if entry.library == library and entry.case == case:
            return entry
    return None
