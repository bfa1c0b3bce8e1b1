"""transformer.scoring.metrics: scores equal the sacrebleu command line; exact line files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transformer.common.errors import UserError
from transformer.scoring import metrics

REFS = [
    "The cat sat on the mat.",
    "Hello world, this is a test of the emergency broadcast system.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Numbers like 3.14 and 1,000 should tokenize well.",
    "",
    'He said "no" &amp; left.',
]
HYPS = [
    "The cat sat on a mat.",
    "Hello world, this is the test of an emergency broadcasting system.",
    "Der schnelle Fuchs springt über den Hund.",
    "",
    "Something appeared here.",
    'He said "no" & left.  ',
]


def _cli(tmp_path, hyps, refs, *extra):
    ref_file = tmp_path / "ref.txt"
    hyp_file = tmp_path / "hyp.txt"
    metrics.write_lines(ref_file, refs)
    metrics.write_lines(hyp_file, hyps)
    out = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref_file), "-i", str(hyp_file)]
        + ["-m", "bleu", "chrf", *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def _cli_json(tmp_path, hyps, refs):
    return json.loads(_cli(tmp_path, hyps, refs, "-w", "4"))


@pytest.mark.parametrize(
    "hyps,refs",
    [
        (HYPS, REFS),
        (REFS, REFS),
        (["a b c d e f"], ["a b c d e g h i"]),
        (["", ""], ["nothing", "at all"]),
    ],
    ids=["mixed", "identical", "short", "all-empty"],
)
def test_scores_match_command_line(tmp_path, hyps, refs):
    s = metrics.score(hyps, refs)
    bleu_cli, chrf_cli = _cli_json(tmp_path, hyps, refs)
    assert bleu_cli["name"] == "BLEU"
    assert round(s.bleu, 4) == pytest.approx(bleu_cli["score"], abs=1e-9)
    assert s.bleu_signature == bleu_cli["signature"]
    assert s.bleu_verbose == bleu_cli["verbose_score"]
    assert chrf_cli["name"] == s.chrf_name == "chrF2"
    assert round(s.chrf, 4) == pytest.approx(chrf_cli["score"], abs=1e-9)
    assert s.chrf_signature == chrf_cli["signature"]
    assert "tok:13a" in s.bleu_signature and "case:mixed" in s.bleu_signature
    assert "smooth:exp" in s.bleu_signature
    assert s.signatures == {"bleu": s.bleu_signature, "chrf": s.chrf_signature}


def test_text_lines_match_command_line(tmp_path):
    s = metrics.score(HYPS, REFS)
    text = _cli(tmp_path, HYPS, REFS, "-w", "4", "--format", "text")
    lines = [line.strip() for line in text.strip().splitlines()]
    assert lines == [s.bleu_line(width=4), s.chrf_line(width=4)]


def test_bleu_details():
    s = metrics.score(["The cat sat on a mat ."], ["The cat sat on the mat ."])
    assert len(s.precisions) == 4
    assert s.precisions[0] == pytest.approx(100 * 6 / 7)
    assert s.sys_len == s.ref_len == 7
    assert s.brevity_penalty == 1.0
    assert s.ratio == 1.0
    assert s.num_segments == 1
    d = s.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["bleu"] == s.bleu and d["precisions"] == list(s.precisions)


def test_perfect_and_empty_hypotheses():
    assert metrics.score(["a b c d"], ["a b c d"]).bleu == pytest.approx(100.0)
    s = metrics.score(["", "x"], ["a b c d", "x y z"])
    assert s.sys_len == 1 and s.ref_len == 7
    assert s.bleu == 0.0


def test_count_mismatch_names_both_counts():
    with pytest.raises(UserError) as e:
        metrics.score(["a", "b", "c"], ["a", "b"])
    msg = str(e.value)
    assert "3 hypotheses" in msg and "2 references" in msg
    assert "\n" not in msg


def test_no_segments_is_an_error():
    with pytest.raises(UserError, match="empty"):
        metrics.score([], [])


def test_write_read_round_trip_with_empty_lines(tmp_path):
    lines = ["", "first", "", "  spaced  ", "tab\there", "ünïcödé ✓", "\u2028kept", ""]
    path = tmp_path / "sub" / "hyp.txt"
    metrics.write_lines(path, lines)
    assert path.read_bytes() == ("\n".join(lines) + "\n").encode("utf-8")
    assert metrics.read_lines(path) == lines


def test_empty_hypotheses_file_line_count(tmp_path):
    path = tmp_path / "h.txt"
    metrics.write_lines(path, ["", "", ""])
    assert path.read_bytes() == b"\n\n\n"
    assert metrics.read_lines(path) == ["", "", ""]
    metrics.write_lines(path, [])
    assert path.read_bytes() == b""
    assert metrics.read_lines(path) == []


def test_read_lines_missing_final_newline_and_crlf(tmp_path):
    path = tmp_path / "r.txt"
    path.write_bytes(b"a\r\nb\n\nc")
    assert metrics.read_lines(path) == ["a", "b", "", "c"]


def test_write_rejects_line_breaks(tmp_path):
    with pytest.raises(UserError, match="segment 2"):
        metrics.write_lines(tmp_path / "x.txt", ["ok", "two\nlines"])
    with pytest.raises(UserError):
        metrics.write_lines(tmp_path / "x.txt", ["carriage\rreturn"])


def test_read_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(UserError) as e:
        metrics.read_lines(path)
    msg = str(e.value)
    assert str(path) in msg and "line 3" in msg and "UTF-8" in msg
    assert "\n" not in msg


def test_read_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        metrics.read_lines(tmp_path / "nope.txt")
