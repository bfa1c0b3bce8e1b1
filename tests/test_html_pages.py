"""The study and run pages as files: the table is the Markdown table's cells, the forest plot
the intervals of results.csv, both move when a run's translations (and so its BLEU) change,
text from data files is escaped, the page loads nothing, and errors are one line. The same
pages in a browser: tests/test_html_browser.py."""

from __future__ import annotations

import base64
import csv
import html
import json
import os
import re
import shutil
import statistics
from html.parser import HTMLParser

import pytest

from tests import study_fixture
from transformer.cli import report as report_cli
from transformer.research.html import run_page, samples, study_files, study_page

# Every test here on one worker, which builds the study once (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("html_pages")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return study_fixture.build(tmp_path_factory.mktemp("html_pages"))


@pytest.fixture
def study(built):
    return built[1]


class Page(HTMLParser):
    """What the tests read of a page: the results table's header and cell texts, the
    forest plots' points (their attributes), every script element and element id."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.headers: list[str] = []
        self.rows: list[list[str]] = []
        self.points: dict[str, list[dict]] = {}
        self.scripts = 0
        self.ids: set[str] = set()
        self._table = self._cell = False
        self._figure = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.add(attrs.get("id"))
        self.scripts += tag == "script"
        if tag == "table":
            self._table = attrs.get("id") == "results-table"
        elif tag == "figure":
            self._figure = attrs.get("id")
        elif tag == "circle" and "data-variant" in attrs:
            self.points.setdefault(self._figure, []).append(attrs)
        elif self._table and tag == "tr":
            self.rows.append([])
        elif self._table and tag in ("th", "td"):
            self._cell = tag
            (self.headers if tag == "th" else self.rows[-1]).append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = False
        elif tag in ("th", "td"):
            self._cell = False

    def handle_data(self, data):
        if self._cell == "th":
            self.headers[-1] += data
        elif self._cell == "td":
            self.rows[-1][-1] += data

    @property
    def body_rows(self) -> list[list[str]]:
        return [r for r in self.rows if r]


def _page(workdir: str) -> Page:
    with open(os.path.join(workdir, "results.html"), encoding="utf-8") as f:
        return Page(f.read())


def _markdown_table(workdir: str) -> tuple[list[str], list[list[str]]]:
    """results.md's variant table: (header cells, row cells), split here by '|'."""
    with open(os.path.join(workdir, "results.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| variant |"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    return table[0], table[2:]


def _csv_rows(workdir: str) -> dict[str, dict]:
    with open(os.path.join(workdir, "results.csv"), newline="") as f:
        return {r["variant"]: r for r in csv.DictReader(f)}


def test_the_page_table_has_the_markdown_tables_headers_and_cells(study):
    page = _page(study)
    headers, rows = _markdown_table(study)
    assert page.headers == headers
    assert page.body_rows == rows
    assert any(c.endswith(" *") for c in rows[2]) and rows[1][0] == "base_aa (A/A)"


@pytest.mark.parametrize("metric, figure", [("bleu", "forest-bleu"), ("chrf", "forest-chrf")])
def test_the_forest_plot_draws_the_intervals_the_stars_use(study, metric, figure):
    rows = _csv_rows(study)
    points = _page(study).points[figure]
    assert [p["data-variant"] for p in points] == ["base_aa", "post", "swiglu"]
    for p in points:
        row = rows[p["data-variant"]]
        assert float(p["data-delta"]) == float(row[f"{metric}_delta"])
        # Holm's simultaneous interval where the variant is in the family, else (the A/A
        # arm) the unadjusted one.
        simultaneous = row[f"{metric}_delta_simultaneous_low"]
        low = simultaneous or row[f"{metric}_delta_low"]
        assert (simultaneous == "") == (p["data-variant"] == "base_aa")
        assert float(p["data-low"]) == float(low)
        assert ("significant" in p["class"]) == (row[f"{metric}_significant"] == "True")
    assert "significant" in points[1]["class"]  # post, far better than the baseline


def _bleu(run_dir: str) -> float:
    with open(os.path.join(run_dir, "eval", "test.json")) as f:
        return json.load(f)["bleu"]


def test_changing_one_runs_bleu_moves_the_markdown_table_and_the_page(built, tmp_path):
    config, original = built
    workdir = str(tmp_path / "study")
    shutil.copytree(original, workdir)
    before = _page(workdir)
    # swiglu's seed 1 now translates every sentence exactly: BLEU 100, as eval.py would write.
    sources, refs = study_fixture.sentences()
    study_fixture.write_eval(os.path.join(workdir, "swiglu", "1"), refs, sources, refs)
    assert _bleu(os.path.join(workdir, "swiglu", "1")) == pytest.approx(100.0)
    study_fixture.report(config, workdir)
    after = _page(workdir)

    swiglu = [_bleu(os.path.join(workdir, "swiglu", s)) for s in ("0", "1")]
    base = [_bleu(os.path.join(workdir, "base", s)) for s in ("0", "1")]
    expected = f"{statistics.fmean(swiglu):.2f} ± "
    md_row = next(r for r in _markdown_table(workdir)[1] if r[0] == "swiglu")
    page_row = next(r for r in after.body_rows if r[0] == "swiglu")
    assert md_row[2].startswith(expected) and page_row == md_row
    assert page_row != next(r for r in before.body_rows if r[0] == "swiglu")
    # The forest plot's point: the arms' mean run BLEU difference, from the same files.
    (point,) = [p for p in after.points["forest-bleu"] if p["data-variant"] == "swiglu"]
    (old,) = [p for p in before.points["forest-bleu"] if p["data-variant"] == "swiglu"]
    gap = statistics.fmean(swiglu) - statistics.fmean(base)
    assert float(point["data-delta"]) == pytest.approx(gap, abs=1e-9)
    assert float(point["data-delta"]) > float(old["data-delta"]) + 10


def test_text_from_data_files_is_escaped(study):
    with open(os.path.join(study, "results.html"), encoding="utf-8") as f:
        text = f.read()
    page = Page(text)
    assert page.scripts == 1  # the page's own; the translations' <script> is text
    escaped = "Tom &amp; &quot;Jerry&quot; &lt;b&gt;sehen&lt;/b&gt; &lt;script&gt;alert(1)"
    assert escaped in text
    assert "<b>sehen</b>" not in text


def test_the_page_loads_nothing_from_elsewhere(study):
    with open(os.path.join(study, "results.html"), encoding="utf-8") as f:
        text = f.read()
    assert "default-src 'none'" in text  # the browser refuses any other source
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    assert "url(" not in text and "@import" not in text
    assert all(v.startswith(("data:", "#")) for v in re.findall(r'(?:src|href)="([^"]*)"', text))


def test_every_section_is_there_and_rendering_is_deterministic(study):
    page = _page(study)
    for section_id in ("results", "forest", "lr-search", "valid-loss", "train-loss"):
        assert section_id in page.ids
    assert {"length", "samples", "provenance", "command"} <= page.ids
    loaded = study_files.load(study)
    first = study_page.render(loaded, "transformer-report --html X")
    assert study_page.render(study_files.load(study), "transformer-report --html X") == first


def test_the_page_states_the_compute_results_md_states(study):
    """The provenance table's compute row is results.md's Compute line (both from the runs'
    status.json walls), and it counts every run of the study."""
    with open(os.path.join(study, "results.md"), encoding="utf-8") as f:
        (line,) = [x for x in f.read().splitlines() if x.startswith("Compute: ")]
    with open(os.path.join(study, "runs.csv"), newline="") as f:
        runs = list(csv.DictReader(f))
    assert line.startswith(f"Compute: {len(runs)} ended run(s) ("), line
    with open(os.path.join(study, "results.html"), encoding="utf-8") as f:
        assert html.escape(line.removeprefix("Compute: ")) in f.read()


def test_the_sentences_shown_are_those_the_arms_disagree_on_most():
    outputs = {
        "a": ["x y", "p q r", "s", "u v"],
        "b": ["x y", "p z r", "s", "u w"],
        "c": ["x y", "k l m", "s", "u v"],
    }
    assert samples.most_disputed(outputs, count=2) == [1, 3]
    assert samples.marked("a b c", "a x c") == "a <mark>b</mark> c"
    assert samples.marked("<i> b &", "<i> c &") == "&lt;i&gt; <mark>b</mark> &amp;"
    assert samples.evenly_spaced(24) == [0, 4, 8, 12, 16, 20]


def _cli(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        report_cli.main(list(argv))
    err = capsys.readouterr().err
    return e.value.code, err


def test_errors_are_one_line_with_the_fix(built, tmp_path, capsys):
    config, study = built
    bare = tmp_path / "bare"
    bare.mkdir()
    no_sweep = tmp_path / "no_sweep"
    shutil.copytree(study, no_sweep)
    os.remove(no_sweep / "sweep.json")
    not_a_table = tmp_path / "not_a_table"
    shutil.copytree(study, not_a_table)
    (not_a_table / "results.csv").write_text("name,value\nx,1\n")
    cases = [
        (["--html", str(tmp_path / "nope")], "no such directory"),
        (["--html", str(bare)], "neither a study"),
        (["--html", str(no_sweep)], "pass its sweep config with --config"),
        (["--html", str(not_a_table)], "not a sweep's table"),
        (["--html", study, "--out", str(tmp_path / "x" / "p.html")], "does not exist"),
        (["--html", os.path.join(study, "post", "0"), "--analysis", str(bare)], "report.json"),
    ]
    for argv, message in cases:
        code, err = _cli(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
        assert message in err and "Traceback" not in err
    out = tmp_path / "with_config.html"
    assert report_cli.main(["--html", str(no_sweep), "--config", config, "--out", str(out)]) == 0
    assert Page(out.read_text()).body_rows == _page(study).body_rows


# A 1x1 PNG: what the page embeds is these bytes, base64-encoded.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9a"
    "wAAAABJRU5ErkJggg=="
)


def test_a_run_page_shows_curves_eval_lengths_sentences_and_attention(study, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(os.path.join(study, "post", "0"), run)
    without = run_page.render(str(run), "cmd")
    assert "transformer-analyze has not run" in without
    analysis = run / "analysis"
    (analysis / "sentence0").mkdir(parents=True)
    (analysis / "sentence0" / "overview.png").write_bytes(PNG)
    (analysis / "stats_entropy.png").write_bytes(PNG)
    report = {"step": 6, "statistics": {}, "sentences": [{"source": "A <b>", "translation": "x"}]}
    (analysis / "report.json").write_text(json.dumps(report))
    path = run_page.write(str(run), None, "transformer-report --html RUN")
    assert path == str(run / "report.html")
    text = (run / "report.html").read_text()
    assert text.count("data:image/png;base64," + base64.b64encode(PNG).decode()) == 2
    assert "source: A &lt;b&gt;" in text
    bleu = _bleu(str(run))
    assert f'<td data-sort="{bleu!r}">{bleu:.1f}</td>' in text
    for position in samples.evenly_spaced(study_fixture.SENTENCES):
        assert f"#{position + 1} source" in text
    assert {"curves", "eval", "length", "samples", "attention", "provenance"} <= Page(text).ids
