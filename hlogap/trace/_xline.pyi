from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

def plane_lines(data: bytes | memoryview, /) -> tuple[bytes, list[tuple[int, int]]]: ...
def line_head(data: bytes | memoryview, /) -> tuple[int, int, str, str, int, int, int]: ...
def line_columns(
    data: bytes | memoryview, wanted: Sequence[int], out: NDArray[np.int64], /
) -> list[tuple[int, bytes]]: ...
