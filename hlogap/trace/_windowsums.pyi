import numpy as np
from numpy.typing import NDArray

def window_sums(
    window: NDArray[np.int32],
    ps: NDArray[np.float64],
    op: NDArray[np.int32],
    kept: NDArray[np.float64],
    out: NDArray[np.float64],
    block_starts: NDArray[np.int64],
    columns: int,
    /,
) -> None: ...
def longest_per_op(
    op: NDArray[np.int32], length: NDArray[np.int64], out: NDArray[np.int64], k: int, /
) -> int: ...
