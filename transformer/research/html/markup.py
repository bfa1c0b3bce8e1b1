"""HTML text for the pages: escaping, elements, the page skeleton with its inline style and
script, sortable tables and the small subset of Markdown that results.md uses.

Every string that comes from a file (variant names, translations, config values) goes
through `escape` or `tag`'s attribute quoting: a translation may hold `<`, `&` or quotes, and
must show as text, never act as markup. The page loads nothing: its style and script are
inline, its images data URIs, and its Content-Security-Policy forbids every other source, so
it shows the same offline as on the machine that wrote it.
"""

from __future__ import annotations

import base64
import html
import re

# No network at view time: everything the page needs is inline; the browser refuses the rest.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def escape(text) -> str:
    """`text` as HTML text or a quoted attribute value."""
    return html.escape("" if text is None else str(text), quote=True)


def tag(name: str, content: str = "", **attrs) -> str:
    """<name attrs>content</name>; `content` is HTML already. Attribute names take '-' for
    '_' (data_sort -> data-sort) and 'class_' for 'class'; None drops an attribute."""
    parts = [name]
    for key, value in attrs.items():
        if value is None:
            continue
        parts.append(f'{key.rstrip("_").replace("_", "-")}="{escape(value)}"')
    return f"<{' '.join(parts)}>{content}</{name}>"


def png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def section(section_id: str, title: str, body: str) -> str:
    """One section of a page; its id is the navigation's anchor (and what tests look for)."""
    return tag("section", tag("h2", escape(title)) + body, id=section_id)


def page(title: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole document: a navigation line, then each (id, title, body) section."""
    nav = " ".join(tag("a", escape(t), href=f"#{i}") for i, t, _ in sections)
    body = tag("h1", escape(title)) + tag("nav", nav)
    body += "".join(section(i, t, b) for i, t, b in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no favicon request
        f"{tag('title', escape(title))}<style>{STYLE}</style></head>\n"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def sort_key(value) -> str:
    """A cell's data-sort: numbers as numbers (bools 1/0), text as text, '' for none."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, int | float) else str(value)


def table(
    headers: list[str],
    rows: list[list[tuple[str, object]]],
    *,
    row_classes: list[str | None] | None = None,
    sortable: bool = False,
    table_id: str | None = None,
) -> str:
    """A table of escaped `headers` (none: no header row) and rows of (cell text, sort
    value) pairs; a sortable one sorts by a column's sort values when its header is
    clicked."""
    row_classes = row_classes or [None] * len(rows)
    head = tag("thead", tag("tr", "".join(tag("th", escape(h)) for h in headers)))
    head = head if headers else ""  # a table of (name, value) rows has no header
    body = "".join(
        tag(
            "tr",
            "".join(tag("td", escape(text), data_sort=sort_key(key)) for text, key in row),
            class_=cls,
        )
        for row, cls in zip(rows, row_classes, strict=True)
    )
    inner = tag(
        "table", head + tag("tbody", body), id=table_id, class_="sortable" if sortable else None
    )
    return tag("div", inner, class_="scroll")


def inline_markdown(text: str) -> str:
    """Escaped text with results.md's inline marks: `code` and **bold**."""
    out = escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def markdown(text: str) -> str:
    """The block subset of Markdown that results.md is written in: headings, paragraphs,
    '- ' lists, pipe tables and fenced code; everything escaped."""
    out = []
    for block in _blocks(text):
        out.append(_block(block))
    return "".join(out)


def _blocks(text: str) -> list[list[str]]:
    """Blank-line separated blocks; a fenced code block is one block whatever it holds."""
    blocks: list[list[str]] = [[]]
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            blocks.append([])
        else:
            blocks[-1].append(line)
    return [b for b in blocks if b]


def _block(lines: list[str]) -> str:
    if lines[0].startswith("```"):
        return tag("pre", escape("\n".join(lines[1:-1])))
    if lines[0].startswith("#"):
        level = min(6, len(lines[0]) - len(lines[0].lstrip("#")) + 1)
        return tag(f"h{level}", inline_markdown(lines[0].lstrip("# ")))
    if all(line.startswith("|") for line in lines):
        return _pipe_table(lines)
    if all(line.startswith("- ") for line in lines):
        return tag("ul", "".join(tag("li", inline_markdown(line[2:])) for line in lines))
    return tag("p", inline_markdown(" ".join(lines)))


def _pipe_table(lines: list[str]) -> str:
    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    head = tag("tr", "".join(tag("th", inline_markdown(c)) for c in cells(lines[0])))
    body = "".join(
        tag("tr", "".join(tag("td", inline_markdown(c)) for c in cells(line))) for line in lines[2:]
    )
    return tag("div", tag("table", tag("thead", head) + tag("tbody", body)), class_="scroll")


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d1d1f;margin:0 auto;
max-width:1400px;padding:0 24px 48px}
h1{font-size:22px;margin:20px 0 6px}h2{font-size:18px;margin:0 0 8px}h3{font-size:15px}
nav{border-bottom:1px solid #ddd;padding:6px 0}
nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
section{margin:22px 0;padding-top:4px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:12.5px}
th,td{border-bottom:1px solid #e3e3e3;padding:3px 8px;text-align:left;vertical-align:top}
thead th{background:#f4f4f6;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none;min-width:48px;max-width:170px}
table.sortable td{white-space:nowrap}
#results-table td:first-child{position:sticky;left:0;background:#fff}
#results-table tr.baseline td:first-child{background:#f1f6ff}
#results-table tr.aa td:first-child{background:#fff7e6}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2"}
table.sortable th[aria-sort=descending]::after{content:" \\25BC"}
tr.baseline td{background:#f1f6ff}tr.aa td{background:#fff7e6}tr.significant td{font-weight:600}
code{background:#f4f4f6;padding:0 3px;border-radius:3px}
pre{background:#f4f4f6;padding:8px;overflow-x:auto;white-space:pre-wrap}
.caption,details{color:#444;font-size:13px;max-width:1000px}
.multiples{display:flex;flex-wrap:wrap;gap:6px 10px}
figure{margin:0}figcaption{font-size:12px;color:#444}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .axis{stroke:#888;stroke-width:1}svg .grid{stroke:#eee;stroke-width:1}
svg .zero{stroke:#333;stroke-width:1.2}
svg .mean{fill:none;stroke:#0b57d0;stroke-width:1.8}svg .point{fill:#0b57d0}
svg .band{fill:#0b57d0;fill-opacity:.18;stroke:none}
svg .ref{fill:none;stroke:#999;stroke-width:1.3;stroke-dasharray:4 3}
svg .whisker{stroke:#0b57d0;stroke-width:1.5}
svg .interval{stroke:#333;stroke-width:2}svg .interval.aa{stroke:#b26a00}
svg .interval.unadjusted{stroke-dasharray:5 3}
svg .estimate{fill:#fff;stroke:#333;stroke-width:1.5}svg .estimate.significant{fill:#333}
svg .estimate.aa{fill:#fff;stroke:#b26a00}
svg .mdd{fill:#6a9f5b;fill-opacity:.22}svg .mdd-holm{fill:#6a9f5b;fill-opacity:.10}
svg .chosen{fill:none;stroke:#d93025;stroke-width:2}svg .diverged{fill:#d93025}
svg .label.significant{font-weight:700}svg .label.aa{fill:#b26a00}
.samples td{max-width:520px}.samples mark{background:#ffe08a;padding:0 1px}
.samples td.arm{white-space:nowrap;color:#444}.samples tr.source td{border-top:2px solid #999}
img.heatmap{max-width:100%;border:1px solid #eee}
"""

# Sorting: a header click orders the rows by the column's data-sort values, numbers as
# numbers, empty cells last either way; a second click reverses.
SCRIPT = """
(function () {
  function key(row, col) {
    var text = row.cells[col].getAttribute('data-sort');
    if (text === null || text === '') return null;
    var number = Number(text);
    return isNaN(number) ? text : number;
  }
  function compare(a, b) {
    if (typeof a === typeof b) return a < b ? -1 : a > b ? 1 : 0;
    return typeof a === 'number' ? -1 : 1;
  }
  function sortBy(table, col, th) {
    var ascending = th.getAttribute('aria-sort') !== 'ascending';
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var a = key(r, col), b = key(s, col);
      if (a === null || b === null) return (a === null) - (b === null);
      return ascending ? compare(a, b) : compare(b, a);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute('aria-sort');
    });
    th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener('click', function () { sortBy(table, col, th); });
    });
  });
})();
"""
