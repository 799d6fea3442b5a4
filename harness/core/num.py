"""Numbers as the harness reads and prints them: one rule each, for every module that shows a figure
(`compare`, `show`, `history`, `claims`, `findings`).

Two questions, two answers, never mixed:

- `known(v)`: is there a value to show? Anything but None and NaN (a bool, an infinity or a text
  is shown as it is); a value that is not known is printed as "—".
- `finite(x)`: is there a number to compute with? A real, finite number, as a float; None for
  None, NaN, +-inf, a bool (True is not 1 here), a text or anything else.

And one way to print a figure in a sentence: `sig3` (three significant figures, thousands
separated, no exponent for the sizes seen here: `72,000`, `11.3`, `0.0421`).
"""

from __future__ import annotations

import math
import numbers  # the standard library's number tower
from typing import Any


def known(v: Any) -> bool:
    """A value to show: not None and not NaN."""
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def finite(x: Any) -> float | None:
    """A real, finite number as a float (numpy's included); None otherwise, a bool too."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def sig3(x: float) -> str:
    """Three significant figures, thousands separated: `72,000`, `11.3`, `0.0421`."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
