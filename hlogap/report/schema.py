"""The types of the documents renderers read, where an earlier stage defines them: the chip an
audit ran on (and `hlogap chips` lists), the allocators' run-time peaks a report's memory
section holds, and the one instruction's bound `hlogap bound` prints. Renderers import these
from here, with the report's own types (hlogap.report.model), and nothing from the stages
that made them (tests/test_layers.py)."""

from __future__ import annotations

from hlogap.bounds.instruction import InstructionBound
from hlogap.chips import Chip
from hlogap.memory.runtime import AllocatorPeak

__all__ = ["AllocatorPeak", "Chip", "InstructionBound"]
