"""The report's rows, built from the stages before it: each op's row against its bound
(`analysis`), the steps (`steps`), the hosts' skew (`hosts`), ops rolled up (`groups`), xprof's
counts beside ours (`crosscheck`), command-buffer estimates (`command_buffers`) and the trace
export's tracks (`tracks`). They make the schema's objects (`hlogap.report`); the advice and the
renderers read them."""
