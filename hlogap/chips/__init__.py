"""The chip database: peak FLOP/s and bandwidths per device, and detection from trace stats.

Every chip is a TOML file (the project's top-level ``specs/<name>.toml``, reached as ``specs/``
beside this package; format in docs/chips.md). The package's parts, in the order they import
each other: `spec` (the `Chip` and the peak an element type runs at), `parse` (a chip file
read and checked), `database` (the built-in chips, `load_chip`, the calibrated CPU's file),
`detect` (a device plane's stats matched to a chip) and `calibrate` (this CPU measured).
"""

from hlogap.chips.database import CPU, builtin_chips, load_chip
from hlogap.chips.detect import detect_chip
from hlogap.chips.spec import PEAK_KEYS, Chip, dtype_key

__all__ = [
    "CPU",
    "PEAK_KEYS",
    "Chip",
    "builtin_chips",
    "detect_chip",
    "dtype_key",
    "load_chip",
]
