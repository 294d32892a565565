"""index.html: the report's Markdown as one self-contained page, plots inline (base64).

What: :func:`markdown_to_html` converts the subset of Markdown the report writes (headings,
tables, fenced code, paragraphs, lists, images, `code`, **bold**, links) into HTML, embedding
each referenced PNG as a data URI, so the file can be mailed or attached to a CI run alone.

Why by hand: the subset is small, and a Markdown dependency is not worth it.

Example:
    >>> "<h1>" in markdown_to_html("# Title", Path("."))
    True
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

__all__ = ["markdown_to_html"]

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
          "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}"
          "pre{background:#f4f4f4;padding:8px;overflow-x:auto;font-size:12px}img{max-width:100%}")


def _inline(text: str, folder: Path) -> str:
    def image(m: re.Match[str]) -> str:
        path = folder / m.group(2)
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode()
            return f'<img alt="{m.group(1)}" src="data:image/png;base64,{data}">'
        return f'<img alt="{m.group(1)}" src="{m.group(2)}">'

    out = html.escape(text, quote=False)
    out = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", image, out)
    out = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def markdown_to_html(text: str, folder: Path) -> str:
    """One HTML page from the report's Markdown; images read from ``folder``."""
    body: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
            continue
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            head, rest = cells[0], [r for r in cells[1:] if not all(set(c) <= {"-"} for c in r)]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c, folder)}</th>" for c in head)
                        + "</tr>" + "".join("<tr>" + "".join(f"<td>{_inline(c, folder)}</td>"
                                                              for c in r) + "</tr>" for r in rest)
                        + "</table>")
            continue
        m = re.match(r"(#{1,6}) (.*)", line)
        if m:
            n = len(m.group(1))
            body.append(f"<h{n}>{_inline(m.group(2), folder)}</h{n}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:], folder)}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.strip():
            body.append(f"<p>{_inline(line, folder)}</p>")
        i += 1
    title = next((ln[2:] for ln in lines if ln.startswith("# ")), "onlinesm report")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
