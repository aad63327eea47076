from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

def line_head(data: bytes, /) -> tuple[int, int, str, str, int, int, int]: ...
def line_columns(
    data: bytes, wanted: Sequence[int], out: NDArray[np.int64], /
) -> list[tuple[int, bytes]]: ...
