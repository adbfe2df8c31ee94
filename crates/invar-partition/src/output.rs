//! What a trained partition leaves on disk: `W.npy`, `V.npy`, `mapping.json` (the hard partition),
//! `W.svg` and `W.png` (a heat map of W), and posteriorgram sets mapped through it (soft or hard).

use std::path::{Path, PathBuf};

use invar_data::{FeatureSetWriter, FeatureStream, WrittenSet};
use invar_io::Matrix;
use rayon::prelude::*;

use crate::{Error, Partition, Result, Trained};

/// `W`'s file in a model folder.
pub const W_FILE: &str = "W.npy";
/// `V`'s file in a model folder.
pub const V_FILE: &str = "V.npy";
/// The hard partition's file in a model folder.
pub const MAPPING_FILE: &str = "mapping.json";
/// The heat map's file in a model folder (with `W.png` beside it).
pub const HEATMAP_FILE: &str = "W.svg";
/// The heat map as PNG.
pub const HEATMAP_PNG: &str = "W.png";

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

impl Trained {
    /// Reads a model folder: `W.npy` (rows checked to be distributions) and `V.npy` when present
    /// (of W's shape). The partition is host data, so `device` is not used; the three methods'
    /// loaders share the signature `Trained::load(dir, device)`.
    pub fn load(dir: &Path, device: &candle_core::Device) -> Result<Self> {
        let _ = device;
        let path = dir.join(W_FILE);
        let w = invar_io::read_npy(&path)?;
        let partition = Partition::new(w).map_err(|e| Error::Model {
            path,
            reason: e.to_string(),
        })?;
        let v_path = dir.join(V_FILE);
        let v = if v_path.is_file() {
            let v = invar_io::read_npy(&v_path)?;
            if (v.rows, v.cols) != (partition.inputs(), partition.outputs()) {
                return Err(Error::Model {
                    path: v_path,
                    reason: format!(
                        "V is {}×{}, W is {}×{}",
                        v.rows,
                        v.cols,
                        partition.inputs(),
                        partition.outputs()
                    ),
                });
            }
            Some(v)
        } else {
            None
        };
        Ok(Self {
            partition,
            v,
            summary: None,
        })
    }
}

/// A heat map of `W` as `W.svg` and `W.png` beside `path` (inputs down, grouped by the output
/// class they map to and within a group by their weight there, so a hard partition reads as
/// blocks; outputs across; a colour bar of the weight).
pub fn plot_heatmap(partition: &Partition, path: &Path) -> Result<()> {
    let (m, d) = (partition.inputs(), partition.outputs());
    let rows = row_order(partition);
    let row_labels: Vec<String> = rows.iter().map(|i| i.to_string()).collect();
    let col_labels: Vec<String> = (0..d).map(|k| k.to_string()).collect();
    let values = rows
        .iter()
        .flat_map(|&i| partition.w.row(i).iter().map(|&v| f64::from(v)))
        .collect();
    let title = format!("000 partition W: {m} input classes → {d} outputs");
    let map = invar_plot::Heatmap {
        title: &title,
        x_desc: "output class",
        y_desc: "input class (grouped by output)",
        row_labels: &row_labels,
        col_labels: &col_labels,
        values,
        scale: invar_plot::Scale::Fraction,
        bar_desc: "weight W[input, output]",
        empty_desc: "",
    };
    invar_plot::save(&map, &path.with_extension("")).map_err(|e| Error::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(())
}

/// The heat map's row order: inputs grouped by the output class they map to (in output order),
/// within a group by their weight there (largest first), ties by input index.
pub fn row_order(partition: &Partition) -> Vec<usize> {
    let assignment = partition.assignment();
    let mut rows: Vec<usize> = (0..partition.inputs()).collect();
    rows.sort_by(|&a, &b| {
        let (wa, wb) = (
            partition.w.row(a)[assignment[a]],
            partition.w.row(b)[assignment[b]],
        );
        assignment[a]
            .cmp(&assignment[b])
            .then(wb.total_cmp(&wa))
            .then(a.cmp(&b))
    });
    rows
}

/// Maps every utterance of `input` through the partition (`hard`: through its binary form) into a new
/// feature set at `out`, utterances in parallel, reading `input`'s manifest a chunk at a time (memory
/// does not grow with the set); returns what the manifest holds.
pub fn apply_featureset(
    partition: &Partition,
    input: &FeatureStream,
    out: &Path,
    hard: bool,
) -> Result<WrittenSet> {
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
    input.for_each_chunk(4096, &mut |_, part| -> Result<()> {
        part.par_iter().try_for_each(|e| -> Result<()> {
            let x = input.load(e)?;
            let y = p.apply(&x)?;
            writer.write(&e.id, &e.speaker, e.split, &y)?;
            Ok(())
        })
    })?;
    Ok(writer.finish()?)
}

/// The model folder's path of each output, for reports.
pub fn model_files(dir: &Path) -> Vec<PathBuf> {
    [W_FILE, V_FILE, MAPPING_FILE, HEATMAP_FILE, HEATMAP_PNG]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Rows go by output class, then by weight: input 2 (→ 0, 0.9) before input 0 (→ 0, 0.6),
    /// then input 3 (→ 1, 1.0), then input 1 (→ 2). Both files are written, the SVG with the
    /// colour bar's caption.
    #[test]
    fn rows_are_grouped_by_output_class() {
        let w = Matrix::new(
            4,
            3,
            vec![
                0.6, 0.4, 0.0, //
                0.0, 0.1, 0.9, //
                0.9, 0.0, 0.1, //
                0.0, 1.0, 0.0,
            ],
        )
        .unwrap();
        let p = Partition::new(w).unwrap();
        assert_eq!(row_order(&p), [2, 0, 3, 1]);
        let dir = tempfile::tempdir().unwrap();
        plot_heatmap(&p, &dir.path().join(HEATMAP_FILE)).unwrap();
        assert!(dir.path().join(HEATMAP_PNG).is_file());
        let svg = std::fs::read_to_string(dir.path().join(HEATMAP_FILE)).unwrap();
        let lines: Vec<&str> = svg.lines().map(str::trim).collect();
        assert!(lines.contains(&"weight W[input, output]"));
        assert!(lines.contains(&"input class (grouped by output)"));
    }

    /// `Trained::load` reads back what `write_model` wrote (W, and V when written), and refuses a
    /// V of another shape than W, naming the file.
    #[test]
    fn a_model_folder_loads_back() {
        let v = Matrix::new(4, 2, vec![0.3, -1.0, 2.0, 0.1, -0.5, 0.4, 0.0, 1.5]).unwrap();
        let partition = Partition::from_v(&v);
        let dir = tempfile::tempdir().unwrap();
        write_model(dir.path(), &partition, Some(&v)).unwrap();
        let cpu = candle_core::Device::Cpu;
        let back = Trained::load(dir.path(), &cpu).unwrap();
        assert_eq!(back.partition.w.data, partition.w.data);
        assert_eq!(back.v.as_ref().map(|v| &v.data), Some(&v.data));
        assert!(back.summary.is_none());
        let w_only = tempfile::tempdir().unwrap();
        write_model(w_only.path(), &partition, None).unwrap();
        assert!(Trained::load(w_only.path(), &cpu).unwrap().v.is_none());
        invar_io::write_npy(
            dir.path().join(V_FILE),
            &Matrix::new(2, 2, vec![0.0; 4]).unwrap(),
        )
        .unwrap();
        let err = Trained::load(dir.path(), &cpu).unwrap_err().to_string();
        assert!(err.contains(V_FILE) && err.contains("2×2"), "{err}");
    }
}
