//! Method 002 end to end from in-memory inputs: split, train on the training rows, embed every row,
//! and compare raw supervectors, i-vectors (when given) and AE codes under both protocols.

use std::path::Path;

use candle_core::Device;
use invar_data::SupervectorSet;
use invar_eval::PairMetric;
use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::evaluate::{compare_rows, trial_caps, ComparisonRow, Protocol, ProtocolSplit};
use crate::rows::RowAccess;
use crate::train::{train, Trained};
use crate::{Error, Result, SupervectorConfig};

/// Counts of the split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitCounts {
    pub train_rows: usize,
    pub train_speakers: usize,
    pub closed_rows: usize,
    pub open_rows: usize,
    pub open_speakers: usize,
}

/// What [`run`] returns: the split, the comparison table, the codes of every row of the input
/// matrix, and the trained model (with the training summary).
#[derive(Debug)]
pub struct Report {
    pub split: ProtocolSplit,
    pub counts: SplitCounts,
    pub table: Vec<ComparisonRow>,
    pub codes: Matrix,
    pub model: Trained,
}

/// The distances the seed names.
pub const METRICS: [PairMetric; 2] = [PairMetric::Angular, PairMetric::Euclidean];

/// Runs method 002 on `set` (and compares with `ivectors`, one row per supervector, if given),
/// writing the training run into `run_dir`; `resume` continues it from its newest good checkpoint.
pub fn run(
    set: &SupervectorSet,
    ivectors: Option<&Matrix>,
    config: &SupervectorConfig,
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Report> {
    run_rows(
        &set.vectors,
        &set.labels,
        ivectors,
        config,
        run_dir,
        device,
        resume,
    )
}

/// [`run`] on supervector rows held or streamed ([`crate::SupervectorRows`]) with speaker
/// `labels` (one per row): the same results either way.
pub fn run_rows(
    vectors: &dyn RowAccess,
    labels: &[usize],
    ivectors: Option<&Matrix>,
    config: &SupervectorConfig,
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Report> {
    config.validate()?;
    let n = vectors.shape().0;
    if labels.len() != n {
        return Err(Error::shape(
            "speaker labels (one per supervector)",
            n,
            labels.len(),
        ));
    }
    if let Some(iv) = ivectors {
        if iv.rows != n {
            return Err(Error::shape(
                "i-vector rows (one per supervector)",
                n,
                iv.rows,
            ));
        }
    }
    let split = ProtocolSplit::new(labels, &config.protocol, config.seed)?;
    let distinct = |rows: &[usize]| {
        let mut s: Vec<usize> = rows.iter().map(|&r| labels[r]).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    let counts = SplitCounts {
        train_rows: split.train.len(),
        train_speakers: distinct(&split.train),
        closed_rows: split.closed_test.len(),
        open_rows: split.open_test.len(),
        open_speakers: distinct(&split.open_test),
    };
    tracing::info!(?counts, "protocol split");
    let train_labels: Vec<usize> = split.train.iter().map(|&r| labels[r]).collect();
    let trained = train(
        vectors,
        &split.train,
        &train_labels,
        config,
        run_dir,
        device,
        resume,
    )?;
    let codes = trained.embed(vectors, 256)?;
    let mut reps: Vec<(&str, &dyn RowAccess)> = vec![("raw", vectors)];
    if let Some(iv) = ivectors {
        reps.push(("ivector", iv));
    }
    reps.push(("ae", &codes));
    let caps = trial_caps(&config.protocol, config.seed);
    let mut table = Vec::new();
    for (protocol, rows) in [
        (Protocol::Closed, &split.closed_test),
        (Protocol::Open, &split.open_test),
    ] {
        if rows.len() < 2 {
            tracing::warn!("the {protocol} protocol has no test rows; skipped");
            continue;
        }
        for (name, m) in &reps {
            table.extend(compare_rows(
                protocol,
                name,
                *m,
                labels,
                rows,
                &METRICS,
                &config.protocol.p_targets,
                &caps,
            )?);
        }
    }
    Ok(Report {
        split,
        counts,
        table,
        codes,
        model: trained,
    })
}
