"""HLO in, one IR out: text dumps (text.py) and serialized protos (decode.py) both become
`hlogap.hlo.ir` objects; printer.py writes them back as text, opcodes.py is the opcode taxonomy,
index.py finds the instruction of every timed op. Import the module you need: the proto decoder
loads protobuf, the IR does not."""
