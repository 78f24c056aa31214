"""Node conformance cases expected to fail on the CPU provider, each with its reason."""

EXCLUDED: dict[str, str] = {}
RANDOM_OUTPUT: dict[str, str] = {}
