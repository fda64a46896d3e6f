"""Checking that a quote an annotator gives really occurs in the text it was shown.

Every label, follow judgement and failure class must cite its evidence verbatim. A quote that is
not in the material is treated as a malformed answer (retried, then left unlabelled), because an
annotator that invents evidence cannot be trusted on the judgement that rests on it. Matching
forgives what a careful human copy would change: runs of whitespace, letter case, and an ellipsis
(``...`` or ``…``) standing for left-out text between fragments that occur in order.
"""

from __future__ import annotations

import re

__all__ = ["missing_quotes", "normalise", "quote_found"]

_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|…)\s*")
_SPACE = re.compile(r"\s+")
# Straight and curly quotes and dashes differ between a copy and its source more often than words do.
_FOLD = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "–": "-", "—": "-"})


def normalise(text: str) -> str:
    """Lower case, folded quotes and dashes, every whitespace run one space."""
    return _SPACE.sub(" ", text.translate(_FOLD)).strip().lower()


def quote_found(quote: str, source: str) -> bool:
    """True when ``quote`` (fragments split at ellipses, in order) occurs in ``source``."""
    fragments = [normalise(f) for f in _ELLIPSIS.split(quote)]
    fragments = [f for f in fragments if f]
    if not fragments:
        return False
    text, pos = normalise(source), 0
    for fragment in fragments:
        at = text.find(fragment, pos)
        if at < 0:
            return False
        pos = at + len(fragment)
    return True


def missing_quotes(quotes: list[str], source: str, where: str) -> list[str]:
    """One problem line per quote not found in ``source`` (named ``where`` in the message)."""
    return [f"quote not found in the {where}: {q[:120]!r}" for q in quotes if not quote_found(q, source)]
