"""Render the bundled sample pages and the local dataset built from them.

The OCR scripts need a handful of real-looking page images to smoke-test against without the Hub: this
script draws twelve synthetic document pages (prose, two columns, ruled tables, lists, a monospace listing,
a "scanned" look) in the mix of formats, sizes and colour modes that real page datasets carry, writes them to
`pages/`, and packs the untouched file bytes into a parquet dataset under `dataset/` that
`datasets.load_dataset("samples/dataset", split="train")` reads. Everything is seeded and free of
timestamps, so a rerun rewrites identical bytes.

Usage: python samples/make_samples.py [--out DIR]   (DIR defaults to the folder holding this script)
"""

from __future__ import annotations

import argparse
import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, Features, Value
from datasets import Image as ImageFeature
from PIL import Image, ImageColor, ImageDraw, ImageFilter, ImageFont

HERE = Path(__file__).resolve().parent
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FACES = {
    "serif": "DejaVuSerif.ttf",
    "sans": "DejaVuSans.ttf",
    "bold": "DejaVuSans-Bold.ttf",
    "mono": "DejaVuSansMono.ttf",
}
SEED = 20240601
PAPER, SCAN_PAPER = "#ffffff", "#f3eee0"
INK, ACCENT, MUTED, RULE = "#1b1b1f", "#1f3a5f", "#5a5d63", "#44474d"
HEADER_FILL, ZEBRA_FILL, CODE_FILL = "#dce3ee", "#f2f4f7", "#eeeeee"
SAVE_OPTIONS: dict[str, dict[str, object]] = {
    "jpeg": {"quality": 85, "optimize": True},
    "png": {"optimize": True},
    "webp": {"quality": 80, "method": 6},
}
PARQUET_NAME = "train-00000-of-00001.parquet"
DATASET_CARD = """\
---
pretty_name: vLLM OCR sample pages
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---

# Sample pages

Twelve synthetic document pages (reports, a two-column newsletter, ruled tables, lists, a letter, a code
listing, two with a scanned look) rendered with DejaVu fonts, in JPEG, PNG and WebP, grayscale and RGB,
portrait and landscape, 1 to 3 megapixels. The `image` column holds the original file bytes, unchanged;
`page_id`, `format`, `width` and `height` describe each page. All text is made up. It exists so the OCR
scripts can be smoke-tested offline; `samples/make_samples.py` rebuilds it, byte for byte.
"""

Font = ImageFont.FreeTypeFont | ImageFont.ImageFont

P_SURVEY = (
    "The Alder Creek survey began in early spring, when snowmelt had already lifted the water level by "
    "nearly forty centimetres. Our team of six walked the eastern bank from the old mill weir to the "
    "confluence with the Marten River, recording channel width, bank erosion and the condition of every "
    "culvert along the way. The notes that follow summarise what we found and what we propose to do next "
    "season."
)
P_EROSION = (
    "Most of the erosion is concentrated in a single bend below the footbridge, where the current has "
    "undercut the bank by almost two metres since the last survey. Willow cuttings planted there four years "
    "ago have taken root on the upper slope but not at the waterline, which suggests that the planting was "
    "done too late in the year. We recommend a second planting in March, backed by a low stone toe."
)
P_WATER = (
    "Water samples were taken at five stations and analysed by the county laboratory within twenty-four "
    "hours. Dissolved oxygen remained above eight milligrams per litre at every station, and turbidity was "
    "low except immediately downstream of the quarry outfall. Nitrate levels were slightly higher than in "
    "the previous year, which is consistent with the wet autumn and the new orchards on the northern terrace."
)
P_CULVERT = (
    "The culvert under the county road is the most pressing concern. Its outlet is now perched about forty "
    "centimetres above the pool below it, which prevents young trout from moving upstream during low flow. "
    "Replacing it with an open-bottom arch would restore passage and reduce the risk of the road flooding "
    "during storms. The highway office has agreed in principle to share the cost."
)
P_VOLUNTEERS = (
    "Volunteers gave more than three hundred hours to the project this year. Schools from Millbrook and "
    "East Harlow adopted two stretches of the creek, clearing litter and photographing the same points each "
    "month so that changes in the vegetation can be compared over time. Their photographs have already "
    "helped to date the collapse of the bank near the footbridge."
)
P_NEXT = (
    "Next season the survey will extend upstream to the headwater springs, which have not been mapped in "
    "detail since 1987. We also intend to install two automatic water level loggers, one at the mill weir "
    "and one at the confluence, so that flood peaks are recorded without waiting for a volunteer to reach "
    "the site. Funding for both loggers has been requested from the regional conservation trust."
)
LETTER = (
    "I am writing on behalf of the Alder Creek Watershed Trust to ask whether you would allow a small team "
    "of our volunteers to visit the springs on your land during the coming spring. The springs feed the "
    "upper reaches of the creek, and they have not been mapped in detail since 1987.",
    "The survey would involve two or three visits of a few hours each, on foot and always in daylight. We "
    "would record the position of each spring, measure its flow with a bucket and stopwatch, and take a "
    "small water sample for the county laboratory. Nothing would be dug, cut or left behind, and we would "
    "keep to whichever routes and gates you prefer.",
    "We will of course share the results with you, together with a copy of the map. If it would help, I "
    "should be glad to call and explain the work in person before any visit is arranged. You can reach me "
    "on 01632 960418 or at the address above.",
)
WATER_HEADER = ("Station", "Location", "Temp (°C)", "DO (mg/L)", "pH", "Turbidity (NTU)", "Nitrate (mg/L)")
WATER_ROWS = (
    ("AC-1", "Mill weir", 11.2, 9.7, 7.4, 2.3, 1.6),
    ("AC-2", "Footbridge bend", 11.9, 9.1, 7.5, 3.0, 2.1),
    ("AC-3", "Quarry outfall, downstream", 12.4, 8.6, 7.9, 14.7, 2.4),
    ("AC-4", "County road culvert", 12.8, 8.9, 7.6, 4.2, 2.7),
    ("AC-5", "Marten confluence", 13.1, 8.3, 7.7, 3.8, 2.9),
)
INVOICE_ROWS = (
    ("Limestone rock armour, 150–300 mm", "18 t", 46.50),
    ("Delivery to Mill Lane access point", "2", 85.00),
    ("Placing stone toe, footbridge bend", "14 h", 52.00),
    ("Willow stakes, 1.8 m, bundle of 25", "6", 32.50),
    ("Coir erosion matting, 2 m × 25 m roll", "3", 118.00),
    ("Site reinstatement and waste removal", "1", 140.00),
)
VOLUNTEER_HEADER = ("Month", "Clean-up", "Photo points", "Planting", "Surveys", "Total")
VOLUNTEER_ROWS = (
    ("March", 12, 6, 28, 4),
    ("April", 18, 8, 14, 10),
    ("May", 22, 8, 0, 16),
    ("June", 15, 9, 0, 21),
    ("July", 10, 8, 0, 12),
    ("August", 9, 7, 0, 8),
    ("September", 14, 8, 0, 11),
    ("October", 20, 9, 6, 5),
)
AGENDA = (
    "The minutes of the meeting held on 11 September were approved without amendment.",
    "The treasurer reported a balance of £6,412.18 after payment of the stone and matting invoice, and "
    "confirmed that the conservation trust grant will be paid in two instalments.",
    "The chair summarised the meeting with the highway office. The culvert replacement is planned for "
    "August next year, subject to approval of a fish passage design.",
    "Trustees agreed to extend the survey to the headwater springs and to seek landowner permission before "
    "the end of January.",
    "The schools programme will continue, and a third school will be invited in the spring term.",
    "Any other business: the footbridge handrail is loose and has been reported to the parish council.",
)
ACTIONS = (
    "D. Lindqvist to write to the three headwater landowners.",
    "S. Patel to order two water level loggers once the grant is received.",
    "M. Barnes to arrange the March willow planting and book the stone delivery.",
    "J. Whitcombe to update the volunteer rota and the photo point guide.",
)
CHECKLIST = (
    (
        "Measurement",
        (
            ("Tape measure, 30 m", True),
            ("Ranging poles (2)", True),
            ("Flow bucket, 10 litre, marked", True),
            ("Stopwatch", False),
            ("Dissolved oxygen meter and spare cells", True),
            ("pH and conductivity pens, calibrated", False),
        ),
    ),
    (
        "Sampling",
        (
            ("Sample bottles, labelled AC-1 to AC-5", True),
            ("Cool box with ice packs", False),
            ("Chain-of-custody forms", True),
        ),
    ),
    (
        "Safety",
        (
            ("First aid kit", True),
            ("Waders and wading stick", True),
            ("Throw line", False),
            ("Mobile phone, charged", True),
            ("Site contact sheet", False),
        ),
    ),
)
LOGGER_CONFIG = """\
# Alder Creek water level loggers, firmware 2.4
[logger MW-01]
site        = "Mill weir, left abutment"
interval    = 15          # minutes
sensor      = "pressure, vented"
offset_mm   = -42
alarm_high  = 1.85        # metres above datum
alarm_low   = 0.20

[logger CF-02]
site        = "Marten confluence, gauge post"
interval    = 15
sensor      = "pressure, vented"
offset_mm   = 17
alarm_high  = 2.40
alarm_low   = 0.35

[upload]
schedule    = "daily 02:30"
retries     = 3
format      = "csv"
columns     = ["time_utc", "level_m", "temp_c", "battery_v"]"""
GLOSSARY = (
    ("Confluence", "The point where two watercourses meet; here, where Alder Creek joins the Marten River."),
    ("Culvert", "A pipe or box channel that carries a stream beneath a road, track or embankment."),
    ("Dissolved oxygen", "Oxygen held in the water, in milligrams per litre; trout need at least six."),
    ("Headwater", "The uppermost part of a stream, including the springs and seepages that feed it."),
    ("Nitrate", "A form of nitrogen that reaches streams mainly from fertiliser and manure."),
    ("Outfall", "The point at which a pipe or drain discharges into the stream."),
    ("Perched culvert", "A culvert whose outlet sits above the water below it, so fish cannot enter it."),
    ("Riparian zone", "The strip of land along the bank whose plants shade the water and hold the soil."),
    ("Toe", "The foot of a bank, where it meets the channel bed and where erosion usually starts."),
    ("Turbidity", "The cloudiness of water caused by silt or algae, in nephelometric turbidity units."),
    ("Weir", "A low wall across a stream that raises the water upstream, often built to feed a mill."),
)


@functools.cache
def load_font(face: str, size: int) -> Font:
    """A DejaVu face at `size` px, or Pillow's built-in font where DejaVu is not installed."""
    try:
        return ImageFont.truetype(str(FONT_DIR / FACES[face]), size)
    except OSError:
        return ImageFont.load_default(size=size)


def wrap(text: str, font: Font, width: float) -> list[str]:
    """Greedy word wrap of `text` into lines no wider than `width` pixels."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return [*lines, line] if line else lines


@dataclass
class Canvas:
    """One page being drawn; sizes derive from the page's short side, so every layout scales."""

    image: Image.Image
    number: int
    footer: str
    draw: ImageDraw.ImageDraw = field(init=False)

    def __post_init__(self) -> None:
        self.draw = ImageDraw.Draw(self.image)
        self.unit = round(min(self.image.size) * 0.018)
        self.margin = round(self.image.width * 0.085)

    @property
    def inner_width(self) -> int:
        return self.image.width - 2 * self.margin

    def font(self, face: str, scale: float = 1.0) -> Font:
        return load_font(face, round(self.unit * scale))

    def line_height(self, scale: float = 1.0) -> int:
        return round(self.unit * scale * 1.45)

    def text(
        self,
        xy: tuple[float, float],
        text: str,
        face: str = "sans",
        scale: float = 1.0,
        *,
        fill: str = INK,
        anchor: str = "la",
    ) -> None:
        self.draw.text(xy, text, font=self.font(face, scale), fill=fill, anchor=anchor)

    def heading(self, text: str, y: int, scale: float = 1.3, x: int | None = None) -> int:
        self.text((self.margin if x is None else x, y), text, "bold", scale, fill=ACCENT)
        return y + round(self.line_height(scale) * 1.25)

    def paragraph(
        self,
        text: str,
        y: int,
        x: int | None = None,
        width: int | None = None,
        *,
        face: str = "serif",
        scale: float = 1.0,
        gap: float = 0.5,
    ) -> int:
        """Draw wrapped `text`; returns the y below it plus `gap` lines of spacing."""
        x = self.margin if x is None else x
        font = self.font(face, scale)
        for line in wrap(text, font, width or self.inner_width):
            self.draw.text((x, y), line, font=font, fill=INK)
            y += self.line_height(scale)
        return y + round(self.line_height(scale) * gap)

    def rule(self, y: int, width: int = 2) -> None:
        self.draw.line((self.margin, y, self.image.width - self.margin, y), fill=RULE, width=width)

    def finish(self) -> None:
        """Footer: a thin rule, the document name on the left and the page number on the right."""
        y = self.image.height - round(self.margin * 0.75)
        self.rule(y - self.unit // 2, width=1)
        self.text((self.margin, y), self.footer, scale=0.75, fill=MUTED)
        self.text((self.image.width - self.margin, y), f"Page {self.number}", scale=0.75, anchor="ra")


def table(c: Canvas, y: int, rows: Sequence[Sequence[str]], widths: Sequence[float], align: str) -> int:
    """A ruled table; `rows[0]` is the header, `widths` are fractions of the text width, `align` is l/r per
    column. Returns the y below it."""
    row_h = round(c.unit * 2.1)
    cols = [round(c.inner_width * w) for w in widths]
    edges = [c.margin + sum(cols[:i]) for i in range(len(cols) + 1)]
    bottom = y + row_h * len(rows)
    for i in range(len(rows)):
        fill = HEADER_FILL if i == 0 else ZEBRA_FILL if i % 2 == 0 else None
        if fill:
            c.draw.rectangle((edges[0], y + i * row_h, edges[-1], y + (i + 1) * row_h), fill=fill)
    for i, row in enumerate(rows):
        for cell, left, right, side in zip(row, edges[:-1], edges[1:], align, strict=True):
            x, anchor = (left + c.unit * 0.6, "lm") if side == "l" else (right - c.unit * 0.6, "rm")
            c.text((x, y + i * row_h + row_h / 2), cell, "bold" if i == 0 else "sans", 0.9, anchor=anchor)
    for i in range(len(rows) + 1):
        c.draw.line((edges[0], y + i * row_h, edges[-1], y + i * row_h), fill=RULE, width=3 if i < 2 else 1)
    for x in edges:
        c.draw.line((x, y, x, bottom), fill=RULE, width=1)
    c.draw.rectangle((edges[0], y, edges[-1], bottom), outline=RULE, width=3)
    return bottom + c.unit * 2


def item_list(c: Canvas, y: int, items: Sequence[str], marker: Callable[[int], str]) -> int:
    """Numbered or bulleted items with a hanging indent; `marker(n)` labels item n (from 1)."""
    indent = round(c.unit * 2.2)
    for n, item in enumerate(items, 1):
        c.text((c.margin, y), marker(n), "serif")
        y = c.paragraph(item, y, c.margin + indent, c.inner_width - indent, gap=0.3)
    return y + c.unit


def checkbox(c: Canvas, x: int, y: int, ticked: bool) -> None:
    box = round(c.unit * 1.1)
    c.draw.rectangle((x, y, x + box, y + box), outline=INK, width=2)
    if ticked:
        c.draw.line((x + 4, y + box // 2, x + box // 2.5, y + box - 4, x + box + 6, y - 8), fill=INK, width=4)


def report(c: Canvas) -> None:
    y = c.heading("Alder Creek Survey 2023", c.margin, scale=2.2)
    c.text((c.margin, y), "Annual report of the Alder Creek Watershed Trust", "serif", 1.2, fill=MUTED)
    y += c.line_height(1.2) * 2
    c.rule(y - c.unit)
    y = c.heading("1. Summary", y)
    y = c.paragraph(P_SURVEY, y)
    y = c.paragraph(P_EROSION, y)
    y = c.heading("2. Water quality", y)
    y = c.paragraph(P_WATER, y)
    y = c.heading("3. Culverts", y)
    c.paragraph(P_CULVERT, y)


def newsletter(c: Canvas) -> None:
    c.text((c.margin, c.margin), "THE CREEK LINE", "bold", 3.2, fill=ACCENT)
    y = c.margin + c.line_height(3.2)
    c.text((c.margin, y), "Newsletter of the Alder Creek Watershed Trust  ·  Issue 14  ·  Autumn 2023", "serif")
    y += c.line_height() * 2
    c.rule(y - c.unit, width=4)
    gap = c.unit * 2
    width = (c.inner_width - gap) // 2
    stories = (
        (
            ("Culvert replacement agreed", P_CULVERT),
            ("Schools adopt the creek", P_VOLUNTEERS),
            ("", P_SURVEY),
        ),
        (
            ("Plans for next season", P_NEXT),
            ("Willows at the footbridge", P_EROSION),
            ("From the lab", P_WATER),
        ),
    )
    for column, x in zip(stories, (c.margin, c.margin + width + gap), strict=True):
        column_y = y
        for title, text in column:
            column_y = c.heading(title, column_y, 1.15, x) if title else column_y
            column_y = c.paragraph(text, column_y, x, width)
    c.draw.line((c.margin + width + gap // 2, y, c.margin + width + gap // 2, column_y), fill=MUTED, width=1)


def water_table(c: Canvas) -> None:
    y = c.heading("Table 2. Water quality at the five sampling stations, 12 June 2023", c.margin, 1.4)
    means = [f"{sum(r[i] for r in WATER_ROWS) / len(WATER_ROWS):.1f}" for i in range(2, 7)]
    rows = [
        WATER_HEADER,
        *((r[0], r[1], *(f"{v:.1f}" for v in r[2:])) for r in WATER_ROWS),
        ("Mean", "", *means),
    ]
    y = table(c, y, rows, (0.09, 0.25, 0.12, 0.12, 0.08, 0.17, 0.17), "llrrrrr")
    c.paragraph(
        "DO: dissolved oxygen. Samples were taken between 09:00 and 11:30 and analysed by the county "
        "laboratory the same day. The high turbidity at AC-3 reflects washings from the quarry's settling "
        "pond.",
        y,
        face="sans",
        scale=0.85,
    )


def minutes(c: Canvas) -> None:
    y = c.heading("Minutes of the Trustees' Meeting", c.margin, 1.8)
    y = c.paragraph("Millbrook Village Hall, Monday 9 October 2023, 7.30 pm", y, face="sans")
    y = c.paragraph(
        "Present: R. Okafor (chair), D. Lindqvist, M. Barnes, S. Patel, J. Whitcombe. Apologies: H. Tran.", y
    )
    y = item_list(c, y, AGENDA, lambda n: f"{n}.")
    y = c.heading("Actions", y, 1.2)
    y = item_list(c, y, ACTIONS, lambda _: "•")
    c.paragraph("Next meeting: Monday 13 November 2023, 7.30 pm.", y, face="sans")


def letter(c: Canvas) -> None:
    c.text((c.margin, c.margin), "Alder Creek Watershed Trust", "bold", 1.6, fill=ACCENT)
    y = c.margin + c.line_height(1.6)
    c.text((c.margin, y), "The Old Mill, Mill Lane, Millbrook  MB4 7QT", "sans", 0.85, fill=MUTED)
    y += c.line_height() * 3
    c.text((c.image.width - c.margin, y), "16 October 2023", "serif", anchor="ra")
    for line in ("Mr and Mrs Hale", "Upper Fold Farm", "Alder Lane", "East Harlow  EH2 9LP"):
        y = c.paragraph(line, y, gap=0)
    y = c.paragraph("Dear Mr and Mrs Hale,", y + c.line_height(), gap=1)
    y = c.paragraph("Survey of the headwater springs", y, face="bold", gap=1)
    for text in LETTER:
        y = c.paragraph(text, y, gap=1)
    y = c.paragraph("Yours sincerely,", y, gap=3)
    y = c.paragraph("Daniel Lindqvist", y, gap=0)
    c.paragraph("Survey coordinator", y)


def invoice(c: Canvas) -> None:
    c.text((c.margin, c.margin), "INVOICE", "bold", 2.6, fill=ACCENT)
    c.text((c.image.width - c.margin, c.margin), "Harlow Stone & Landscape Ltd", "bold", 1.1, anchor="ra")
    y = c.margin + c.line_height(2.6) * 2
    for label, value in (
        ("Invoice no.", "HSL-2023-0417"),
        ("Date", "2 October 2023"),
        ("Due", "1 November 2023"),
    ):
        c.text((c.margin, y), label, "bold")
        c.text((c.margin + c.unit * 9, y), value)
        y += c.line_height()
    y = c.paragraph("Bill to: Alder Creek Watershed Trust, The Old Mill, Mill Lane, Millbrook", y + c.unit, gap=1.5)
    amounts = [float(qty.split()[0]) * price for _, qty, price in INVOICE_ROWS]
    rows = [("Description", "Qty", "Unit price (£)", "Amount (£)")]
    rows += [(d, q, f"{p:,.2f}", f"{a:,.2f}") for (d, q, p), a in zip(INVOICE_ROWS, amounts, strict=True)]
    y = table(c, y, rows, (0.52, 0.12, 0.18, 0.18), "lrrr")
    subtotal = sum(amounts)
    for label, value in (
        ("Subtotal", subtotal),
        ("VAT at 20%", subtotal * 0.2),
        ("Total due", subtotal * 1.2),
    ):
        face = "bold" if label == "Total due" else "sans"
        c.text((c.margin + c.inner_width * 0.64, y), label, face)
        c.text((c.image.width - c.margin - c.unit * 0.6, y), f"£{value:,.2f}", face, anchor="ra")
        y += c.line_height() + c.unit // 2
    c.paragraph("Payment by bank transfer within 30 days, quoting the invoice number.", y + c.unit * 2)


def logger_config(c: Canvas) -> None:
    y = c.heading("Appendix C. Logger configuration", c.margin, 1.5)
    y = c.paragraph(
        "Both loggers read the same file at start-up. Levels are stored in metres above the local datum; "
        "the offsets correct for the height of each sensor above its mounting bracket.",
        y,
        gap=1,
    )
    lines = LOGGER_CONFIG.splitlines()
    box_bottom = y + c.line_height(0.9) * len(lines) + c.unit * 2
    c.draw.rectangle((c.margin, y, c.image.width - c.margin, box_bottom), fill=CODE_FILL, outline=MUTED)
    for line in lines:
        y += c.line_height(0.9)
        c.text((c.margin + c.unit, y - c.unit * 0.3), line, "mono", 0.9)


def field_notes(c: Canvas) -> None:
    y = c.heading("Field notes: the footbridge bend", c.margin, 1.8)
    y = c.paragraph("Recorded 3 May 2023 by M. Barnes and S. Patel", y, face="sans", scale=0.9, gap=1)
    y = c.paragraph(P_EROSION, y)
    y = c.paragraph(P_CULVERT, y, gap=1.5)
    depths = (0, 0.05, 0.12, 0.55, 0.85, 0.9, 0.82, 0.6, 0.35, 0.1, 0.0)
    height, step = c.unit * 8, c.inner_width / (len(depths) - 1)
    points = [(c.margin + i * step, y + height * d) for i, d in enumerate(depths)]
    c.draw.line((c.margin, y + height * 0.35, c.image.width - c.margin, y + height * 0.35), fill=ACCENT, width=2)
    c.draw.line(points, fill=INK, width=4)
    y = c.paragraph(
        "Figure 3. Cross-section of the channel 12 m below the footbridge, looking downstream; the blue line "
        "marks the water level on the day. Vertical scale exaggerated five times.",
        y + height + c.unit * 2,
        face="sans",
        scale=0.85,
    )
    c.paragraph(P_SURVEY, y)


def checklist(c: Canvas) -> None:
    y = c.heading("Equipment checklist: spring survey", c.margin, 1.8)
    y = c.paragraph("Check each item before leaving the store and again on return.", y, gap=1)
    for section, items in CHECKLIST:
        y = c.heading(section, y, 1.2)
        for text, ticked in items:
            checkbox(c, c.margin, y, ticked)
            c.text((c.margin + c.unit * 2.5, y - c.unit * 0.1), text, "serif")
            y += round(c.line_height() * 1.5)
        y += c.unit
    c.paragraph("Checked by: ______________________    Date: ____________", y + c.unit * 2)


def volunteer_table(c: Canvas) -> None:
    y = c.heading("Volunteer hours by month, 2023", c.margin, 1.8)
    y = c.paragraph(P_VOLUNTEERS, y, gap=1)
    rows = [(*r, sum(r[1:])) for r in VOLUNTEER_ROWS]
    totals = ("Total", *(sum(r[i] for r in rows) for i in range(1, 6)))
    cells = [VOLUNTEER_HEADER, *(tuple(str(v) for v in r) for r in (*rows, totals))]
    y = table(c, y, cells, (0.24, 0.15, 0.19, 0.14, 0.14, 0.14), "lrrrrr")
    c.paragraph(P_NEXT, y)


def article(c: Canvas) -> None:
    y = c.heading("Looking ahead to the headwaters", c.margin, 2.2)
    y = c.paragraph("By Daniel Lindqvist, survey coordinator", y, face="sans", gap=1)
    for text in (P_NEXT, P_WATER, P_VOLUNTEERS, P_CULVERT):
        y = c.paragraph(text, y, scale=1.25, gap=0.8)


def glossary(c: Canvas) -> None:
    y = c.heading("Glossary", c.margin, 1.8)
    c.rule(y - c.unit // 2)
    gap = c.unit * 3
    width = (c.inner_width - gap) // 2
    half = (len(GLOSSARY) + 1) // 2
    for entries, x in zip((GLOSSARY[:half], GLOSSARY[half:]), (c.margin, c.margin + width + gap), strict=True):
        column_y = y + c.unit
        for term, definition in entries:
            c.text((x, column_y), term, "bold")
            column_y = c.paragraph(definition, column_y + c.line_height(), x, width, gap=0.6)


@dataclass(frozen=True)
class PageSpec:
    slug: str
    size: tuple[int, int]
    fmt: str
    mode: str
    layout: Callable[[Canvas], None]
    footer: str
    tilt: float | None = None
    """Degrees of rotation for a scanned look (off-white paper, blur, noise); None for a clean page."""


PAGES = (
    PageSpec("report", (1240, 1754), "png", "L", report, "Alder Creek Survey 2023"),
    PageSpec("newsletter", (1448, 2048), "jpeg", "RGB", newsletter, "The Creek Line, Issue 14"),
    PageSpec("water-table", (1654, 1169), "png", "RGB", water_table, "Alder Creek Survey 2023"),
    PageSpec("minutes", (1000, 1400), "webp", "RGB", minutes, "Trustees' minutes, October 2023"),
    PageSpec("scanned-letter", (1240, 1754), "jpeg", "L", letter, "Alder Creek Watershed Trust", tilt=0.8),
    PageSpec("invoice", (1240, 1754), "webp", "RGB", invoice, "Harlow Stone & Landscape Ltd"),
    PageSpec("logger-config", (1000, 1400), "png", "L", logger_config, "Alder Creek Survey 2023"),
    PageSpec("field-notes", (2048, 1448), "webp", "RGB", field_notes, "Alder Creek Survey 2023"),
    PageSpec("scanned-checklist", (1448, 2048), "jpeg", "RGB", checklist, "Survey handbook", tilt=-1.1),
    PageSpec("volunteer-table", (1448, 2048), "png", "L", volunteer_table, "Alder Creek Survey 2023"),
    PageSpec("article", (1000, 1400), "jpeg", "RGB", article, "The Creek Line, Issue 14"),
    PageSpec("glossary", (1654, 1169), "webp", "RGB", glossary, "Alder Creek Survey 2023"),
)


@dataclass(frozen=True)
class PageFile:
    stem: str
    spec: PageSpec
    data: bytes

    @property
    def name(self) -> str:
        return f"{self.stem}.{'jpg' if self.spec.fmt == 'jpeg' else self.spec.fmt}"


def scan(image: Image.Image, tilt: float, seed: int) -> Image.Image:
    """Make a clean page look scanned: slight rotation, softening and light gaussian sensor noise."""
    paper = ImageColor.getcolor(SCAN_PAPER, image.mode)
    rotated = image.rotate(tilt, resample=Image.Resampling.BICUBIC, fillcolor=paper)
    pixels = np.asarray(rotated.filter(ImageFilter.GaussianBlur(0.8)), dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0.0, 5.0, pixels.shape[:2]).astype(np.float32)
    noisy = pixels + (noise[..., None] if pixels.ndim == 3 else noise)
    return Image.fromarray(np.clip(np.rint(noisy), 0, 255).astype(np.uint8))


def render(spec: PageSpec, number: int) -> Image.Image:
    image = Image.new(spec.mode, spec.size, PAPER if spec.tilt is None else SCAN_PAPER)
    canvas = Canvas(image, number, spec.footer)
    spec.layout(canvas)
    canvas.finish()
    return image if spec.tilt is None else scan(image, spec.tilt, SEED + number)


def encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt.upper(), **SAVE_OPTIONS[fmt])
    return buffer.getvalue()


def write_pages(pages_dir: Path) -> list[PageFile]:
    """Render, encode and write every page; returns what was written, bytes included."""
    pages_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, spec in enumerate(PAGES, 1):
        page = PageFile(f"page-{number:02d}-{spec.slug}", spec, encode(render(spec, number), spec.fmt))
        (pages_dir / page.name).write_bytes(page.data)
        written.append(page)
    return written


def write_dataset(pages: list[PageFile], dataset_dir: Path) -> None:
    """Pack the page bytes, unchanged, into one parquet file plus the dataset card."""
    features = Features(
        {
            "image": ImageFeature(),
            "page_id": Value("string"),
            "format": Value("string"),
            "width": Value("int32"),
            "height": Value("int32"),
        }
    )
    rows = [
        {
            "image": {"bytes": page.data, "path": page.name},
            "page_id": page.stem,
            "format": page.spec.fmt,
            "width": page.spec.size[0],
            "height": page.spec.size[1],
        }
        for page in pages
    ]
    (dataset_dir / "data").mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows, features=features).to_parquet(str(dataset_dir / "data" / PARQUET_NAME))
    (dataset_dir / "README.md").write_text(DATASET_CARD, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for pages/ and dataset/ (default: %(default)s)")
    out = parser.parse_args().out
    pages = write_pages(out / "pages")
    write_dataset(pages, out / "dataset")
    megabytes = sum(len(page.data) for page in pages) / 1e6
    print(f"wrote {len(pages)} pages ({megabytes:.2f} MB) to {out / 'pages'}, dataset to {out / 'dataset'}")


if __name__ == "__main__":
    main()
