"""What a valid report page is, for the report tests: an HTML page that parses, whose images are
real PNG plots (magic, a size, dimensions, more than one colour)."""

from __future__ import annotations

import base64
import io
import struct
from html.parser import HTMLParser

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ReportPage(HTMLParser):
    """The parts of a report page the tests read: image titles and bytes, table rows, headings."""

    def __init__(self, page: str):
        super().__init__()
        self.images: dict[str, bytes] = {}
        self.rows: dict[str, str] = {}
        self.grid: list[list[str]] = []  # every table row, header cells (th) included, in order
        self.headings: list[str] = []
        self.external: list[str] = []
        self._cells: list[str] | None = None
        self._in: str | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            src = attrs["src"]
            assert src.startswith("data:image/png;base64,"), src[:40]
            self.images[attrs["alt"]] = base64.b64decode(src.split(",", 1)[1], validate=True)
        if tag in ("script", "link") or (tag != "img" and attrs.get("src")):
            self.external.append(tag)
        if tag == "tr":
            self._cells = []
            self.grid.append([])
        if tag in ("td", "th", "h2"):
            self._in = tag
            if tag in ("td", "th"):
                self.grid[-1].append("")
            if tag == "td":
                self._cells.append("")
            else:
                self.headings.append("")

    def handle_endtag(self, tag):
        if tag == "tr" and self._cells:
            self.rows[self._cells[0]] = self._cells[1]
            self._cells = None
        if tag in ("td", "th", "h2"):
            self._in = None

    def handle_data(self, data):
        if self._in in ("td", "th"):
            self.grid[-1][-1] += data
        if self._in == "td":
            self._cells[-1] += data
        elif self._in == "h2":
            self.headings[-1] += data


def check_plot(png: bytes, title: str) -> tuple[int, int]:
    """A real plot: PNG magic, over 5 KB, a plot's dimensions, many colours. Its (width, height)."""
    from matplotlib import image

    assert png.startswith(PNG_MAGIC), title
    assert len(png) > 5_000, (title, len(png))
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert 400 <= width <= 2000 and 200 <= height <= 2000, (title, width, height)
    pixels = image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (height, width)
    colours = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}
    assert len(colours) > 20, (title, len(colours))  # not one colour, not a blank frame
    return width, height
