//! EER and minDCF of one embedding folder under every back-end scoring, with the folder's own
//! speaker-disjoint split: the back-end (length normalisation, PLDA, s-norm cohort) is fitted on the
//! `train` rows of its `manifest.tsv`, every pair of `test` rows is a trial (an open-set protocol).
//!
//! ```sh
//! invar ivector extract ... --out iv          # iv/ivectors.npy, iv/manifest.tsv (id speaker split …)
//! cargo run -p invar-eval --example backend_eer -- iv/ivectors.npy iv/manifest.tsv
//! ```

use anyhow::{bail, Context};
use invar_eval::{all_pairs, verify, Backend, BackendConfig, Scoring, VerifyConfig};
use invar_io::Matrix;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [vectors, manifest] = &args[..] else {
        bail!("usage: backend_eer VECTORS.npy MANIFEST.tsv (columns id, speaker, split, … with a header)");
    };
    let x = invar_io::read_npy(vectors)?;
    let text = std::fs::read_to_string(manifest).with_context(|| manifest.clone())?;
    let rows: Vec<(String, String)> = text
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split('\t').collect();
            match f.as_slice() {
                [_, spk, split, ..] => Ok((spk.to_string(), split.to_string())),
                _ => bail!("{manifest}:{}: expected id, speaker, split columns", i + 2),
            }
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        rows.len() == x.rows,
        "{manifest}: {} rows for {} vectors",
        rows.len(),
        x.rows
    );
    let pick =
        |want: &str| -> Vec<usize> { (0..rows.len()).filter(|&i| rows[i].1 == want).collect() };
    let (train, test) = (pick("train"), pick("test"));
    anyhow::ensure!(
        !train.is_empty() && !test.is_empty(),
        "{manifest}: needs train and test rows"
    );
    let sub = |idx: &[usize]| -> anyhow::Result<Matrix> {
        Ok(Matrix::new(
            idx.len(),
            x.cols,
            idx.iter().flat_map(|&r| x.row(r).iter().copied()).collect(),
        )?)
    };
    let mut names: Vec<&str> = train.iter().map(|&r| rows[r].0.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let labels: Vec<usize> = train
        .iter()
        .map(|&r| names.binary_search(&rows[r].0.as_str()).unwrap_or(0))
        .collect();
    let backend = Backend::fit(&sub(&train)?, &labels, &BackendConfig::default())?;
    let test_m = sub(&test)?;
    let speakers: Vec<String> = test.iter().map(|&r| rows[r].0.clone()).collect();
    let trials = all_pairs(&speakers)?;
    println!(
        "fitted on {} train rows ({} speakers); {} test rows, {} trials ({} target)",
        train.len(),
        names.len(),
        test.len(),
        trials.len(),
        trials.iter().filter(|t| t.target).count()
    );
    println!("{:<12} {:>8} {:>12}", "scoring", "EER %", "minDCF@0.01");
    for s in [
        Scoring::Angular,
        Scoring::Euclidean,
        Scoring::Lnorm,
        Scoring::Plda,
        Scoring::LnormSnorm,
        Scoring::PldaSnorm,
    ] {
        let d = backend.distances(s, &test_m, &trials)?;
        let r = verify(&d, &trials, &VerifyConfig::default())?;
        println!(
            "{:<12} {:>8.2} {:>12.3}",
            s.to_string(),
            100.0 * r.eer,
            r.min_dcf[0].min_dcf
        );
    }
    Ok(())
}
