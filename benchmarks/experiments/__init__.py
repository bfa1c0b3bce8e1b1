"""One-off performance studies, each run by hand to answer one question: the products of a
decode and a training step (`matmul_shapes`), decode settings timed side by side
(`decode_ab`) and where a step's or a decoding call's time goes (`profile_step`), the last
two on the set-up `decode_setup` builds. README.md beside them states what each measured and
what it concluded."""
