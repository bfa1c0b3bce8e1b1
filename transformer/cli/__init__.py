"""The command-line front ends, one module per command (train, evaluate, decode, sweep,
analyze, report, interop, verify), each a `main()` installed as a console script
(`transformer-train`, ...), the first three wrapped by the checkout's
train.py/eval.py/decode.py; `app` holds their shared plumbing
(one-line errors, flag parsing, multi-host flags, quiet library logs).

Imports from: every other package.
"""
