//! What a trained partition leaves on disk: `W.npy`, `V.npy`, `mapping.json` (the hard partition),
//! `W.svg` (a heat map of W), and posteriorgram sets mapped through it (soft or hard).

use std::path::{Path, PathBuf};

use invar_data::{FeatureEntry, FeatureSet, FeatureSetWriter};
use invar_io::Matrix;
use plotters::prelude::*;
use rayon::prelude::*;

use crate::{Error, Partition, Result};

/// `W`'s file in a model folder.
pub const W_FILE: &str = "W.npy";
/// `V`'s file in a model folder.
pub const V_FILE: &str = "V.npy";
/// The hard partition's file in a model folder.
pub const MAPPING_FILE: &str = "mapping.json";
/// The heat map's file in a model folder.
pub const HEATMAP_FILE: &str = "W.svg";

/// Writes `W.npy`, `V.npy` (when given), `mapping.json` and `W.svg` into `dir`. The numbers come
/// first; a heat map that cannot be drawn is a warning, never a lost model.
pub fn write_model(dir: &Path, partition: &Partition, v: Option<&Matrix>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Model {
        path: dir.to_path_buf(),
        reason: format!("cannot create the folder: {e}"),
    })?;
    invar_io::write_npy(dir.join(W_FILE), &partition.w)?;
    if let Some(v) = v {
        invar_io::write_npy(dir.join(V_FILE), v)?;
    }
    invar_io::write_json(dir.join(MAPPING_FILE), &partition.mapping())?;
    if let Err(e) = plot_heatmap(partition, &dir.join(HEATMAP_FILE)) {
        tracing::warn!("heat map not drawn (the model is written): {e}");
    }
    Ok(())
}

/// Reads the partition of a model folder (its `W.npy`), checking that rows are distributions.
pub fn read_model(dir: &Path) -> Result<Partition> {
    let path = dir.join(W_FILE);
    let w = invar_io::read_npy(&path)?;
    Partition::new(w).map_err(|e| Error::Model {
        path,
        reason: e.to_string(),
    })
}

/// A heat map of `W` (inputs down, outputs across, white 0 → black 1) as SVG.
pub fn plot_heatmap(partition: &Partition, path: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| Error::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    invar_plot::register_fonts().map_err(|e| err(&e))?;
    let (m, d) = (partition.inputs(), partition.outputs());
    let cell = (600 / m.max(d).max(1)).clamp(2, 12) as u32;
    let (width, height) = (d as u32 * cell + 90, m as u32 * cell + 70);
    let mut svg = String::new();
    let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("W (input class × output class)", ("sans-serif", 14))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(40)
        .build_cartesian_2d(0..d, 0..m)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("output")
        .y_desc("input")
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series((0..m).flat_map(|i| {
            (0..d).map(move |k| {
                let v = partition.w.row(i)[k].clamp(0.0, 1.0);
                let g = (255.0 * (1.0 - v)).round() as u8;
                Rectangle::new([(k, m - 1 - i), (k + 1, m - i)], RGBColor(g, g, g).filled())
            })
        }))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    drop(chart);
    drop(root);
    invar_io::write_text(path, &svg)?;
    Ok(())
}

/// Maps every utterance of `input` through the partition (`hard`: through its binary form) into a new
/// feature set at `out`, utterances in parallel; returns the written entries.
pub fn apply_featureset(
    partition: &Partition,
    input: &FeatureSet,
    out: &Path,
    hard: bool,
) -> Result<Vec<FeatureEntry>> {
    let p = if hard {
        partition.hard()
    } else {
        partition.clone()
    };
    let config = serde_json::json!({
        "stage": "partition",
        "input": input.dir(),
        "hard": hard,
        "inputs": p.inputs(),
        "outputs": p.outputs(),
        "outputs_in_use": p.mapping().outputs_in_use,
    });
    let writer = FeatureSetWriter::create(out, &config, &input.origin())?;
    input
        .entries()
        .par_iter()
        .map(|e| -> Result<()> {
            let x = input.load(e)?;
            let y = p.apply(&x)?;
            writer.write(&e.id, &e.speaker, e.split, &y)?;
            Ok(())
        })
        .collect::<Result<Vec<()>>>()?;
    Ok(writer.finish()?)
}

/// The model folder's path of each output, for reports.
pub fn model_files(dir: &Path) -> Vec<PathBuf> {
    [W_FILE, V_FILE, MAPPING_FILE, HEATMAP_FILE]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}
