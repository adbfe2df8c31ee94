//! One way to draw and save a figure for the whole workspace: a [`Figure`] draws itself on any
//! plotters backend and [`save`] writes it as SVG and PNG (each to a temporary sibling renamed into
//! place, so a failed draw never leaves half a file under the final name). [`Heatmap`] is the matrix
//! plot every crate uses (confusions, ABX by phone pair, the 000 partition), with a colour bar.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{register_fonts, Error, Result};

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

/// A matrix of values in `[0, 1]` (NaN: an empty cell, drawn white) with labelled rows and
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
}

/// Width of the colour bar's strip on the right.
const BAR: u32 = 120;

impl Figure for Heatmap<'_> {
    fn size(&self) -> (u32, u32) {
        let side = |n: usize| (200 + 18 * n as u32).clamp(480, 2400);
        (
            side(self.col_labels.len()) + BAR,
            side(self.row_labels.len()),
        )
    }
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (w, _) = root.dim_in_pixel();
        let (main, bar) = root.split_horizontally(w.saturating_sub(BAR));
        let (nr, nc) = (self.row_labels.len(), self.col_labels.len());
        // Past 80 labels they overlap into a smudge: draw the cells only.
        let axis = |n: usize, labels: &[String], reversed: bool| {
            let (from, to) = if reversed {
                (n as f64, 0.0)
            } else {
                (0.0, n as f64)
            };
            KeyAxis {
                from,
                to,
                keys: if n <= 80 {
                    (0..n).map(|i| i as f64 + 0.5).collect()
                } else {
                    Vec::new()
                },
                labels: labels.to_vec(),
            }
        };
        let mut chart = ChartBuilder::on(&main)
            .caption(self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(
                axis(nc, self.col_labels, false),
                axis(nr, self.row_labels, true),
            )
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .axis_desc_style(("sans-serif", 15))
            .draw()
            .map_err(|x| e(&x))?;
        chart
            .draw_series(
                (0..nr)
                    .flat_map(|r| (0..nc).map(move |c| (r, c)))
                    .map(|(r, c)| {
                        let v = self.values[r * nc + c];
                        let style = if v.is_nan() {
                            WHITE.filled()
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
            let style = TextStyle::from(("sans-serif", 11).into_font()).pos(
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
        self.colour_bar(&bar).map_err(|x| e(&x))
    }
}

impl Heatmap<'_> {
    /// The colour map from 0 (bottom) to 1 (top) with five ticks and the bar's caption.
    fn colour_bar<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let ticks = [0.0, 0.25, 0.5, 0.75, 1.0];
        let labels = ticks.iter().map(|&t| self.scale.format(t)).collect();
        let mut chart = ChartBuilder::on(area)
            .margin_top(48)
            .margin_bottom(72)
            .margin_right(36)
            .y_label_area_size(52)
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
            .y_label_style(("sans-serif", 13))
            .y_desc(self.bar_desc)
            .axis_desc_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(&x))?;
        let steps = 100;
        chart
            .draw_series((0..steps).map(|i| {
                let (lo, hi) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
                Rectangle::new([(0.0, lo), (1.0, hi)], heat((lo + hi) / 2.0).filled())
            }))
            .map_err(|x| e(&x))?;
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
}
