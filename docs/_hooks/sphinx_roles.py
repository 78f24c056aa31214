"""A griffe extension for the API reference: Sphinx cross-reference roles in docstrings
(``:class:`~onyxrt.kernels.KernelRegistry```, ``:meth:`compile```) become code spans
(`` `KernelRegistry` ``, `` `compile` ``) instead of showing up as raw text.

The core's docstrings use Sphinx roles because they read well in source and in ``help()``;
rewriting them here keeps one spelling in the code and a clean page on the site.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# :role:`target` or :role:`~dotted.target` or :role:`text <target>`
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|obj|exc|const):`(~?)([^`<]+?)(?:\s*<[^>]+>)?`")


def _replace(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2).strip()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_replace, obj.docstring.value)
