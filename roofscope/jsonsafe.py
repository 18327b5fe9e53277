"""Values as strict JSON takes them; shared by the Run, the analyzers' ``to_dict`` views and
the reports, so it lives below all of them."""
from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """JSON has no NaN: NaN and infinities become null; numpy scalars become Python ones."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
