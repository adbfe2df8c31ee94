//! Plots with plotters, each written as SVG and PNG: DET curves, confusion matrices, ABX error by phone
//! pair, training curves. Files are written atomically (SVG through invar-io, PNG to a temporary
//! sibling then renamed).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use invar_plot::{Figure, Heatmap, KeyAxis, Scale};

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

const DET_TICKS: [f64; 11] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8,
];

struct Det<'a> {
    curves: &'a [(String, Vec<DetPoint>)],
}

impl Figure for Det<'_> {
    fn size(&self) -> (u32, u32) {
        (640, 640)
    }
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (lo, hi) = (probit(0.0005), probit(0.9));
        let axis = KeyAxis {
            from: lo,
            to: hi,
            keys: DET_TICKS.iter().map(|&t| probit(t)).collect(),
            labels: DET_TICKS.iter().map(|t| format!("{}", t * 100.0)).collect(),
        };
        let mut chart = ChartBuilder::on(root)
            .caption("DET", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(axis.clone(), axis)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("false alarm probability (%)")
            .y_desc("miss probability (%)")
            .draw()
            .map_err(|x| e(&x))?;
        for (i, (name, points)) in self.curves.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (probit(p.p_fa).clamp(lo, hi), probit(p.p_miss).clamp(lo, hi)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .draw_series(LineSeries::new(vec![(lo, lo), (hi, hi)], BLACK.mix(0.3)))
            .map_err(|x| e(&x))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        Ok(())
    }
}

/// Draws DET curves (one per named system) on normal-deviate axes; writes `stem.svg` and `stem.png`.
pub fn det_plot(stem: &Path, curves: &[(String, Vec<DetPoint>)]) -> Result<Vec<PathBuf>> {
    save(&Det { curves }, stem)
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
            x_desc: "predicted",
            y_desc: "reference",
            row_labels: labels,
            col_labels: labels,
            values,
            scale: Scale::Percent,
            bar_desc: "share of the reference speaker's utterances (%)",
        },
        stem,
    )
}

/// Draws ABX error by ordered phone pair (rows: A/X phone, columns: B phone; white = no cell).
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
        },
        stem,
    )
}

struct Curves<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    series: &'a [(String, Vec<(f64, f64)>)],
}

impl Figure for Curves<'_> {
    fn size(&self) -> (u32, u32) {
        (800, 500)
    }
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let pts = self
            .series
            .iter()
            .flat_map(|(_, p)| p.iter())
            .filter(|p| p.0.is_finite() && p.1.is_finite());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        let pad = |a: f64, b: f64| if b > a { (b - a) * 0.05 } else { 0.5 };
        let (px, py) = (pad(x0, x1), pad(y0, y1));
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0 - px..x1 + px, y0 - py..y1 + py)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .draw()
            .map_err(|x| e(&x))?;
        for (i, (name, points)) in self.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|x| e(&x))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        Ok(())
    }
}

/// Draws named (x, y) series as lines, e.g. training and validation loss per epoch.
pub fn curves_plot(
    stem: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<Vec<PathBuf>> {
    save(
        &Curves {
            title,
            x_desc,
            y_desc,
            series,
        },
        stem,
    )
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
