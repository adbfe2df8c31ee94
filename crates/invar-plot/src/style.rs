//! The one look of invar's figures: sizes for a paper's column (3.5 in at 300 dpi), font sizes that
//! stay legible there, a colour-blind-safe palette (Okabe–Ito), line styles that differ in more than
//! colour (dash and marker, so a grey-scale print still tells the lines apart), and a legend drawn
//! in its own strip under the data, never over it.

use plotters::coord::Shift;
use plotters::prelude::*;

/// A paper's column width in pixels: 3.5 in at 300 dpi.
pub const COLUMN_PX: u32 = 1050;
/// A figure's title.
pub const TITLE_PX: u32 = 34;
/// Axis descriptions (what an axis measures, with its unit).
pub const LABEL_PX: u32 = 30;
/// Tick labels.
pub const TICK_PX: u32 = 26;
/// Legend entries and text drawn in the data area (EER values, reference-line names).
pub const LEGEND_PX: u32 = 26;
/// Stroke width of data lines.
pub const LINE_PX: u32 = 4;
/// The font every figure names; invar-plot registers it (`register_fonts`).
pub const FAMILY: &str = "sans-serif";

/// Okabe & Ito's palette for colour-blind readers ("Color Universal Design", 2008), without its
/// yellow (unreadable on white): blue, vermillion, bluish green, reddish purple, orange, sky blue,
/// black.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// Reference lines (chance, the DET diagonal) and grid: mid grey.
pub const REFERENCE: RGBColor = RGBColor(120, 120, 120);

/// The `i`-th colour of [`PALETTE`], cycling.
pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How a line's stroke is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    /// Long dashes.
    Dashed,
    /// Short dashes close together.
    Dotted,
}

/// The mark drawn at each data point of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    None,
    Circle,
    Square,
    Triangle,
    Diamond,
}

/// A line's look: colour, dash and marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub colour: RGBColor,
    pub dash: Dash,
    pub marker: Marker,
}

impl Line {
    /// The `i`-th of a set of lines that must be told apart without colour: colour, marker and
    /// dash all change with `i`.
    pub fn nth(i: usize) -> Line {
        const MARKERS: [Marker; 4] = [
            Marker::Circle,
            Marker::Square,
            Marker::Triangle,
            Marker::Diamond,
        ];
        const DASHES: [Dash; 3] = [Dash::Solid, Dash::Dashed, Dash::Dotted];
        Line {
            colour: colour(i),
            dash: DASHES[i % DASHES.len()],
            marker: MARKERS[i % MARKERS.len()],
        }
    }
}

/// `(dash, gap)` lengths in pixels of a broken stroke.
fn dash_pattern(dash: Dash) -> Option<(u32, u32)> {
    match dash {
        Dash::Solid => None,
        Dash::Dashed => Some((18, 10)),
        Dash::Dotted => Some((5, 7)),
    }
}

/// Radius in pixels of a data-point marker.
const MARKER_PX: i32 = 8;

/// Draws `marker` centred on the backend point `at` of `area`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    marker: Marker,
    colour: RGBColor,
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let (x, y) = at;
    let r = MARKER_PX;
    let fill = colour.filled();
    match marker {
        Marker::None => Ok(()),
        Marker::Circle => area.draw(&Circle::new((x, y), r, fill)).map_err(|v| e(&v)),
        Marker::Square => {
            let s = r * 7 / 8;
            area.draw(&Rectangle::new([(x - s, y - s), (x + s, y + s)], fill))
                .map_err(|v| e(&v))
        }
        Marker::Triangle => area
            .draw(&Polygon::new(
                vec![(x, y - r - 1), (x - r, y + r - 2), (x + r, y + r - 2)],
                fill,
            ))
            .map_err(|v| e(&v)),
        Marker::Diamond => area
            .draw(&Polygon::new(
                vec![(x, y - r - 1), (x + r, y), (x, y + r + 1), (x - r, y)],
                fill,
            ))
            .map_err(|v| e(&v)),
    }
}

/// Draws a polyline through `points`, pixels relative to `area`'s corner, with `line`'s stroke
/// and, if `markers`, its marker at each point. (On the whole figure's area, the pixels a chart's
/// `backend_coord` gives.)
pub fn draw_polyline<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    points: &[(i32, i32)],
    line: &Line,
    markers: bool,
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let style = line.colour.stroke_width(LINE_PX);
    match dash_pattern(line.dash) {
        None => area
            .draw(&PathElement::new(points.to_vec(), style))
            .map_err(|v| e(&v))?,
        Some((on, off)) => {
            // Walk the polyline, emitting `on` pixels of stroke then skipping `off`, carrying the
            // phase across vertices so short segments keep the pattern.
            let mut phase = 0.0f64;
            let period = f64::from(on + off);
            for w in points.windows(2) {
                let (a, b) = (w[0], w[1]);
                let (dx, dy) = (f64::from(b.0 - a.0), f64::from(b.1 - a.1));
                let len = (dx * dx + dy * dy).sqrt();
                let mut t = 0.0f64;
                while t < len {
                    let in_period = phase % period;
                    let (step, drawing) = if in_period < f64::from(on) {
                        (f64::from(on) - in_period, true)
                    } else {
                        (period - in_period, false)
                    };
                    let end = (t + step).min(len);
                    if drawing && end > t {
                        let p = |s: f64| {
                            (
                                a.0 + (dx * s / len).round() as i32,
                                a.1 + (dy * s / len).round() as i32,
                            )
                        };
                        area.draw(&PathElement::new(vec![p(t), p(end)], style))
                            .map_err(|v| e(&v))?;
                    }
                    phase += end - t;
                    t = end;
                }
            }
        }
    }
    if markers {
        for &p in points {
            draw_marker(area, p, line.marker, line.colour)?;
        }
    }
    Ok(())
}

/// One legend entry: a label and the line it names.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    pub label: String,
    pub line: Line,
    /// Draw the line's marker in the sample (when the data lines carry markers).
    pub marker: bool,
}

/// Length in pixels of the line sample before each legend label.
const SAMPLE_PX: u32 = 70;
/// Height of one legend row.
const ROW_PX: u32 = LEGEND_PX + 14;

/// The largest font size up to `max` at which `text` fits in `width` pixels (at least 16).
pub fn fitting_size(text: &str, width: u32, max: u32) -> u32 {
    let mut size = max;
    while size > 16 && text_width(text, size) > width {
        size -= 2;
    }
    size
}

/// Width in pixels of `text` in the legend's font (an estimate when the font cannot measure).
pub fn text_width(text: &str, size: u32) -> u32 {
    (FAMILY, size)
        .into_font()
        .box_size(text)
        .map(|(w, _)| w)
        .unwrap_or(size * text.chars().count() as u32 * 6 / 10)
}

/// Columns of a legend of `entries` across `width` pixels.
fn legend_columns(entries: &[LegendEntry], width: u32) -> usize {
    let widest = entries
        .iter()
        .map(|e| text_width(&e.label, LEGEND_PX))
        .max()
        .unwrap_or(0);
    let cell = SAMPLE_PX + 14 + widest + 30;
    ((width.saturating_sub(20)) / cell.max(1)).clamp(1, entries.len().max(1) as u32) as usize
}

/// Height in pixels of the strip [`draw_legend`] needs for `entries` across `width`.
pub fn legend_height(entries: &[LegendEntry], width: u32) -> u32 {
    if entries.is_empty() {
        return 0;
    }
    let rows = entries.len().div_ceil(legend_columns(entries, width));
    rows as u32 * ROW_PX + 16
}

/// Draws `entries` in rows and columns filling `area` (a strip outside the data).
pub fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> Result<(), String> {
    if entries.is_empty() {
        return Ok(());
    }
    let (w, _) = area.dim_in_pixel();
    let cols = legend_columns(entries, w);
    let cell = (w.saturating_sub(20)) / cols as u32;
    let font = (FAMILY, LEGEND_PX).into_font().color(&BLACK);
    let style = font.pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Left,
        plotters::style::text_anchor::VPos::Center,
    ));
    for (i, entry) in entries.iter().enumerate() {
        let (r, c) = (i / cols, i % cols);
        let x = 10 + (c as u32 * cell) as i32;
        let y = 8 + (r as u32 * ROW_PX + ROW_PX / 2) as i32;
        draw_polyline(
            area,
            &[(x, y), (x + SAMPLE_PX as i32, y)],
            &entry.line,
            false,
        )?;
        if entry.marker {
            draw_marker(
                area,
                (x + SAMPLE_PX as i32 / 2, y),
                entry.line.marker,
                entry.line.colour,
            )?;
        }
        area.draw_text(&entry.label, &style, (x + SAMPLE_PX as i32 + 14, y))
            .map_err(|v| v.to_string())?;
    }
    Ok(())
}
