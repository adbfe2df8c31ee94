//! One way to draw and save a figure for the whole workspace: a [`Figure`] draws itself on any
//! plotters backend and [`save`] writes it as SVG and PNG (each to a temporary sibling renamed into
//! place, so a failed draw never leaves half a file under the final name). [`Heatmap`] is the matrix
//! plot every crate uses (confusions, ABX by phone pair, the 000 partition), with a colour bar.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{register_fonts, style, Error, Result};

/// Something that can draw itself on any plotters backend.
pub trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws the whole figure on `root`; an error is plotters' message.
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String>;
}

fn draw_err(path: &Path, message: impl ToString) -> Error {
    Error::Draw {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Moves `tmp` to `path`, removing `tmp` when that fails.
fn rename(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        draw_err(path, e)
    })
}

/// Writes `stem.svg` and `stem.png`; returns the two paths.
pub fn save(fig: &impl Figure, stem: &Path) -> Result<Vec<PathBuf>> {
    let svg_path = stem.with_extension("svg");
    register_fonts()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, fig.size()).into_drawing_area();
        fig.draw(&root).map_err(|e| draw_err(&svg_path, e))?;
        root.present().map_err(|e| draw_err(&svg_path, e))?;
    }
    let tmp = stem.with_extension("tmp.svg");
    std::fs::write(&tmp, svg).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        draw_err(&svg_path, e)
    })?;
    rename(&tmp, &svg_path)?;

    let png_path = stem.with_extension("png");
    let tmp = stem.with_extension("tmp.png");
    let drawn = (|| {
        let root = BitMapBackend::new(&tmp, fig.size()).into_drawing_area();
        fig.draw(&root).map_err(|e| draw_err(&png_path, e))?;
        root.present().map_err(|e| draw_err(&png_path, e))?;
        Ok(())
    })();
    if drawn.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    drawn?;
    rename(&tmp, &png_path)?;
    Ok(vec![svg_path, png_path])
}

/// A linear axis with explicit tick positions and their labels (plotters' `WithKeyPoints` cannot be
/// given a label formatter in 0.3).
#[derive(Debug, Clone)]
pub struct KeyAxis {
    pub from: f64,
    pub to: f64,
    pub keys: Vec<f64>,
    pub labels: Vec<String>,
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving at most `max` ticks over `span`.
fn nice_step(span: f64, max: usize) -> f64 {
    let raw = span / max.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

impl KeyAxis {
    /// Whole numbers `first..=last` (epochs): ticks on integers only, at most eight of them,
    /// labelled without decimals; a little room either side.
    pub fn integers(first: i64, last: i64) -> Self {
        let (first, last) = (first.min(last), first.max(last));
        let step = (nice_step((last - first) as f64, 8).round() as i64).max(1);
        let start = first.div_euclid(step) * step;
        let keys: Vec<i64> = (0..)
            .map(|k| start + k * step)
            .take_while(|&v| v <= last)
            .filter(|&v| v >= first)
            .collect();
        let pad = ((last - first) as f64 * 0.03).max(0.3);
        KeyAxis {
            from: first as f64 - pad,
            to: last as f64 + pad,
            labels: keys.iter().map(|k| k.to_string()).collect(),
            keys: keys.iter().map(|&k| k as f64).collect(),
        }
    }

    /// One tick per category at `0, 1, …`, labelled with its name, half a step of room either side.
    pub fn categories(labels: &[String]) -> Self {
        KeyAxis {
            from: -0.5,
            to: labels.len() as f64 - 0.5,
            keys: (0..labels.len()).map(|i| i as f64).collect(),
            labels: labels.to_vec(),
        }
    }

    /// `lo..hi` with at most eight ticks at 1, 2 or 5 times a power of ten, labelled with as many
    /// decimals as the step needs.
    pub fn linear(lo: f64, hi: f64) -> Self {
        let (lo, hi) = if hi > lo {
            (lo, hi)
        } else {
            (lo - 0.5, lo + 0.5)
        };
        let step = nice_step(hi - lo, 8);
        let decimals = (-step.log10().floor()).max(0.0) as usize;
        let mut keys = Vec::new();
        let mut k = (lo / step).ceil();
        while k * step <= hi + 1e-9 * step.abs() {
            keys.push(k * step);
            k += 1.0;
        }
        KeyAxis {
            from: lo,
            to: hi,
            labels: keys.iter().map(|v| format!("{v:.decimals$}")).collect(),
            keys,
        }
    }
}

impl KeyAxis {
    /// A logarithmic axis over `lo..hi` (both > 0, in the data's own units): the positions are
    /// log10 of the values (so a chart's points must be given as `(…, v.log10())`), the ticks at
    /// 1, 2 and 5 times each power of ten inside the range — only the powers of ten when that
    /// gives more than eight — labelled in the data's units ("0.5", "20", "1000"). A tenth of a
    /// decade of room either side. `None` when a bound is not a positive finite number.
    pub fn log10(lo: f64, hi: f64) -> Option<Self> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(lo) && ok(hi)) {
            return None;
        }
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        let (a, b) = (lo.log10(), hi.log10());
        let ticks = |mantissas: &[f64]| -> Vec<f64> {
            let mut v = Vec::new();
            for p in (a.floor() as i32)..=(b.ceil() as i32) {
                for m in mantissas {
                    let t = m * 10f64.powi(p);
                    let l = t.log10();
                    if l >= a - 1e-9 && l <= b + 1e-9 {
                        v.push(t);
                    }
                }
            }
            v
        };
        let mut values = ticks(&[1.0, 2.0, 5.0]);
        if values.len() > 8 {
            values = ticks(&[1.0]);
        }
        if values.len() < 2 {
            values = vec![lo, hi];
            values.dedup();
        }
        let label = |v: f64| {
            let decimals = if v >= 1.0 {
                0
            } else {
                (-v.log10()).ceil().max(0.0) as usize
            };
            format!("{v:.decimals$}")
        };
        Some(KeyAxis {
            from: a - 0.1,
            to: b + 0.1,
            keys: values.iter().map(|v| v.log10()).collect(),
            labels: values.iter().map(|&v| label(v)).collect(),
        })
    }
}

impl Ranged for KeyAxis {
    type FormatOption = plotters::coord::ranged1d::NoDefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = (v - self.from) / (self.to - self.from);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }
    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.keys.clone()
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.from..self.to
    }
}

impl plotters::coord::ranged1d::ValueFormatter<f64> for KeyAxis {
    fn format(_value: &f64) -> String {
        String::new()
    }
    fn format_ext(&self, value: &f64) -> String {
        self.keys
            .iter()
            .position(|k| (k - value).abs() < 1e-9)
            .and_then(|i| self.labels.get(i).cloned())
            .unwrap_or_default()
    }
}

/// A sequential colour map from pale yellow (0) to dark blue (1).
pub fn heat(v: f64) -> RGBColor {
    let v = if v.is_finite() {
        v.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let stops = [
        (255.0, 255.0, 204.0),
        (65.0, 182.0, 196.0),
        (8.0, 29.0, 88.0),
    ];
    let (i, t) = if v < 0.5 {
        (0, v * 2.0)
    } else {
        (1, (v - 0.5) * 2.0)
    };
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(
        mix(stops[i].0, stops[i + 1].0),
        mix(stops[i].1, stops[i + 1].1),
        mix(stops[i].2, stops[i + 1].2),
    )
}

/// How a heat map's values in `[0, 1]` read, in its cells and on its colour bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Error rates and proportions, printed as whole percent.
    Percent,
    /// Weights, printed with two decimals.
    Fraction,
}

impl Scale {
    fn format(self, v: f64) -> String {
        match self {
            Scale::Percent => format!("{:.0}", 100.0 * v),
            Scale::Fraction => format!("{v:.2}"),
        }
    }
}

/// A matrix of values in `[0, 1]` (NaN: an empty cell, drawn grey) with labelled rows and
/// columns, a title and a colour bar naming its unit.
#[derive(Debug, Clone)]
pub struct Heatmap<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub row_labels: &'a [String],
    pub col_labels: &'a [String],
    /// Row-major, `row_labels.len() × col_labels.len()`.
    pub values: Vec<f64>,
    pub scale: Scale,
    /// The colour bar's caption (e.g. "ABX error (%)").
    pub bar_desc: &'a str,
    /// What an empty (NaN, grey) cell means, shown under the colour bar when there is one
    /// (e.g. "no triplets").
    pub empty_desc: &'a str,
}

/// Width of the colour bar's strip on the right.
const BAR: u32 = 230;
/// Height of the strip under the colour bar naming the grey of empty cells.
const EMPTY_SWATCH: u32 = 90;
/// The fill of a cell with no value: a grey outside the colour map, so 0 (pale yellow) and
/// "nothing measured" never look alike.
pub const EMPTY: RGBColor = RGBColor(200, 200, 200);

impl Heatmap<'_> {
    /// Pixels per (square) cell: 36 up to 55 rows or columns, smaller past that to keep the
    /// cells within 2000 pixels; wider when the column labels need it (speaker names), up to 90.
    fn cell(&self) -> u32 {
        let n = self.row_labels.len().max(self.col_labels.len()).max(1) as u32;
        let base = (2000 / n).clamp(6, 36);
        if !Self::labelled(self.col_labels.len()) || base < 36 {
            return base;
        }
        let widest = self
            .col_labels
            .iter()
            .map(|l| style::text_width(l, style::TICK_PX - 4))
            .max()
            .unwrap_or(0);
        (widest + 12).clamp(base, 90)
    }

    /// Height of the colour bar: the cells' height, or enough for its caption.
    fn bar_h(&self) -> u32 {
        let cells = self.cell() * self.row_labels.len().max(1) as u32;
        cells.max(style::text_width(self.bar_desc, style::LABEL_PX - 4) + 40)
    }

    /// Whether tick labels are drawn (past 80 they overlap into a smudge).
    fn labelled(n: usize) -> bool {
        n <= 80
    }

    fn tick_px(&self) -> u32 {
        if self.cell() >= 30 {
            style::TICK_PX - 4
        } else {
            (self.cell() * 2 / 3).max(10)
        }
    }

    /// Room left of the cells: the widest row label and the rotated axis description.
    fn y_area(&self) -> u32 {
        let widest = if Self::labelled(self.row_labels.len()) {
            self.row_labels
                .iter()
                .map(|l| style::text_width(l, self.tick_px()))
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        widest + style::LABEL_PX + 36
    }

    /// Room under the cells: tick labels and the axis description.
    fn x_area(&self) -> u32 {
        self.tick_px() + style::LABEL_PX + 40
    }
}

impl Figure for Heatmap<'_> {
    fn size(&self) -> (u32, u32) {
        let (nr, nc) = (self.row_labels.len() as u32, self.col_labels.len() as u32);
        let cell = self.cell();
        let title = style::text_width(self.title, style::TITLE_PX) + 60;
        let width = (self.y_area() + cell * nc.max(1) + 40 + BAR)
            .max(title)
            .max(style::COLUMN_PX);
        let below = (cell * nr.max(1) + self.x_area()).max(self.bar_h() + EMPTY_SWATCH);
        let height = style::TITLE_PX + 40 + below + 24;
        (width, height)
    }
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (w, _) = root.dim_in_pixel();
        let (nr, nc) = (self.row_labels.len(), self.col_labels.len());
        let cell = self.cell();
        // Cells are square: the main area is as wide as the cells need, the rest is margin.
        let used = self.y_area() + cell * nc.max(1) as u32 + 40;
        // The colour bar sits right of the cells; a wide title leaves the margin on the right.
        let (main, rest) = root.split_horizontally(used.min(w.saturating_sub(BAR)));
        let (bar, _) = rest.split_horizontally(BAR);
        let axis = |n: usize, labels: &[String], reversed: bool| {
            let (from, to) = if reversed {
                (n as f64, 0.0)
            } else {
                (0.0, n as f64)
            };
            KeyAxis {
                from,
                to,
                keys: if Self::labelled(n) {
                    (0..n).map(|i| i as f64 + 0.5).collect()
                } else {
                    Vec::new()
                },
                labels: labels.to_vec(),
            }
        };
        let (_, h) = main.dim_in_pixel();
        let cells_h = cell * nr.max(1) as u32;
        let top = style::TITLE_PX + 40;
        let mut chart = ChartBuilder::on(&main)
            .margin_left(12)
            .margin_right(28)
            .margin_top(top)
            .margin_bottom(h.saturating_sub(top + cells_h + self.x_area()))
            .x_label_area_size(self.x_area())
            .y_label_area_size(self.y_area())
            .build_cartesian_2d(
                axis(nc, self.col_labels, false),
                axis(nr, self.row_labels, true),
            )
            .map_err(|x| e(&x))?;
        root.draw_text(
            self.title,
            &TextStyle::from((style::FAMILY, style::TITLE_PX).into_font()),
            (20, 16),
        )
        .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .x_label_style((style::FAMILY, self.tick_px()))
            .y_label_style((style::FAMILY, self.tick_px()))
            .axis_desc_style((style::FAMILY, style::LABEL_PX))
            .draw()
            .map_err(|x| e(&x))?;
        chart
            .draw_series(
                (0..nr)
                    .flat_map(|r| (0..nc).map(move |c| (r, c)))
                    .map(|(r, c)| {
                        let v = self.values[r * nc + c];
                        let style = if v.is_nan() {
                            EMPTY.filled()
                        } else {
                            heat(v).filled()
                        };
                        Rectangle::new(
                            [(c as f64, r as f64), (c as f64 + 1.0, r as f64 + 1.0)],
                            style,
                        )
                    }),
            )
            .map_err(|x| e(&x))?;
        if nr <= 30 && nc <= 30 {
            // Small enough to print each value inside its cell.
            let size = if self.scale == Scale::Percent { 20 } else { 16 };
            let style = TextStyle::from((style::FAMILY, size).into_font()).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Center,
                ),
            );
            chart
                .draw_series(
                    (0..nr)
                        .flat_map(|r| (0..nc).map(move |c| (r, c)))
                        .filter(|&(r, c)| !self.values[r * nc + c].is_nan())
                        .map(|(r, c)| {
                            let v = self.values[r * nc + c];
                            let color: &'static RGBColor = if v > 0.6 { &WHITE } else { &BLACK };
                            Text::new(
                                self.scale.format(v),
                                (c as f64 + 0.5, r as f64 + 0.5),
                                style.clone().color(color),
                            )
                        }),
                )
                .map_err(|x| e(&x))?;
        }
        let has_empty = self.values.iter().any(|v| v.is_nan());
        self.colour_bar(&bar, top, has_empty).map_err(|x| e(&x))
    }
}

impl Heatmap<'_> {
    /// The colour map from 0 (bottom) to 1 (top) with five ticks and the bar's caption, and under
    /// it, when some cell is empty, a grey swatch saying what grey means.
    fn colour_bar<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        top: u32,
        has_empty: bool,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let ticks = [0.0, 0.25, 0.5, 0.75, 1.0];
        let labels = ticks.iter().map(|&t| self.scale.format(t)).collect();
        // The bar spans the cells' rows (from `top`), the grey swatch sits under it.
        let (bar_area, swatch) = area.split_vertically(top + self.bar_h());
        let mut chart = ChartBuilder::on(&bar_area)
            .margin_top(top)
            .margin_bottom(0)
            .margin_right(60)
            .y_label_area_size(style::TICK_PX * 2 + style::LABEL_PX + 12)
            .build_cartesian_2d(
                0.0..1.0,
                KeyAxis {
                    from: 0.0,
                    to: 1.0,
                    keys: ticks.to_vec(),
                    labels,
                },
            )
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_label_style((style::FAMILY, style::TICK_PX - 4))
            .y_desc(self.bar_desc)
            .axis_desc_style((style::FAMILY, style::LABEL_PX - 4))
            .draw()
            .map_err(|x| e(&x))?;
        let steps = 100;
        chart
            .draw_series((0..steps).map(|i| {
                let (lo, hi) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
                Rectangle::new([(0.0, lo), (1.0, hi)], heat((lo + hi) / 2.0).filled())
            }))
            .map_err(|x| e(&x))?;
        if has_empty && !self.empty_desc.is_empty() {
            let s = style::TICK_PX as i32;
            swatch
                .draw(&Rectangle::new(
                    [(10, 30), (10 + s, 30 + s)],
                    EMPTY.filled(),
                ))
                .map_err(|x| e(&x))?;
            swatch
                .draw_text(
                    self.empty_desc,
                    &TextStyle::from((style::FAMILY, style::TICK_PX - 4).into_font()),
                    (18 + s, 32),
                )
                .map_err(|x| e(&x))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn heat_map_ends() {
        assert_eq!(heat(0.0), RGBColor(255, 255, 204));
        assert_eq!(heat(1.0), RGBColor(8, 29, 88));
        assert_eq!(heat(f64::NAN), heat(0.0));
    }

    /// A heat map is written as SVG and PNG under their final names, with no temporary left; a
    /// folder that cannot be written is an error naming the file, with nothing left behind.
    #[test]
    fn heatmap_saves_svg_and_png_with_a_colour_bar() {
        let dir = tempfile::tempdir().unwrap();
        let labels: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let map = Heatmap {
            title: "t",
            x_desc: "x",
            y_desc: "y",
            row_labels: &labels,
            col_labels: &labels,
            values: vec![0.0, 0.25, f64::NAN, 1.0],
            scale: Scale::Fraction,
            bar_desc: "weight",
            empty_desc: "no value",
        };
        let paths = save(&map, &dir.path().join("m")).unwrap();
        assert_eq!(paths.len(), 2);
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(
            svg.contains("weight") && svg.contains("0.25"),
            "no colour bar"
        );
        assert!(std::fs::read(&paths[1]).unwrap().starts_with(b"\x89PNG"));
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
        let err = save(&map, &dir.path().join("missing/m")).unwrap_err();
        assert!(err.to_string().contains("missing/m.svg"), "{err}");
    }

    /// An empty cell is grey and a 0 is pale yellow (before, both were near-white), the grey is
    /// named under the colour bar, and the PNG is the figure's size with both colours in it.
    #[test]
    fn empty_cells_are_grey_and_zero_is_not() {
        assert_ne!(EMPTY, heat(0.0));
        let dir = tempfile::tempdir().unwrap();
        let labels: Vec<String> = ["aa", "iy", "sh"].iter().map(|s| s.to_string()).collect();
        let map = Heatmap {
            title: "ABX error by phone pair: MFCC",
            x_desc: "B phone",
            y_desc: "A / X phone",
            row_labels: &labels,
            col_labels: &labels,
            values: vec![f64::NAN, 0.0, 0.5, 0.0, f64::NAN, 1.0, 0.25, 0.0, f64::NAN],
            scale: Scale::Percent,
            bar_desc: "ABX error (%)",
            empty_desc: "no triplets",
        };
        let paths = save(&map, &dir.path().join("abx")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        let text = |t: &str| svg.lines().any(|l| l.trim() == t);
        assert!(text("no triplets") && text("ABX error (%)"));
        assert!(svg.contains("ABX error by phone pair: MFCC"));
        let grey = format!("#{:02X}{:02X}{:02X}", EMPTY.0, EMPTY.1, EMPTY.2);
        assert!(svg.contains(&grey), "no grey cell ({grey}) in the SVG");
        let png = std::fs::read(&paths[1]).unwrap();
        let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!((w, h), map.size());
    }

    /// W's rows: with nothing empty, no "empty" swatch is drawn.
    #[test]
    fn no_swatch_without_empty_cells() {
        let dir = tempfile::tempdir().unwrap();
        let labels: Vec<String> = ["0", "1"].iter().map(|s| s.to_string()).collect();
        let map = Heatmap {
            title: "W",
            x_desc: "output class",
            y_desc: "input class",
            row_labels: &labels,
            col_labels: &labels,
            values: vec![1.0, 0.0, 0.0, 1.0],
            scale: Scale::Fraction,
            bar_desc: "weight",
            empty_desc: "no value",
        };
        let paths = save(&map, &dir.path().join("w")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(!svg.contains("no value"));
    }
}
