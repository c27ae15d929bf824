"""A scalar as the recipes site prints it: the site reads YAML with js-yaml, so every number is a JavaScript
number (a double), and it prints an environment value or a flag with JavaScript's String(). Python prints the
same numbers otherwise (`inf`, `nan`, `1e-07`, `1000000.0`, every digit of a 30-digit integer): each value
that reaches a command goes through here, so the factory prints what the site prints.
"""

from __future__ import annotations

import math
from decimal import Decimal

# Number::toString switches to exponent notation from 10^21 on and below 10^-6 (ECMA-262, 6.1.6.1.20).
_PLAIN_DIGITS = 21
_SMALLEST_PLAIN = -6


def js_number(value: int | float) -> str:
    """String(value) in JavaScript, for a number YAML gave: an integer is first the nearest double, as
    js-yaml makes it (past the largest double: Infinity)."""
    if isinstance(value, int):
        try:
            value = float(value)
        except OverflowError:
            value = math.inf if value > 0 else -math.inf
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + js_number(-value)
    digits, point = _shortest(value)
    count = len(digits)
    if count <= point <= _PLAIN_DIGITS:
        return digits + "0" * (point - count)
    if 0 < point <= _PLAIN_DIGITS:
        return f"{digits[:point]}.{digits[point:]}"
    if _SMALLEST_PLAIN < point <= 0:
        return "0." + "0" * -point + digits
    exponent = point - 1
    mantissa = digits[0] + (f".{digits[1:]}" if count > 1 else "")
    return f"{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent)}"


def _shortest(value: float) -> tuple[str, int]:
    """(digits, point): the fewest decimal digits that read back as `value` (Python's repr finds the same
    ones JavaScript does: the shortest, then the nearest), and where the decimal point goes after the first
    digit's position: value = 0.digits x 10^point."""
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int) and not sign  # a finite positive number
    text = "".join(map(str, digits)).lstrip("0")
    stripped = text.rstrip("0")
    exponent += len(text) - len(stripped)
    return stripped, exponent + len(stripped)


def site_text(value: object) -> str:
    """A scalar of a recipe as the site prints it: text as it is, true/false, numbers as JavaScript does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value)
    return str(value)
