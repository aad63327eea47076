"""Profiles hlogap cannot audit, named as what they are: a TensorFlow profile of a model run
without XLA has op events (TF kernels with `tf_op` stats, `TensorFlow Ops` lines) but no
`hlo_op`, so no HLO to bound."""

from __future__ import annotations

from collections.abc import Iterable

from hlogap.errors import InputError
from hlogap.trace.xspace import read_planes

TF_STATS = frozenset({"tf_op"})
TF_LINES = frozenset({"TensorFlow Ops", "TensorFlow Name Scope"})


def no_xla_ops(files: Iterable[str]) -> str | None:
    """Why profiles without XLA op events hold none, when they say: TensorFlow without XLA."""
    for file in files:
        try:
            planes, _ = read_planes(file)
        except InputError:
            continue
        for plane in planes:
            stats = {m.name for m in plane.stat_metadata.values()}
            lines = {line.name for line in plane.raw_lines}
            if stats & TF_STATS or lines & TF_LINES:
                return (
                    f"no XLA ops in this profile (TensorFlow ops without XLA): {file} holds "
                    "TensorFlow kernels with no HLO to bound; run the model under XLA "
                    "(tf.function(jit_compile=True)) and profile again"
                )
    return None
