"""decode.py's streaming loop: read lines, translate them in batches, write in order."""

from __future__ import annotations

import contextlib
import io
import sys

from transformer.common.errors import UserError


@contextlib.contextmanager
def _open(path: str, mode: str):
    if path == "-":
        stream = sys.stdin if mode == "r" else sys.stdout
        if mode == "r":
            stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
        yield stream
        return
    try:
        f = open(path, mode, encoding="utf-8", errors="strict", newline="\n")  # noqa: SIM115
    except OSError as e:
        raise UserError(f"cannot open {path} ({e.strerror})") from None
    with f:
        yield f


def translate_stream(
    run,
    input_path: str,
    output_path: str,
    *,
    with_prefix: bool = False,
    with_constraints: bool = False,
    strict_vocab: bool = False,
) -> dict:
    """Translates each line of input_path into output_path, a batch at a time, in order.
    with_prefix: lines are `source<TAB>prefix`, each translation starting with the prefix;
    with_constraints: lines are `source<TAB>phrase<TAB>phrase...`, each translation holding
    every phrase. A prefix or phrase with characters outside the target vocabulary is a
    warning naming its line, or with strict_vocab a one-line error."""
    if with_prefix and with_constraints:
        raise UserError("--with_prefix and --with_constraints exclude each other; give one")
    settings = run.translator.settings
    prepared = run.translator.prepare(run.params)  # weight copies made once for the stream
    multi = settings.outputs_per_input > 1
    lines_done, truncated = 0, 0
    with _open(input_path, "r") as src, _open(output_path, "w") as out:
        batch: list[str] = []
        prefixes: list[str] | None = [] if with_prefix else None
        constraints: list[list[str]] | None = [] if with_constraints else None

        def flush():
            nonlocal lines_done, truncated
            if not batch:
                return
            result = run.translator.translate(
                prepared,
                batch,
                first_id=lines_done,
                prefixes=prefixes,
                constraints=constraints,
                strict_vocab=strict_vocab,
            )
            truncated += result.num_truncated
            for i, (hyps, scores) in enumerate(zip(result.hypotheses, result.scores, strict=True)):
                if multi:
                    for hyp, score in zip(hyps, scores, strict=True):
                        out.write(f"{lines_done + i}\t{score:.4f}\t{hyp}\n")
                else:
                    out.write(hyps[0] + "\n")
            out.flush()
            lines_done += len(batch)
            batch.clear()
            for fields in (prefixes, constraints):
                if fields is not None:
                    fields.clear()

        line_no = 0
        try:
            for line in src:
                line_no += 1
                line = line.rstrip("\n").rstrip("\r")
                if prefixes is not None:  # source<TAB>prefix
                    line, _, prefix = line.partition("\t")
                    prefixes.append(prefix)
                if constraints is not None:  # source<TAB>phrase<TAB>phrase...
                    line, *phrases = line.split("\t")
                    constraints.append(phrases)
                batch.append(line)
                if len(batch) == settings.batch_size:
                    flush()
        except UnicodeDecodeError as e:
            raise UserError(
                f"{input_path}: line {line_no + 1} is not valid UTF-8 ({e.reason}); "
                f"convert the file to UTF-8"
            ) from None
        flush()
    return {"lines": lines_done, "truncated": truncated}
