"""HLO for every timed op: the instruction, its module, its category.

Sources, in order: the module's `Hlo Proto` from the trace (GPU, CPU), the op's own HLO text from
TPU event metadata, HLO text dumps the user points at (`--hlo-dump DIR`). An op whose HLO cannot
be found keeps its time and gets the reason instead of an instruction.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from hlogap.hlo.decode import HloDecodeError, decode_hlo_proto
from hlogap.hlo.ir import Instruction, Module
from hlogap.hlo.mesh import ModuleMesh, module_mesh
from hlogap.hlo.opcodes import COMMAND_BUFFER_FLAG, THUNK_COMMAND_BUFFER, categorize
from hlogap.hlo.text import HloParseError, parse_instruction, parse_module
from hlogap.trace.model import OpInfo


class ResolvedOp(Struct):
    """A profile op's instruction and module in the HLO, or why it has none."""

    instruction: Instruction | None
    module: Module | None
    category: str
    missing: str | None = None  # why there is no instruction


class HloIndex:
    """Decodes each module once and finds instructions by name."""

    def __init__(self, modules: dict[tuple[str, str], bytes], hlo_dump: Path | None = None):
        self._protos = modules
        self._decoded: dict[tuple[str, str], Module | str] = {}
        self._by_name: dict[tuple[str, str], dict[str, Instruction]] = {}
        self._dumps: dict[str, Module] = _read_dumps(hlo_dump) if hlo_dump else {}
        self._meshes: dict[tuple[str, str], ModuleMesh | None] = {}

    def _module(self, module: str, program_id: str) -> Module | str:
        key = (module, program_id)
        found = self._decoded.get(key)
        if found is not None:
            return found
        proto = self._protos.get(key)
        result: Module | str
        if proto is not None:
            try:
                result = decode_hlo_proto(proto)
            except HloDecodeError as exc:
                result = f"HLO of module {module} is undecodable: {exc}"
        elif module in self._dumps:
            result = self._dumps[module]
        else:
            result = f"no HLO for module {module or '?'} in the trace (try --hlo-dump DIR)"
        self._decoded[key] = result
        if isinstance(result, Module):
            self._by_name[key] = result.instructions()
        return result

    def module(self, module: str, program_id: str) -> Module | None:
        """The decoded module (decoded once, whoever asks first); None where it has no HLO."""
        found = self._module(module, program_id)
        return found if isinstance(found, Module) else None

    def instruction(self, module: str, program_id: str, name: str) -> Instruction | None:
        """The module's instruction of that name (names looked up once per module)."""
        if self.module(module, program_id) is None:
            return None
        return self._by_name[(module, program_id)].get(name)

    def mesh(self, module: str, program_id: str) -> ModuleMesh | None:
        """The module's device mesh and what it says of its instructions (found once); None
        for a module on one device or without HLO."""
        key = (module, program_id)
        if key not in self._meshes:
            found = self.module(module, program_id)
            self._meshes[key] = module_mesh(found) if found is not None else None
        return self._meshes[key]

    def resolve(self, info: OpInfo) -> ResolvedOp:
        key = info.key
        if info.hlo_text:  # TPU: the op's own text; the module (when present) gives fused bodies
            module = self._module(key.module, key.program_id)
            module_ir = module if isinstance(module, Module) else None
            inst = None
            if module_ir is not None:
                inst = self._by_name[(key.module, key.program_id)].get(key.name)
            if inst is None:
                try:
                    inst = parse_instruction(info.hlo_text)
                except HloParseError as exc:
                    return ResolvedOp(
                        None,
                        None,
                        info.category or "unknown",
                        f"HLO text of the op does not parse: {exc}",
                    )
            return ResolvedOp(inst, module_ir, info.category or categorize(inst, module_ir))
        module = self._module(key.module, key.program_id)
        if isinstance(module, str):
            return ResolvedOp(None, None, info.category or "unknown", module)
        inst = self._by_name[(key.module, key.program_id)].get(key.name)
        if inst is None and THUNK_COMMAND_BUFFER.fullmatch(key.name):
            return ResolvedOp(
                None,
                module,
                "command buffer",
                "a command buffer XLA:GPU formed from its thunks, whose ops the HLO does not "
                f"name (XLA_FLAGS={COMMAND_BUFFER_FLAG} times each op)",
            )
        if inst is None:
            return ResolvedOp(
                None,
                module,
                info.category or "unknown",
                f"no instruction '{key.name}' in module {key.module}",
            )
        return ResolvedOp(inst, module, info.category or categorize(inst, module))


def _read_dumps(directory: Path) -> dict[str, Module]:
    """`--xla_dump_to` output: prefer the optimized module text of each module."""
    modules: dict[str, Module] = {}
    files = sorted(directory.glob("*after_optimizations.txt")) or sorted(directory.glob("*.txt"))
    for f in files:
        if not f.is_file():
            continue  # a FIFO or device among the dumps (is_file: regular files only)
        try:
            mod = parse_module(f.read_text(errors="replace"))
        except (HloParseError, OSError):
            continue
        modules.setdefault(mod.name, mod)
    return modules
