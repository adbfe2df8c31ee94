//! Plots, each written as SVG and PNG through invar-plot (atomically, in its one style): DET curves
//! with their EER marked, confusion matrices, ABX error by phone pair, and curves.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use invar_plot::style::{self, LegendEntry};
pub use invar_plot::{Dash, Line, Marker};
use invar_plot::{Figure, Heatmap, KeyAxis, LinePlot, Panel, Scale, Series};

use crate::verify::DetPoint;
use crate::{Error, Result};

fn plot_err(path: &Path, message: impl ToString) -> Error {
    Error::Plot {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Writes `stem.svg` and `stem.png` ([`invar_plot::save`]); returns the two paths.
fn save(fig: &impl Figure, stem: &Path) -> Result<Vec<PathBuf>> {
    invar_plot::save(fig, stem).map_err(|e| plot_err(stem, e))
}

/// The standard normal quantile Φ⁻¹(p) (Acklam's rational approximation, relative error < 1.2e-9),
/// the axis scale of DET plots. `p` is clamped to `[1e-9, 1 − 1e-9]`.
pub fn probit(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let p = p.clamp(1e-9, 1.0 - 1e-9);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

const DET_TICKS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8];

/// One system's DET curve, its EER (marked on the curve and given in the legend) and its look.
#[derive(Debug, Clone, PartialEq)]
pub struct DetCurve {
    pub label: String,
    pub points: Vec<DetPoint>,
    /// The EER in `[0, 1]` (Kaldi's, as [`crate::verify`] reports it).
    pub eer: f64,
    pub line: Line,
}

impl DetCurve {
    /// The `i`-th curve of a plot, in [`Line::nth`]'s look.
    pub fn nth(i: usize, label: impl Into<String>, points: Vec<DetPoint>, eer: f64) -> Self {
        DetCurve {
            label: label.into(),
            points,
            eer,
            line: Line::nth(i),
        }
    }

    /// The legend's text: the label and the EER in percent.
    pub fn legend_label(&self) -> String {
        format!("{} (EER {:.2} %)", self.label, 100.0 * self.eer)
    }
}

struct Det<'a> {
    title: &'a str,
    curves: &'a [DetCurve],
}

impl Det<'_> {
    fn legend(&self) -> Vec<LegendEntry> {
        self.curves
            .iter()
            .map(|c| LegendEntry {
                label: c.legend_label(),
                line: c.line,
                marker: true,
            })
            .collect()
    }
}

impl Figure for Det<'_> {
    fn size(&self) -> (u32, u32) {
        let w = style::COLUMN_PX;
        let legend = style::legend_height(&self.legend(), w) + style::LEGEND_PX + 16;
        (w, w + style::TITLE_PX + 24 + legend)
    }
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (w, h) = root.dim_in_pixel();
        let legend = self.legend();
        let (top, rest) = root.split_vertically(style::TITLE_PX + 24);
        let size = style::fitting_size(self.title, w.saturating_sub(40), style::TITLE_PX);
        top.titled(self.title, (style::FAMILY, size))
            .map_err(|x| e(&x))?;
        let strip_h = style::legend_height(&legend, w) + style::LEGEND_PX + 16;
        let (body, strip) = rest.split_vertically(h - style::TITLE_PX - 24 - strip_h);
        let (lo, hi) = (probit(0.0005), probit(0.9));
        let axis = KeyAxis {
            from: lo,
            to: hi,
            keys: DET_TICKS.iter().map(|&t| probit(t)).collect(),
            labels: DET_TICKS.iter().map(|t| format!("{}", t * 100.0)).collect(),
        };
        let mut chart = ChartBuilder::on(&body)
            .margin(16)
            .margin_right(36)
            .x_label_area_size(style::TICK_PX + style::LABEL_PX + 34)
            .y_label_area_size(style::TICK_PX * 3 + style::LABEL_PX + 20)
            .build_cartesian_2d(axis.clone(), axis)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(225, 225, 225))
            .x_desc("false alarm probability (%)")
            .y_desc("miss probability (%)")
            .x_label_style((style::FAMILY, style::TICK_PX))
            .y_label_style((style::FAMILY, style::TICK_PX))
            .axis_desc_style((style::FAMILY, style::LABEL_PX))
            .draw()
            .map_err(|x| e(&x))?;
        let diagonal = [
            chart.backend_coord(&(lo, lo)),
            chart.backend_coord(&(hi, hi)),
        ];
        let grey = Line {
            colour: style::REFERENCE,
            dash: Dash::Dotted,
            marker: Marker::None,
        };
        style::draw_polyline(root, &diagonal, &grey, false)?;
        let z = |p: f64| probit(p).clamp(lo, hi);
        for c in self.curves {
            let pts: Vec<(i32, i32)> = c
                .points
                .iter()
                .map(|p| chart.backend_coord(&(z(p.p_fa), z(p.p_miss))))
                .collect();
            style::draw_polyline(root, &pts, &c.line, false)?;
        }
        // EER points last, so no curve hides one; each has a white ring to stand out.
        for c in self.curves.iter().filter(|c| c.eer.is_finite()) {
            let at = chart.backend_coord(&(z(c.eer), z(c.eer)));
            root.draw(&Circle::new(at, 13, WHITE.filled()))
                .map_err(|x| e(&x))?;
            style::draw_polyline(root, &[at], &c.line, true)?;
        }
        let (note, entries) = strip.split_vertically(style::LEGEND_PX + 16);
        note.draw_text(
            "each curve's marker: its EER (miss = false alarm), on the dotted diagonal",
            &TextStyle::from((style::FAMILY, style::LEGEND_PX).into_font())
                .color(&style::REFERENCE),
            (10, 8),
        )
        .map_err(|x| e(&x))?;
        style::draw_legend(&entries, &legend)
    }
}

/// Draws DET curves (one per system, each with its EER marked where the curve meets the
/// diagonal) on normal-deviate axes; writes `stem.svg` and `stem.png`.
pub fn det_plot(stem: &Path, title: &str, curves: &[DetCurve]) -> Result<Vec<PathBuf>> {
    save(&Det { title, curves }, stem)
}

/// Draws a confusion matrix, each row normalised by its total (so a perfect system is a dark diagonal).
pub fn confusion_plot(
    stem: &Path,
    labels: &[String],
    confusion: &[Vec<u64>],
) -> Result<Vec<PathBuf>> {
    let n = labels.len();
    let mut values = vec![f64::NAN; n * n];
    for (r, row) in confusion.iter().enumerate().take(n) {
        let total: u64 = row.iter().sum();
        for (c, &v) in row.iter().enumerate().take(n) {
            if total > 0 {
                values[r * n + c] = v as f64 / total as f64;
            }
        }
    }
    save(
        &Heatmap {
            title: "speaker identification: confusion (row-normalised)",
            x_desc: "predicted speaker",
            y_desc: "reference speaker",
            row_labels: labels,
            col_labels: labels,
            values,
            scale: Scale::Percent,
            bar_desc: "share of the reference speaker's utterances (%)",
            empty_desc: "no test utterance",
        },
        stem,
    )
}

/// Draws ABX error by ordered phone pair (rows: A/X phone, columns: B phone; grey = no cell,
/// which 0 % never looks like).
pub fn abx_pair_plot(
    stem: &Path,
    pairs: &[crate::abx::PairError],
    title: &str,
) -> Result<Vec<PathBuf>> {
    let phones: Vec<String> = pairs
        .iter()
        .flat_map(|p| [p.phone_a.clone(), p.phone_b.clone()])
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let n = phones.len();
    let ix = |s: &str| phones.binary_search_by(|p| p.as_str().cmp(s)).ok();
    let mut values = vec![f64::NAN; n * n];
    for p in pairs {
        if let (Some(r), Some(c)) = (ix(&p.phone_a), ix(&p.phone_b)) {
            values[r * n + c] = p.error;
        }
    }
    save(
        &Heatmap {
            title,
            x_desc: "B phone",
            y_desc: "A / X phone",
            row_labels: &phones,
            col_labels: &phones,
            values,
            scale: Scale::Percent,
            bar_desc: "ABX error (%)",
            empty_desc: "no triplets",
        },
        stem,
    )
}

/// Draws named (x, y) series as lines, e.g. training and validation loss per epoch.
pub fn curves_plot(
    stem: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<Vec<PathBuf>> {
    let xs = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .filter(|x| x.is_finite());
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (x0, x1) = if x0 > x1 { (0.0, 1.0) } else { (x0, x1) };
    let pad = if x1 > x0 { 0.03 * (x1 - x0) } else { 0.5 };
    let panel = Panel {
        title: String::new(),
        x: KeyAxis::linear(x0 - pad, x1 + pad),
        x_desc: x_desc.to_string(),
        y_desc: y_desc.to_string(),
        y_range: None,
        y_ticks: None,
        series: series
            .iter()
            .enumerate()
            .map(|(i, (label, points))| Series {
                label: label.clone(),
                points: points.clone(),
                line: Line::nth(i),
            })
            .collect(),
        references: Vec::new(),
        markers: series.iter().all(|(_, p)| p.len() <= 40),
    };
    save(&LinePlot::new(title, vec![panel]), stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probit_matches_known_quantiles() {
        // Φ⁻¹ values from scipy.stats.norm.ppf.
        let known = [
            (0.5, 0.0),
            (0.975, 1.959963984540054),
            (0.01, -2.3263478740408408),
            (0.001, -3.090232306167813),
            (0.2, -0.8416212335729142),
        ];
        for (p, z) in known {
            assert!((probit(p) - z).abs() < 1e-7, "probit({p}) = {}", probit(p));
        }
    }
}
