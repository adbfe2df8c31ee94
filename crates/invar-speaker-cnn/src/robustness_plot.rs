//! The robustness grid as a figure: accuracy (chunk and utterance panels) under every test
//! condition of the grid, one line per model and unit-L2 setting (colour and marker per model,
//! solid with unit-L2 scaling, dashed without), mean over seeds, with the chance level drawn.

use std::path::{Path, PathBuf};

use invar_plot::{Dash, KeyAxis, Line, LinePlot, Marker, Panel, Reference, Series};

use crate::{Condition, Error, Result, RobustnessReport, RobustnessRow};

/// The x position of a condition: constant gains (clean is 0 dB) in dB order, then gain ramps,
/// then log-domain offsets, each in the order of their parameters.
fn order_key(c: &Condition) -> (u8, f64, f64) {
    match *c {
        Condition::Clean => (0, 0.0, 0.0),
        Condition::Gain { db } => (0, f64::from(db), 0.0),
        Condition::Ramp { from_db, to_db } => (1, f64::from(from_db), f64::from(to_db)),
        Condition::LogOffset { offset } => (2, f64::from(offset), 0.0),
    }
}

/// A condition's tick label, short enough for eight across a paper column (the axis description
/// gives the units).
fn tick(c: &Condition) -> String {
    let signed = |v: f64| {
        if v < 0.0 {
            format!("−{}", -v)
        } else {
            format!("+{v}")
        }
    };
    match *c {
        Condition::Clean => "clean".into(),
        Condition::Gain { db } => signed(f64::from(db)),
        Condition::Ramp { .. } => "ramp".into(),
        Condition::LogOffset { offset } => format!("log {}", signed(f64::from(offset))),
    }
}

/// The model a row belongs to, as the legend names it.
fn model(r: &RobustnessRow) -> String {
    r.model()
}

/// The conditions of `report`, in plotting order.
pub fn conditions(report: &RobustnessReport) -> Vec<Condition> {
    let mut out: Vec<Condition> = Vec::new();
    for r in &report.rows {
        if !out.contains(&r.condition) {
            out.push(r.condition);
        }
    }
    out.sort_by(|a, b| {
        let (x, y) = (order_key(a), order_key(b));
        x.0.cmp(&y.0)
            .then(x.1.total_cmp(&y.1))
            .then(x.2.total_cmp(&y.2))
    });
    out
}

/// What the x axis says: the units of the ticks, and the ramps' and offsets' meaning.
fn x_desc(conds: &[Condition]) -> String {
    let mut parts = vec!["test condition: gain (dB)".to_string()];
    if let Some(Condition::Ramp { from_db, to_db }) =
        conds.iter().find(|c| matches!(c, Condition::Ramp { .. }))
    {
        parts.push(format!("ramp {from_db:+}→{to_db:+} dB"));
    }
    if conds
        .iter()
        .any(|c| matches!(c, Condition::LogOffset { .. }))
    {
        parts.push("log-feature offset".into());
    }
    parts.join(", ")
}

/// The GMM baselines of `report` (mean over seeds per condition), each a solid black line with
/// squares.
fn baseline_series(report: &RobustnessReport, conds: &[Condition], chunk: bool) -> Vec<Series> {
    let mut methods: Vec<&str> = Vec::new();
    for b in &report.baselines {
        if !methods.contains(&b.method.as_str()) {
            methods.push(&b.method);
        }
    }
    methods
        .into_iter()
        .map(|method| {
            let points = conds
                .iter()
                .enumerate()
                .filter_map(|(x, c)| {
                    let v: Vec<f64> = report
                        .baselines
                        .iter()
                        .filter(|b| b.method == method && b.condition == *c)
                        .map(|b| {
                            if chunk {
                                b.chunk_accuracy
                            } else {
                                b.utterance_accuracy
                            }
                        })
                        .collect();
                    (!v.is_empty())
                        .then(|| (x as f64, 100.0 * v.iter().sum::<f64>() / v.len() as f64))
                })
                .collect();
            Series {
                label: method.to_string(),
                points,
                line: Line {
                    colour: invar_plot::style::PALETTE[6], // black
                    dash: Dash::Solid,
                    marker: Marker::Square,
                },
            }
        })
        .collect()
}

/// The figure: two panels (chunk and utterance accuracy, %) over the conditions.
pub fn robustness_figure(report: &RobustnessReport, speakers: usize) -> LinePlot {
    let conds = conditions(report);
    let labels: Vec<String> = conds.iter().map(tick).collect();
    let mut models: Vec<String> = Vec::new();
    for r in &report.rows {
        let m = model(r);
        if !models.contains(&m) {
            models.push(m);
        }
    }
    let mut keys: Vec<(String, bool)> = Vec::new();
    for unit_norm in [true, false] {
        for m in &models {
            if report
                .rows
                .iter()
                .any(|r| model(r) == *m && r.unit_norm == unit_norm)
            {
                keys.push((m.clone(), unit_norm));
            }
        }
    }
    let n = keys.len();
    let series = |chunk: bool| -> Vec<Series> {
        keys.iter()
            .enumerate()
            .map(|(k, (m, unit_norm))| {
                let i = models.iter().position(|x| x == m).unwrap_or(0);
                // Dodge: each line a little to the side, so equal values do not hide each other.
                let dx = if n > 1 {
                    (k as f64 / (n - 1) as f64 - 0.5) * 0.3
                } else {
                    0.0
                };
                let points = conds
                    .iter()
                    .enumerate()
                    .filter_map(|(x, c)| {
                        let v: Vec<f64> = report
                            .rows
                            .iter()
                            .filter(|r| {
                                model(r) == *m && r.unit_norm == *unit_norm && r.condition == *c
                            })
                            .map(|r| {
                                if chunk {
                                    r.chunk_accuracy
                                } else {
                                    r.utterance_accuracy
                                }
                            })
                            .collect();
                        (!v.is_empty()).then(|| {
                            (
                                x as f64 + dx,
                                100.0 * v.iter().sum::<f64>() / v.len() as f64,
                            )
                        })
                    })
                    .collect();
                let base = Line::nth(i);
                Series {
                    label: format!("{m}, unit-L2 {}", if *unit_norm { "on" } else { "off" }),
                    points,
                    line: Line {
                        colour: base.colour,
                        dash: if *unit_norm {
                            Dash::Solid
                        } else {
                            Dash::Dashed
                        },
                        // The marker stays the model's (7 colours × 4 markers tell 28 models
                        // apart); the dash tells unit-L2 on from off.
                        marker: base.marker,
                    },
                }
            })
            .chain(baseline_series(report, &conds, chunk))
            .collect()
    };
    let references = if speakers > 0 {
        vec![Reference {
            y: 100.0 / speakers as f64,
            label: format!("chance (1 of {speakers})"),
        }]
    } else {
        Vec::new()
    };
    let panel = |chunk: bool| Panel {
        title: String::new(),
        x: KeyAxis::categories(&labels),
        x_desc: x_desc(&conds),
        y_desc: if chunk {
            "chunk accuracy (%)".into()
        } else {
            "utterance accuracy (%)".into()
        },
        y_range: Some((0.0, 100.0)),
        y_ticks: None,
        series: series(chunk),
        references: references.clone(),
        markers: true,
    };
    let seeds: std::collections::BTreeSet<u64> = report.rows.iter().map(|r| r.seed).collect();
    let mut plot = LinePlot::new(
        format!(
            "speaker CNN `{}`, mean of {} seed{}",
            report.config,
            seeds.len(),
            if seeds.len() == 1 { "" } else { "s" }
        ),
        vec![panel(true), panel(false)],
    );
    plot.panel_height = 620;
    plot
}

/// Draws the grid ([`robustness_figure`]; `speakers` sets the chance line, 0 for none) as
/// `stem.svg` and `stem.png`; returns the two paths.
pub fn plot_robustness(
    report: &RobustnessReport,
    speakers: usize,
    stem: &Path,
) -> Result<Vec<PathBuf>> {
    invar_plot::save(&robustness_figure(report, speakers), stem).map_err(|e| Error::Plot {
        path: stem.with_extension("svg"),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Nuisance;

    fn report() -> RobustnessReport {
        let conds = [
            Condition::LogOffset { offset: 1.0 },
            Condition::Clean,
            Condition::Gain { db: 10.0 },
            Condition::Ramp {
                from_db: -10.0,
                to_db: 10.0,
            },
            Condition::Gain { db: -20.0 },
            Condition::LogOffset { offset: -1.0 },
        ];
        let mut rows = Vec::new();
        for unit_norm in [true, false] {
            for nuisance in [Nuisance::None, Nuisance::Scale] {
                for (k, &condition) in conds.iter().enumerate() {
                    rows.push(RobustnessRow {
                        nuisance,
                        lambda: 0.1,
                        unit_norm,
                        seed: 0,
                        condition,
                        chunk_accuracy: 0.1 * k as f64,
                        utterance_accuracy: 0.5,
                        r: 0.0,
                        epochs: 3,
                        treatment: None,
                    });
                }
            }
        }
        RobustnessReport {
            config: "original".into(),
            rows,
            diverged: Vec::new(),
            baselines: Vec::new(),
            speakers: Some(16),
        }
    }

    /// Every condition of the grid is on the x axis (ramp and log offsets too, which the old plot
    /// dropped), gains in dB order with clean at 0 dB, then the ramp, then the offsets.
    #[test]
    fn every_condition_in_order() {
        let labels: Vec<String> = conditions(&report()).iter().map(tick).collect();
        assert_eq!(labels, ["−20", "clean", "+10", "ramp", "log −1", "log +1"]);
    }

    /// One line per (model, unit-L2): solid with unit-L2, dashed without; a chance line at
    /// 1/speakers; the SVG names the conditions, the chance level and both settings, and the PNG
    /// is written with ink on it.
    #[test]
    fn lines_styles_chance_and_files() {
        let fig = robustness_figure(&report(), 16);
        assert_eq!(fig.panels.len(), 2);
        let p = &fig.panels[0];
        assert_eq!(p.series.len(), 4);
        assert_eq!(p.references[0].y, 6.25);
        for s in &p.series {
            assert_eq!(s.points.len(), 6, "{}", s.label);
            let dashed = s.line.dash == Dash::Dashed;
            assert_eq!(dashed, s.label.ends_with("off"), "{}", s.label);
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = plot_robustness(&report(), 16, &dir.path().join("r")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        for needle in [
            "ramp",
            "log −1",
            "chance (1 of 16)",
            "none, unit-L2 on",
            "scale, unit-L2 off",
            "chunk accuracy (%)",
            "utterance accuracy (%)",
        ] {
            assert!(
                svg.lines().any(|l| l.trim() == needle),
                "no {needle} in the SVG"
            );
        }
        let png = std::fs::read(&paths[1]).unwrap();
        assert!(png.starts_with(b"\x89PNG"));
    }

    /// The GMM baseline is drawn beside the CNNs (mean over its seeds per condition), so the
    /// figure answers the question the grid is run for.
    #[test]
    fn the_gmm_baseline_is_a_line_of_its_own() {
        let mut r = report();
        for (seed, acc) in [(0, 0.9), (1, 0.7)] {
            r.baselines.push(crate::BaselineRow {
                method: crate::GMM_BASELINE.into(),
                seed,
                condition: Condition::Clean,
                chunk_accuracy: acc,
                utterance_accuracy: 1.0,
            });
        }
        let fig = robustness_figure(&r, 16);
        let gmm = fig.panels[0].series.last().unwrap();
        assert_eq!(gmm.label, crate::GMM_BASELINE);
        assert_eq!(gmm.line.dash, Dash::Solid);
        let clean = conditions(&r)
            .iter()
            .position(|c| *c == Condition::Clean)
            .unwrap();
        assert_eq!(gmm.points.len(), 1);
        assert_eq!(gmm.points[0].0, clean as f64);
        assert!((gmm.points[0].1 - 80.0).abs() < 1e-9, "{:?}", gmm.points);
        // Every model keeps its own (colour, marker): no two series look the same.
        let looks: Vec<_> = fig.panels[0]
            .series
            .iter()
            .map(|s| (s.line.colour, s.line.dash, s.line.marker))
            .collect();
        for (i, a) in looks.iter().enumerate() {
            assert!(!looks[..i].contains(a), "two series drawn alike: {a:?}");
        }
    }
}
