//! [`LinePlot`]: one or more stacked panels of lines over a shared look ([`crate::style`]), with
//! horizontal reference lines (chance) and one legend strip under the panels. Training curves,
//! robustness by condition and the generic curves of invar-eval are drawn with it.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::figure::{Figure, KeyAxis};
use crate::style::{
    draw_legend, draw_polyline, legend_height, Dash, LegendEntry, Line, Marker, COLUMN_PX, FAMILY,
    LABEL_PX, LEGEND_PX, REFERENCE, TICK_PX, TITLE_PX,
};

/// One named line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    /// `(x, y)` in the panel's coordinates; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
    pub line: Line,
}

/// A horizontal reference line (chance level) drawn grey and dashed, named at its right end.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    pub y: f64,
    pub label: String,
}

/// One chart: an x axis with explicit ticks, a y axis, its lines and reference lines.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Shown above the panel (empty: none).
    pub title: String,
    pub x: KeyAxis,
    pub x_desc: String,
    pub y_desc: String,
    /// The y range; `None`: the data's (and references') range with 5 % padding.
    pub y_range: Option<(f64, f64)>,
    /// Explicit y ticks, whose range replaces `y_range` (a logarithmic axis: [`KeyAxis::log10`],
    /// the points' y then in log10 units); `None`: about six ticks chosen over the range.
    pub y_ticks: Option<KeyAxis>,
    pub series: Vec<Series>,
    pub references: Vec<Reference>,
    /// Mark each data point with its line's marker.
    pub markers: bool,
}

impl Panel {
    fn y_range(&self) -> (f64, f64) {
        if let Some(a) = &self.y_ticks {
            return (a.from, a.to);
        }
        if let Some(r) = self.y_range {
            return r;
        }
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.references.iter().map(|r| r.y))
            .filter(|y| y.is_finite());
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        if lo > hi {
            return (0.0, 1.0);
        }
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5 * lo.abs().max(1e-3)
        };
        (lo - pad, hi + pad)
    }
}

/// Stacked panels under one title, with one legend (every distinct label once) under them.
#[derive(Debug, Clone)]
pub struct LinePlot {
    pub title: String,
    pub panels: Vec<Panel>,
    /// Figure width (default a paper column, [`COLUMN_PX`]).
    pub width: u32,
    /// Height of each panel.
    pub panel_height: u32,
    /// Panels side by side per row (each `width / columns` wide).
    pub columns: usize,
}

impl LinePlot {
    /// A column-wide figure of `panels`, each 700 pixels high.
    pub fn new(title: impl Into<String>, panels: Vec<Panel>) -> Self {
        LinePlot {
            title: title.into(),
            panels,
            width: COLUMN_PX,
            panel_height: 700,
            columns: 1,
        }
    }

    /// Lays more than two panels out two by two across a page (two columns wide): a column-wide
    /// stack of five panels would be taller than a page.
    pub fn two_columns_when_many(mut self) -> Self {
        if self.panels.len() > 2 {
            self.columns = 2;
            self.width = 2 * COLUMN_PX;
        }
        self
    }

    fn rows(&self) -> u32 {
        self.panels.len().max(1).div_ceil(self.columns.max(1)) as u32
    }

    /// Every distinct series label once, in order of first appearance, then each reference.
    pub fn legend(&self) -> Vec<LegendEntry> {
        let mut out: Vec<LegendEntry> = Vec::new();
        for p in &self.panels {
            for s in &p.series {
                if !out.iter().any(|e| e.label == s.label) {
                    out.push(LegendEntry {
                        label: s.label.clone(),
                        line: s.line,
                        marker: p.markers,
                    });
                }
            }
        }
        out
    }

    fn title_height(&self) -> u32 {
        if self.title.is_empty() {
            0
        } else {
            TITLE_PX + 24
        }
    }
}

impl Figure for LinePlot {
    fn size(&self) -> (u32, u32) {
        let legend = legend_height(&self.legend(), self.width);
        (
            self.width,
            self.title_height() + self.panel_height * self.rows() + legend,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let e = |x: &dyn std::fmt::Display| x.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (w, h) = root.dim_in_pixel();
        let (top, rest) = root.split_vertically(self.title_height());
        if !self.title.is_empty() {
            let size = crate::style::fitting_size(&self.title, w.saturating_sub(40), TITLE_PX);
            top.titled(&self.title, (FAMILY, size)).map_err(|x| e(&x))?;
        }
        let legend = self.legend();
        let lh = legend_height(&legend, w);
        let (body, strip) = rest.split_vertically(h - self.title_height() - lh);
        let areas = body.split_evenly((self.rows() as usize, self.columns.max(1)));
        for (area, panel) in areas.iter().zip(&self.panels) {
            draw_panel(root, area, panel)?;
        }
        draw_legend(&strip, &legend)
    }
}

/// A y tick label with as many decimals as ticks over `span` need (none for a 0–100 % axis).
fn format_tick(v: f64, span: f64) -> String {
    let step = span.abs() / 6.0;
    let decimals = if step >= 1.0 || step <= 0.0 || !step.is_finite() {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    let text = format!("{v:.decimals$}");
    // "-0" reads as a sign error.
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        text.trim_start_matches('-').to_string()
    } else {
        text.replace('-', "−")
    }
}

/// Margins of a panel: room for tick labels and the axis description beside them.
const X_AREA: u32 = TICK_PX + LABEL_PX + 34;
const Y_AREA: u32 = TICK_PX * 4 + LABEL_PX + 20;

/// Draws `panel` on `area`; lines are drawn on `root` (the figure, origin at its corner) in
/// backend pixels, so dashes and markers look the same on every backend.
fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let (y0, y1) = panel.y_range();
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(16)
        .margin_right(36)
        .x_label_area_size(X_AREA)
        .y_label_area_size(Y_AREA);
    if !panel.title.is_empty() {
        builder.caption(&panel.title, (FAMILY, LABEL_PX));
    }
    match &panel.y_ticks {
        Some(axis) => {
            let mut chart = builder
                .build_cartesian_2d(panel.x.clone(), axis.clone())
                .map_err(|x| e(&x))?;
            let mut mesh = chart.configure_mesh();
            style_mesh(&mut mesh, panel);
            mesh.draw().map_err(|x| e(&x))?;
            draw_lines(root, &chart, panel, (y0, y1))
        }
        None => {
            let mut chart = builder
                .build_cartesian_2d(panel.x.clone(), y0..y1)
                .map_err(|x| e(&x))?;
            let mut mesh = chart.configure_mesh();
            style_mesh(&mut mesh, panel);
            mesh.y_labels(6)
                .y_label_formatter(&|v| format_tick(*v, y1 - y0))
                .draw()
                .map_err(|x| e(&x))?;
            draw_lines(root, &chart, panel, (y0, y1))
        }
    }
}

/// The look of every panel's grid, labels and axis descriptions.
fn style_mesh<'a, DB, X, Y>(
    mesh: &mut plotters::chart::MeshStyle<'a, '_, X, Y, DB>,
    panel: &'a Panel,
) where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    mesh.light_line_style(WHITE)
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc(&panel.x_desc)
        .y_desc(&panel.y_desc)
        .x_label_style((FAMILY, TICK_PX))
        .y_label_style((FAMILY, TICK_PX))
        .axis_desc_style((FAMILY, LABEL_PX));
}

/// Draws `panel`'s reference lines and series on `chart`, in `root`'s pixels.
fn draw_lines<DB, Y>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<KeyAxis, Y>>,
    panel: &Panel,
    (y0, y1): (f64, f64),
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let (x_lo, x_hi) = (panel.x.from.min(panel.x.to), panel.x.from.max(panel.x.to));
    let inside = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite() && p.0 >= x_lo && p.0 <= x_hi;
    for r in &panel.references {
        if !(r.y.is_finite() && r.y >= y0.min(y1) && r.y <= y0.max(y1)) {
            continue;
        }
        let a = chart.backend_coord(&(x_lo, r.y));
        let b = chart.backend_coord(&(x_hi, r.y));
        let line = Line {
            colour: REFERENCE,
            dash: Dash::Dashed,
            marker: Marker::None,
        };
        draw_polyline(root, &[a, b], &line, false)?;
        let style = TextStyle::from((FAMILY, LEGEND_PX).into_font())
            .color(&REFERENCE)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Bottom,
            ));
        root.draw_text(&r.label, &style, (b.0 - 6, b.1 - 6))
            .map_err(|x| e(&x))?;
    }
    for s in &panel.series {
        let pts: Vec<(i32, i32)> = s
            .points
            .iter()
            .filter(|p| inside(p))
            .map(|&(x, y)| chart.backend_coord(&(x, y.clamp(y0.min(y1), y0.max(y1)))))
            .collect();
        draw_polyline(root, &pts, &s.line, panel.markers)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::style::colour;

    fn plot() -> LinePlot {
        let series = |label: &str, i: usize, dash: Dash| Series {
            label: label.into(),
            points: (1..=5).map(|e| (e as f64, 10.0 * e as f64)).collect(),
            line: Line {
                colour: colour(i),
                dash,
                marker: Marker::Circle,
            },
        };
        let panel = Panel {
            title: String::new(),
            x: KeyAxis::integers(1, 5),
            x_desc: "epoch".into(),
            y_desc: "accuracy (%)".into(),
            y_range: Some((0.0, 100.0)),
            y_ticks: None,
            series: vec![
                series("training", 0, Dash::Solid),
                series("validation", 1, Dash::Dashed),
            ],
            references: vec![Reference {
                y: 6.25,
                label: "chance".into(),
            }],
            markers: true,
        };
        LinePlot::new("t", vec![panel.clone(), panel])
    }

    /// Epoch axes tick whole numbers only, at most eight, without decimals.
    #[test]
    fn integer_axes_have_whole_ticks() {
        let a = KeyAxis::integers(1, 4);
        assert_eq!(a.labels, ["1", "2", "3", "4"]);
        let a = KeyAxis::integers(1, 100);
        assert!(a.keys.len() <= 8, "{:?}", a.labels);
        assert!(a.keys.iter().all(|k| k.fract() == 0.0));
        assert_eq!(KeyAxis::linear(0.0, 1.0).labels[1], "0.2");
    }

    /// Labels shared by panels appear once in the legend, which sits in its own strip (the figure
    /// is taller than its panels by the legend's height); the SVG has the axis descriptions, the
    /// reference line's name and whole-percent ticks; the PNG has the figure's size and ink on it.
    #[test]
    fn legend_once_outside_the_panels_and_files_written() {
        crate::register_fonts().unwrap();
        let p = plot();
        assert_eq!(
            p.legend()
                .iter()
                .map(|e| e.label.as_str())
                .collect::<Vec<_>>(),
            ["training", "validation"]
        );
        let (w, h) = p.size();
        assert_eq!(w, COLUMN_PX);
        assert!(
            h > p.title_height() + 2 * p.panel_height,
            "no room for the legend"
        );
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::save(&p, &dir.path().join("l")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        let text = |t: &str| svg.lines().filter(|l| l.trim() == t).count();
        assert_eq!(text("validation"), 1);
        assert_eq!(text("accuracy (%)"), 2);
        assert_eq!(text("chance"), 2);
        assert!(
            text("100") >= 2 && text("100.0") == 0,
            "y ticks not whole percent"
        );
        let png = std::fs::read(&paths[1]).unwrap();
        let size = (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        );
        assert_eq!(size, (w, h));
    }

    /// A log axis ticks 1, 2, 5 × 10^k inside the range in the data's units (positions log10),
    /// only powers of ten past eight ticks, and refuses a bound that is not positive.
    #[test]
    fn log_axes_tick_one_two_five_in_data_units() {
        let a = KeyAxis::log10(0.25, 16.0).unwrap();
        assert_eq!(a.labels, ["0.5", "1", "2", "5", "10"]);
        for (k, l) in a.keys.iter().zip(&a.labels) {
            assert!((10f64.powf(*k) - l.parse::<f64>().unwrap()).abs() < 1e-9);
        }
        assert!((a.from - (0.25f64.log10() - 0.1)).abs() < 1e-12);
        assert!((a.to - (16f64.log10() + 0.1)).abs() < 1e-12);
        let wide = KeyAxis::log10(0.05, 5000.0).unwrap();
        assert_eq!(wide.labels, ["0.1", "1", "10", "100", "1000"]);
        let narrow = KeyAxis::log10(30.0, 40.0).unwrap();
        assert_eq!(narrow.labels, ["30", "40"]);
        assert!(KeyAxis::log10(0.0, 1.0).is_none());
        assert!(KeyAxis::log10(1.0, f64::NAN).is_none());
    }

    /// A panel with log ticks draws its own tick labels (not plotters' six) and the points
    /// inside it.
    #[test]
    fn log_panel_draws_its_ticks() {
        crate::register_fonts().unwrap();
        let mut p = plot();
        for panel in &mut p.panels {
            panel.y_ticks = KeyAxis::log10(5.0, 200.0);
            for s in &mut panel.series {
                for pt in &mut s.points {
                    pt.1 = pt.1.log10();
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = crate::save(&p, &dir.path().join("log")).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        let text = |t: &str| svg.lines().filter(|l| l.trim() == t).count();
        for t in ["10", "20", "50", "100", "200"] {
            assert_eq!(text(t), 2, "tick {t}");
        }
        assert_eq!(text("1.5"), 0, "a log10 value shown as a tick");
    }

    /// A dashed line leaves gaps: fewer pixels inked than the same line solid.
    #[test]
    fn dashes_break_the_stroke() {
        let ink = |dash: Dash| {
            let mut buf = vec![255u8; 400 * 20 * 3];
            {
                let root = BitMapBackend::with_buffer(&mut buf, (400, 20)).into_drawing_area();
                let line = Line {
                    colour: RGBColor(0, 0, 0),
                    dash,
                    marker: Marker::None,
                };
                draw_polyline(&root, &[(10, 10), (200, 10), (390, 10)], &line, false).unwrap();
                root.present().unwrap();
            }
            buf.chunks_exact(3).filter(|p| p[0] < 128).count()
        };
        let (solid, dashed, dotted) = (ink(Dash::Solid), ink(Dash::Dashed), ink(Dash::Dotted));
        assert!(solid > 0);
        assert!(
            dashed < solid * 3 / 4 && dashed > solid / 3,
            "{dashed} of {solid}"
        );
        assert!(dotted < solid * 3 / 4 && dotted > 0, "{dotted} of {solid}");
    }
}
