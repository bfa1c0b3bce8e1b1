"""transformer.research.report: Markdown table from eval JSONs, README section replacement."""

from __future__ import annotations

import json

import pytest

from transformer.cli import report as report_cli
from transformer.common.errors import UserError
from transformer.research import report

BLEU_SIG = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
CHRF_SIG = "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"


def _result(**overrides):
    r = {
        "bleu": 27.349,
        "chrf": 55.06,
        "signature": {"bleu": BLEU_SIG, "chrf": CHRF_SIG},
        "step": 20000,
        "split": "test",
        "name": "base",
        "decode": {"strategy": "beam", "beam_size": 4, "alpha": 0.6},
        "sentences_per_s": 123.456,
    }
    r.update(overrides)
    return r


def _write(run_dir, filename, result):
    path = run_dir / "eval" / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    _write(
        root / "base-ende",
        "test.json",
        _result(
            direction="en-de",
            config_name="base",
            train_time_s=3600 * 3 + 12 * 60 + 5,
            machine="1x H200",
            command="python -m transformer.eval --workdir runs/base-ende --split test",
        ),
    )
    _write(
        root / "base-ende",
        "valid.json",
        _result(
            split="valid",
            bleu=25.96,
            chrf=53.0,
            direction="en-de",
            decode={"strategy": "greedy"},
            command=["python", "-m", "transformer.eval", "--split", "valid"],
        ),
    )
    _write(root / "tiny", "test.json", _result(name="tiny", bleu=3.04, chrf=20.0, step=50))
    (root / "not-a-run").mkdir()  # no eval/: ignored
    return root


def test_render_table(runs):
    text = report.render(report.find_results([runs]))
    lines = text.splitlines()
    assert lines[0] == (
        "| Run | Direction | Split | BLEU | chrF | Step | Decoding | Sent/s | Train time "
        "| Machine |"
    )
    rows = [line for line in lines[2:] if line.startswith("| ")]
    assert rows == [
        "| base | en-de | test | 27.3 | 55.1 | 20000 | beam 4, α=0.6 | 123.5 | 3h 12m | 1x H200 |",
        "| base | en-de | valid | 26.0 | 53.0 | 20000 | greedy | 123.5 | – | – |",
        "| tiny | – | test | 3.0 | 20.0 | 50 | beam 4, α=0.6 | 123.5 | – | – |",
    ]
    # Signatures listed once each, with the metric name.
    assert text.count(f"`BLEU|{BLEU_SIG}`") == 1
    assert text.count(f"`chrF2|{CHRF_SIG}`") == 1
    assert "python -m transformer.eval --workdir runs/base-ende --split test" in text
    assert "python -m transformer.eval --split valid" in text
    assert text.endswith("```\n")


def test_longer_than_subset_gets_its_own_row(tmp_path):
    longer = {"source_tokens_over": 20, "sentences": 143, "bleu": 24.151, "chrf": 52.248}
    _write(tmp_path, "long.json", _result(name="long", longer=longer))
    table = report.render(report.find_results([tmp_path]))
    rows = [line for line in table.splitlines() if line.startswith("| long")]
    assert len(rows) == 2
    assert "| test | 27.3 | 55.1 |" in rows[0]
    assert "| test, source > 20 tokens (143 sent.) | 24.2 | 52.2 |" in rows[1]


def test_single_run_dir_and_string_signature(tmp_path):
    run = tmp_path / "myrun"
    _write(run, "a.json", _result(signature=f"BLEU|{BLEU_SIG}", name=None))
    results = report.find_results([run])
    assert len(results) == 1
    text = report.render(results)
    assert "| myrun | – | test | 27.3 |" in text  # falls back to the run directory name
    assert "sacreBLEU signature:" in text and f"`BLEU|{BLEU_SIG}`" in text
    assert "Commands:" not in text


def test_format_helpers():
    assert report.format_score(27.349) == "27.3"
    assert report.format_score(27.36) == "27.4"
    assert report.format_score(0) == "0.0"
    assert report.format_duration(42) == "42s"
    assert report.format_duration(125) == "2m 05s"
    assert report.format_duration(None) == "–"
    assert report.format_decode({"strategy": "greedy", "beam_size": 1}) == "greedy"
    assert report.format_decode({"beam_size": 5, "alpha": 1.0}) == "beam 5, α=1.0"
    assert report.format_decode({"temperature": 0.7, "top_k": 4}) == "temperature=0.7, top_k=4"


def test_pipes_in_cells_are_escaped(tmp_path):
    _write(tmp_path / "r", "x.json", _result(machine="a|b"))
    text = report.render(report.find_results([tmp_path]))
    assert "a\\|b" in text


def _readme(tmp_path, body="old content\n"):
    path = tmp_path / "README.md"
    path.write_text(
        "# Project\n\nIntro.\n\n## Results\n\n"
        "<!-- report:Results:start -->\n" + body + "<!-- report:Results:end -->\n\nMore text.\n"
    )
    return path


def test_readme_replacement_is_idempotent(runs, tmp_path):
    readme = _readme(tmp_path)
    argv = ["--runs", str(runs), "--readme", str(readme), "--section", "Results"]
    assert report_cli.main(argv) == 0
    first = readme.read_text()
    assert "old content" not in first
    assert first.startswith("# Project\n\nIntro.\n\n## Results\n\n<!-- report:Results:start -->\n|")
    assert first.endswith("```\n<!-- report:Results:end -->\n\nMore text.\n")
    assert "| base | en-de | test | 27.3 |" in first
    assert report_cli.main(argv) == 0
    assert readme.read_text() == first
    # Same content through the library function.
    same = report.render(report.find_results([runs]))
    assert report.update_readme(readme, "Results", same) is False
    assert report.update_readme(readme, "Results", "x") is True
    assert report.update_readme(readme, "Results", "x") is False


def test_other_sections_untouched(tmp_path):
    text = (
        "<!-- report:A:start -->\na\n<!-- report:A:end -->\n"
        "<!-- report:B:start -->\nb\n<!-- report:B:end -->\n"
    )
    new = report.replace_section(text, "B", "new b")
    assert new == (
        "<!-- report:A:start -->\na\n<!-- report:A:end -->\n"
        "<!-- report:B:start -->\nnew b\n<!-- report:B:end -->\n"
    )


def test_missing_markers_error(tmp_path, runs, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# Project\n\nNo markers here.\n")
    with pytest.raises(UserError) as e:
        report.update_readme(readme, "Results", "table")
    assert "<!-- report:Results:start -->" in str(e.value) and "\n" not in str(e.value)
    assert readme.read_text() == "# Project\n\nNo markers here.\n"
    with pytest.raises(UserError, match="before"):
        report.replace_section(
            "<!-- report:R:end -->\n<!-- report:R:start -->\n", "R", "x", source="README.md"
        )
    # Command line: one line on stderr, exit 2, no traceback.
    with pytest.raises(SystemExit) as exit_info:
        report_cli.main(["--runs", str(runs), "--readme", str(readme)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "report:Results:start" in err


def test_out_file_and_stdout(runs, tmp_path, capsys):
    out = tmp_path / "report.md"
    assert report_cli.main(["--runs", str(runs), "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert report_cli.main(["--runs", str(runs)]) == 0
    assert capsys.readouterr().out == out.read_text()


def test_no_results_and_bad_json(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no eval results"):
        report.find_results([empty])
    with pytest.raises(UserError, match="not found"):
        report.find_results([tmp_path / "missing"])
    bad = _write(tmp_path / "r1", "x.json", _result())
    bad.write_text("{not json")
    with pytest.raises(UserError, match="x.json"):
        report.find_results([tmp_path / "r1"])
    partial = {k: v for k, v in _result().items() if k != "bleu"}
    _write(tmp_path / "r2", "y.json", partial)
    with pytest.raises(UserError, match="lacks key.*bleu"):
        report.find_results([tmp_path / "r2"])
