"""HLO in, one IR out: text dumps (text.py) and serialized protos (decode.py) both become
`hlogap.hlo.ir` objects; printer.py writes them back as text, opcodes.py is the opcode taxonomy,
index.py finds the instruction of every timed op. Import the module you need: the proto decoder
loads protobuf, the IR does not."""

# No machine has 2**40 devices: replica groups over more are not a program's (hlogap.hlo.text),
# nor is a larger `--devices` count. Kept here, not in text.py, so that the command line's
# arguments read it without loading the HLO parser and its IR.
MAX_DEVICES = 1 << 40
