"""The cell values a CSV means as "missing", shared by prepare-data (which reads them as missing) and the
schema-driven model (whose served string inputs read them as missing too, so that a client that sends a row as
the CSV holds it gets the answer for a missing value, as in training). No TensorFlow here."""
from __future__ import annotations

# Compared without case by prepare-data (besides an empty cell).
MISSING_TOKENS = ("na", "n/a", "#n/a", "nan", "null", "none", "-", "?", "inf", "+inf", "-inf", "infinity",
                  "+infinity", "-infinity")


def spellings(tokens) -> tuple[str, ...]:
    """Input: missing-value tokens. Output: the ways a spreadsheet or a client writes them, each once, in order:
    as given, lower case, UPPER case, Capitalized and Title Case (NA, N/A, None, NaN, #N/A, ...). A served model
    cannot compare without case with builtin device ops, so it knows these spellings; others stay what they are."""
    seen: dict[str, None] = {}
    for token in tokens:
        for form in (token, token.lower(), token.upper(), token.capitalize(), token.title()):
            if form:
                seen.setdefault(form, None)
    if "nan" in seen:
        seen.setdefault("NaN", None)  # how NumPy and pandas write a missing float
    return tuple(seen)
