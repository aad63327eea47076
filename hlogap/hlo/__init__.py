"""HLO in, one IR out: text dumps and serialized protos both become `hlogap.hlo.ir` objects."""

from hlogap.hlo.decode import HloDecodeError, decode_hlo_module_proto, decode_hlo_proto
from hlogap.hlo.printer import print_instruction, print_module, print_shape
from hlogap.hlo.text import HloParseError, parse_instruction, parse_module, parse_shape
from hlogap.hlo.tiling import padded_bytes, padded_dims, padded_elements

__all__ = [
    "HloDecodeError",
    "HloParseError",
    "decode_hlo_module_proto",
    "decode_hlo_proto",
    "padded_bytes",
    "padded_dims",
    "padded_elements",
    "parse_instruction",
    "parse_module",
    "parse_shape",
    "print_instruction",
    "print_module",
    "print_shape",
]
