//! Training curves: one panel per metric (training and validation values of the same metric share a
//! panel: training solid, validation dashed), drawn with invar-plot's [`LinePlot`] to SVG and PNG.
//! A metric equal to the loss at every epoch (the autoencoder's `mse` when the loss is its MSE) is
//! drawn once, in the loss panel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use invar_plot::{Dash, KeyAxis, Line, LinePlot, Marker, Panel, Series};

use crate::log::EpochRecord;
use crate::{Error, Result};

/// `(split, metric)` → points; `split` is `train`, `val` or `""` for a metric without a prefix.
type Groups = BTreeMap<String, BTreeMap<String, Vec<(f64, f64)>>>;

/// Series grouped by panel: `loss` holds `train_loss` and `val_loss`; other keys stand alone.
/// A panel whose every series equals the loss panel's at every epoch is dropped (its name is
/// returned beside the groups, to say so on the loss panel).
fn panels(history: &[EpochRecord]) -> (Groups, Vec<String>) {
    let mut out: Groups = BTreeMap::new();
    for r in history {
        for (k, &v) in &r.metrics {
            if matches!(k.as_str(), "seconds" | "samples_per_s" | "lr") || !v.is_finite() {
                continue;
            }
            let (split, panel) = if let Some(p) = k.strip_prefix("train_") {
                ("train", p)
            } else if let Some(p) = k.strip_prefix("val_") {
                ("val", p)
            } else {
                ("", k.as_str())
            };
            out.entry(panel.to_string())
                .or_default()
                .entry(split.to_string())
                .or_default()
                .push((r.epoch as f64, v));
        }
    }
    let mut same = Vec::new();
    if let Some(loss) = out.get("loss").cloned() {
        let equal = |a: &[(f64, f64)], b: &[(f64, f64)]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(p, q)| {
                    p.0 == q.0 && (p.1 - q.1).abs() <= 1e-9 * p.1.abs().max(q.1.abs()).max(1.0)
                })
        };
        out.retain(|name, series| {
            let duplicate = name != "loss"
                && series.len() == loss.len()
                && series
                    .iter()
                    .all(|(split, pts)| loss.get(split).is_some_and(|l| equal(l, pts)));
            if duplicate {
                same.push(name.clone());
            }
            !duplicate
        });
    }
    (out, same)
}

/// What a metric's axis says it measures.
fn describe(metric: &str) -> String {
    match metric {
        "loss" => "loss".into(),
        "acc" => "accuracy".into(),
        "mse" => "mean squared error".into(),
        "grad_norm" => "gradient norm".into(),
        "different" => "different-speaker hinge".into(),
        "same_sqrt_js" => "√JS, same-class pairs".into(),
        "diff_sqrt_js" => "√JS, different-class pairs".into(),
        "entropy" => "entropy of W's rows".into(),
        other => other.replace('_', " "),
    }
}

/// The look of a split's line: training solid blue circles, validation dashed vermillion squares.
fn line_of(split: &str) -> (String, Line) {
    match split {
        "train" => (
            "training".into(),
            Line {
                colour: invar_plot::style::colour(0),
                dash: Dash::Solid,
                marker: Marker::Circle,
            },
        ),
        "val" => (
            "validation".into(),
            Line {
                colour: invar_plot::style::colour(1),
                dash: Dash::Dashed,
                marker: Marker::Square,
            },
        ),
        _ => (
            "per epoch".into(),
            Line {
                colour: invar_plot::style::colour(2),
                dash: Dash::Solid,
                marker: Marker::Triangle,
            },
        ),
    }
}

/// The figure of `history`: one panel per metric over integer epoch ticks.
fn figure(history: &[EpochRecord], title: &str) -> LinePlot {
    let (groups, same) = panels(history);
    let first = history.iter().map(|r| r.epoch).min().unwrap_or(1) as i64;
    let last = history.iter().map(|r| r.epoch).max().unwrap_or(1) as i64;
    let markers = last - first < 40;
    // The loss first, then the other metrics by name.
    let mut ordered: Vec<_> = groups.iter().collect();
    ordered.sort_by_key(|(metric, _)| metric.as_str() != "loss");
    let panels = ordered
        .into_iter()
        .map(|(metric, series)| {
            let mut y_desc = describe(metric);
            if metric == "loss" && !same.is_empty() {
                let names: Vec<String> = same.iter().map(|m| describe(m)).collect();
                y_desc = format!("loss (= {})", names.join(", "));
            }
            Panel {
                title: String::new(),
                x: KeyAxis::integers(first, last),
                x_desc: "epoch".into(),
                y_desc,
                y_range: None,
                y_ticks: None,
                series: series
                    .iter()
                    .map(|(split, pts)| {
                        let (label, line) = line_of(split);
                        Series {
                            label,
                            points: pts.clone(),
                            line,
                        }
                    })
                    .collect(),
                references: Vec::new(),
                markers,
            }
        })
        .collect();
    let mut plot = LinePlot::new(title, panels).two_columns_when_many();
    plot.panel_height = 560;
    plot
}

/// Writes the curves of `history` as `stem.svg` and `stem.png` (each atomically), titled `title`;
/// returns the two paths.
pub fn plot_curves(history: &[EpochRecord], title: &str, stem: &Path) -> Result<Vec<PathBuf>> {
    invar_plot::save(&figure(history, title), stem)
        .map_err(|e| Error::file(stem.with_extension("svg"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(mse_is_loss: bool) -> Vec<EpochRecord> {
        (1..=4)
            .map(|e| {
                let mut r = EpochRecord::new(e, e as u64 * 10);
                r.metrics.insert("train_loss".into(), 1.0 / e as f64);
                r.metrics.insert("val_loss".into(), 1.2 / e as f64);
                let mse = if mse_is_loss { 1.0 } else { 0.5 };
                r.metrics.insert("train_mse".into(), mse / e as f64);
                r.metrics.insert("val_mse".into(), 1.2 * mse / e as f64);
                r.metrics.insert("val_acc".into(), 0.5 + 0.1 * e as f64);
                r.metrics.insert("seconds".into(), 0.1);
                r
            })
            .collect()
    }

    /// One panel per metric, training and validation sharing it; a metric equal to the loss (the
    /// autoencoder's MSE when its loss is the MSE alone) is drawn once, and the loss panel says so.
    /// (Before, `mse` got a panel of its own drawing the loss's lines again.)
    #[test]
    fn one_panel_per_metric_and_the_loss_drawn_once() {
        let (groups, same) = panels(&history(true));
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["acc", "loss"]);
        assert_eq!(same, ["mse"]);
        assert_eq!(groups["loss"].len(), 2);
        let (groups, same) = panels(&history(false));
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["acc", "loss", "mse"]);
        assert!(same.is_empty());
    }

    /// Written as SVG and PNG; epochs are labelled as whole numbers (not "2.0"), each axis says
    /// what it measures, and the legend names the two splits once each.
    #[test]
    fn writes_svg_and_png_with_integer_epochs_and_axis_labels() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::file("tempdir", e))?;
        let paths = plot_curves(&history(true), "training: test", &dir.path().join("c"))?;
        assert_eq!(paths.len(), 2);
        let text = std::fs::read_to_string(&paths[0]).map_err(|e| Error::file(&paths[0], e))?;
        for needle in [
            "epoch",
            "accuracy",
            "loss (= mean squared error)",
            "training",
            "validation",
            "3",
        ] {
            assert!(
                text.lines().any(|l| l.trim() == needle),
                "no {needle} in the SVG"
            );
        }
        assert!(
            !text.lines().any(|l| l.trim() == "2.0"),
            "a fractional epoch tick"
        );
        assert_eq!(text.lines().filter(|l| l.trim() == "validation").count(), 1);
        let bytes = std::fs::read(&paths[1]).map_err(|e| Error::file(&paths[1], e))?;
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        Ok(())
    }
}
