//! Training curves: one panel per metric (training and validation values of the same metric share a
//! panel), drawn with plotters to SVG and PNG.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::log::EpochRecord;
use crate::{Error, Result};

/// Series grouped by panel: `loss` holds `train_loss` and `val_loss`; other keys stand alone.
fn panels(history: &[EpochRecord]) -> BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for r in history {
        for (k, &v) in &r.metrics {
            if matches!(k.as_str(), "seconds" | "samples_per_s" | "lr") || !v.is_finite() {
                continue;
            }
            let panel = k
                .strip_prefix("train_")
                .or_else(|| k.strip_prefix("val_"))
                .unwrap_or(k)
                .to_string();
            out.entry(panel)
                .or_default()
                .entry(k.clone())
                .or_default()
                .push((r.epoch as f64, v));
        }
    }
    out
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    history: &[EpochRecord],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: &dyn std::fmt::Display| Error::file("curves", format!("plotting failed: {e}"));
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = panels(history);
    if panels.is_empty() {
        return root.present().map_err(|e| err(&e));
    }
    let areas = root.split_evenly((panels.len(), 1));
    let last_epoch = history.iter().map(|r| r.epoch).max().unwrap_or(1).max(2) as f64;
    let first_epoch = history.iter().map(|r| r.epoch).min().unwrap_or(1) as f64;
    for (area, (panel, series)) in areas.iter().zip(&panels) {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for pts in series.values() {
            for &(_, y) in pts {
                lo = lo.min(y);
                hi = hi.max(y);
            }
        }
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5 * lo.abs().max(1e-3)
        };
        let mut chart = ChartBuilder::on(area)
            .caption(panel, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(first_epoch..last_epoch, (lo - pad)..(hi + pad))
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

/// Writes the curves of `history` to `svg` (always) and `png` (if given).
pub fn plot_curves(history: &[EpochRecord], svg: &Path, png: Option<&Path>) -> Result<()> {
    invar_plot::register_fonts().map_err(|e| Error::file(svg, e))?;
    let height = 260 * panels(history).len().max(1) as u32;
    let mut text = String::new();
    draw(
        SVGBackend::with_string(&mut text, (800, height)).into_drawing_area(),
        history,
    )?;
    invar_io::write_text(svg, &text)?;
    if let Some(png) = png {
        // The bitmap backend encodes straight to a file: draw to a hidden sibling, then rename.
        // (The encoder picks the format from the extension, so the temporary name keeps `.png`.)
        let tmp = png.with_file_name(format!(
            ".{}.tmp-{}.png",
            png.file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let drawn = draw(
            BitMapBackend::new(&tmp, (800, height)).into_drawing_area(),
            history,
        )
        .and_then(|()| std::fs::rename(&tmp, png).map_err(|e| Error::file(png, e)));
        if drawn.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        drawn?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png_with_one_panel_per_metric() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::file("tempdir", e))?;
        let history: Vec<EpochRecord> = (1..=4)
            .map(|e| {
                let mut r = EpochRecord::new(e, e as u64 * 10);
                r.metrics.insert("train_loss".into(), 1.0 / e as f64);
                r.metrics.insert("val_loss".into(), 1.2 / e as f64);
                r.metrics.insert("val_acc".into(), 0.5 + 0.1 * e as f64);
                r.metrics.insert("seconds".into(), 0.1);
                r
            })
            .collect();
        let groups = panels(&history);
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["acc", "loss"]);
        assert_eq!(groups["loss"].len(), 2);
        let (svg, png) = (dir.path().join("c.svg"), dir.path().join("c.png"));
        plot_curves(&history, &svg, Some(&png))?;
        let text = std::fs::read_to_string(&svg).map_err(|e| Error::file(&svg, e))?;
        assert!(text.contains("<svg") && text.contains("val_acc") && text.contains("train_loss"));
        let bytes = std::fs::read(&png).map_err(|e| Error::file(&png, e))?;
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        Ok(())
    }
}
