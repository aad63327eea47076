from typing import Protocol

from hlogap.hlo.ir import (
    Computation,
    DotDims,
    FileLocation,
    Instruction,
    Layout,
    Shape,
    SliceDim,
    StackFrame,
    StackFrameIndex,
)

class _Hooks(Protocol):
    def head(self, parts: list[bytes], /) -> None: ...
    def computations(self, parts: list[bytes], /) -> None: ...
    def shape(self, raw: bytes, /) -> Shape: ...
    def metadata(self, raw: bytes, /) -> tuple[str | None, str | None, str | None]: ...
    def literal(self, raw: bytes, /) -> str: ...
    def sharding(self, raw: bytes, /) -> str: ...
    def frontend_attributes(self, raw: bytes, /) -> str | None: ...
    def backend_config(self, raw: bytes, /) -> tuple[str, str]: ...
    def string(self, raw: bytes, /) -> str: ...
    def instruction(
        self,
        raw: bytes,
        is_root: bool,
        defined: dict[int, tuple[str, Shape]],
        comp_names: dict[int, str],
        /,
    ) -> Instruction: ...

def setup(
    instruction: type[Instruction],
    instruction_fields: tuple[str, ...],
    instruction_defaults: dict[str, object],
    computation: type[Computation],
    computation_fields: tuple[str, ...],
    computation_defaults: dict[str, object],
    slice_dim: tuple[type[SliceDim], tuple[str, ...]],
    shape: tuple[type[Shape], tuple[str, ...]],
    layout: tuple[type[Layout], tuple[str, ...]],
    file_location: tuple[type[FileLocation], tuple[str, ...]],
    stack_frame: tuple[type[StackFrame], tuple[str, ...]],
    stack_frame_index: tuple[type[StackFrameIndex], tuple[str, ...]],
    dot_dims: tuple[type[DotDims], tuple[str, ...]],
    element_names: dict[int, str],
    /,
) -> None: ...
def decode(
    data: bytes, wrapped: bool, hooks: _Hooks, /
) -> tuple[str, str | None, list[Computation]]: ...
