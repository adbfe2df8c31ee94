//! Gathers the numbers the demo's stages wrote (their `results.json`) into one summary, and renders
//! it as the terminal table and as `report.md`. Nothing here computes a metric: every number is
//! read from a stage's output.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use invar_eval::{AbxMode, AbxResult};
use invar_supervector::ComparisonRow;
use serde::{Deserialize, Serialize};

use super::config::DemoConfig;
use super::stages::StageRecord;

/// One split of the generated corpus, as `invar synth` reported it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitSize {
    pub speakers: usize,
    pub utterances: usize,
    pub hours: f64,
}

/// The part of `invar synth`'s results.json the demo reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorpusSummary {
    pub splits: BTreeMap<String, SplitSize>,
}

/// One representation's ABX error (method 000's table).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AbxRow {
    pub representation: String,
    pub dim: usize,
    pub distance: String,
    /// Error rates in [0, 1].
    pub within: f64,
    pub across: f64,
    /// Items scored, and the triplets behind each error rate (the counts a reader needs to judge a
    /// difference).
    #[serde(default)]
    pub items: usize,
    #[serde(default)]
    pub within_triplets: u64,
    #[serde(default)]
    pub across_triplets: u64,
    /// The stage folder holding the per-pair results and plots.
    pub folder: PathBuf,
}

/// What the partition stage reported about its training (from its results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionFacts {
    pub inputs: usize,
    pub outputs: usize,
    pub outputs_in_use: usize,
    pub epochs: usize,
    pub pairs: PairFacts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairFacts {
    pub classes_used: usize,
    pub fragments: usize,
    pub same_frame_pairs: usize,
    pub diff_frame_pairs: usize,
}

/// The state of one method's section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Section<T> {
    Done(T),
    /// A stage failed; the message says which and quotes its log.
    Failed {
        error: String,
    },
    /// The method is not part of this build.
    NotAvailable {
        reason: String,
    },
}

/// Method 001's numbers: utterance accuracy of each trained CNN under each condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeakerSection {
    /// Condition labels, in the order of each row's `accuracy`.
    pub conditions: Vec<String>,
    pub rows: Vec<SpeakerRow>,
    /// Test utterances each accuracy is over (from the corpus's own summary), when known.
    #[serde(default)]
    pub test_utterances: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeakerRow {
    pub regulariser: String,
    pub unit_norm: bool,
    pub seed: u64,
    /// Utterance accuracy in [0, 1] per condition (None where the run lacked that condition).
    pub accuracy: Vec<Option<f64>>,
}

#[derive(Deserialize)]
struct RobustnessFile {
    rows: Vec<RobustnessRow>,
    /// Models whose training diverged (no rows of their own).
    #[serde(default)]
    diverged: Vec<DivergedRun>,
}

#[derive(Deserialize)]
struct DivergedRun {
    nuisance: String,
    unit_norm: bool,
    seed: u64,
}

#[derive(Deserialize)]
struct RobustnessRow {
    nuisance: String,
    unit_norm: bool,
    seed: u64,
    condition: serde_json::Value,
    utterance_accuracy: f64,
}

/// A short label for an evaluation condition of `invar speaker` (`clean`, `gain-20dB`, …).
fn condition_label(c: &serde_json::Value) -> String {
    let num = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
    match c["kind"].as_str().unwrap_or("?") {
        "clean" => "clean".to_owned(),
        "gain" => format!("gain{:+}dB", num("db")),
        "ramp" => format!("ramp{:+}..{:+}dB", num("from_db"), num("to_db")),
        "logoffset" => format!("logoff{:+}", num("offset")),
        other => other.to_owned(),
    }
}

/// Method 001's table from `invar speaker robustness`'s robustness.json, with the number of test
/// utterances from `corpus`'s `invar synth` summary (results.json), if there is one.
pub fn read_speaker(folder: &Path, corpus: &Path) -> anyhow::Result<SpeakerSection> {
    let file: RobustnessFile = read(&folder.join("robustness.json"))?;
    anyhow::ensure!(
        !file.rows.is_empty() || !file.diverged.is_empty(),
        "{} has no rows",
        folder.display()
    );
    let mut conditions: Vec<String> = Vec::new();
    let mut rows: Vec<SpeakerRow> = Vec::new();
    for r in &file.rows {
        let label = condition_label(&r.condition);
        let ci = match conditions.iter().position(|c| *c == label) {
            Some(i) => i,
            None => {
                conditions.push(label);
                for row in &mut rows {
                    row.accuracy.push(None);
                }
                conditions.len() - 1
            }
        };
        let ri = match rows.iter().position(|x| {
            x.regulariser == r.nuisance && x.unit_norm == r.unit_norm && x.seed == r.seed
        }) {
            Some(i) => i,
            None => {
                rows.push(SpeakerRow {
                    regulariser: r.nuisance.clone(),
                    unit_norm: r.unit_norm,
                    seed: r.seed,
                    accuracy: vec![None; conditions.len()],
                });
                rows.len() - 1
            }
        };
        rows[ri].accuracy[ci] = Some(r.utterance_accuracy);
    }
    // A diverged model keeps its line, with no accuracies, so the table does not hide it.
    for d in &file.diverged {
        rows.push(SpeakerRow {
            regulariser: format!("{} (diverged)", d.nuisance),
            unit_norm: d.unit_norm,
            seed: d.seed,
            accuracy: vec![None; conditions.len()],
        });
    }
    let test_utterances = read_corpus(&corpus.join("results.json"))
        .ok()
        .and_then(|c| c.splits.get("test").map(|t| t.utterances));
    Ok(SpeakerSection {
        conditions,
        rows,
        test_utterances,
    })
}

fn acc(a: Option<f64>) -> String {
    a.map(|x| format!("{:.1}", 100.0 * x))
        .unwrap_or_else(|| "-".to_owned())
}

/// Method 000's numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionSection {
    pub abx: Vec<AbxRow>,
    pub partition: PartitionFacts,
    /// Where the fragment classes came from ("gold word" or "term-discovery (invar-utd)").
    pub classes: String,
}

/// Method 002's numbers: invar-supervector's comparison rows (raw, i-vector, AE; closed/open).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SupervectorSection {
    pub split: serde_json::Value,
    pub table: Vec<ComparisonRow>,
}

/// Everything `results.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoSummary {
    pub config: DemoConfig,
    pub corpus: CorpusSummary,
    pub partition: Section<PartitionSection>,
    pub speaker_cnn: Section<SpeakerSection>,
    pub supervector: Section<SupervectorSection>,
    pub stages: Vec<StageRecord>,
    pub seconds: f64,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    invar_io::read_json(path)
        .with_context(|| format!("reading the stage results {}", path.display()))
}

/// The corpus summary written by `invar synth`.
pub fn read_corpus(results: &Path) -> anyhow::Result<CorpusSummary> {
    read(results)
}

/// One ABX row from an `invar eval abx --mode both` folder, `folder` relative to the run's `root`
/// (and recorded so, whichever folder the run is read from).
pub fn read_abx(
    root: &Path,
    folder: &Path,
    representation: &str,
    dim: usize,
) -> anyhow::Result<AbxRow> {
    let results: Vec<AbxResult> = read(&root.join(folder).join("results.json"))?;
    let pick = |mode: AbxMode| {
        results
            .iter()
            .find(|r| r.mode == mode)
            .with_context(|| format!("{} has no {mode:?} result", folder.display()))
    };
    let within = pick(AbxMode::Within)?;
    let across = pick(AbxMode::Across)?;
    Ok(AbxRow {
        representation: representation.to_owned(),
        dim,
        distance: within.distance.to_string(),
        within: within.error,
        across: across.error,
        items: within.items,
        within_triplets: within.triplets,
        across_triplets: across.triplets,
        folder: folder.to_owned(),
    })
}

pub fn read_partition(folder: &Path) -> anyhow::Result<PartitionFacts> {
    read(&folder.join("results.json"))
}

#[derive(Deserialize)]
struct SupervectorResults {
    split: serde_json::Value,
    table: Vec<ComparisonRow>,
}

pub fn read_supervector(folder: &Path) -> anyhow::Result<SupervectorSection> {
    let r: SupervectorResults = read(&folder.join("results.json"))?;
    anyhow::ensure!(
        !r.table.is_empty(),
        "{} has an empty comparison table",
        folder.display()
    );
    Ok(SupervectorSection {
        split: r.split,
        table: r.table,
    })
}

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

fn corpus_line(s: &DemoSummary) -> String {
    let speakers: usize = s.corpus.splits.values().map(|x| x.speakers).sum();
    let utterances: usize = s.corpus.splits.values().map(|x| x.utterances).sum();
    let hours: f64 = s.corpus.splits.values().map(|x| x.hours).sum();
    format!(
        "generated corpus (seed {}): {speakers} speakers, {utterances} utterances, {:.1} min of audio; demo took {:.1} s",
        s.config.seed,
        hours * 60.0,
        s.seconds
    )
}

fn min_dcf(row: &ComparisonRow) -> String {
    row.min_dcf
        .first()
        .map(|(p, v)| format!("{v:.3}@{p}"))
        .unwrap_or_else(|| "-".to_owned())
}

/// The one results table printed at the end of the demo.
pub fn table(s: &DemoSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", corpus_line(s));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "(000) posteriorgram partitioning — ABX error % over all speakers' items (zs2015)"
    );
    match &s.partition {
        Section::Done(p) => {
            let _ = writeln!(
                out,
                "  {:<28} {:>4}  {:<13} {:>8} {:>8}",
                "representation", "dim", "distance", "within", "across"
            );
            for r in &p.abx {
                let _ = writeln!(
                    out,
                    "  {:<28} {:>4}  {:<13} {:>8} {:>8}",
                    r.representation,
                    r.dim,
                    r.distance,
                    pct(r.within),
                    pct(r.across)
                );
            }
            let _ = writeln!(
                out,
                "  partition: {} of {} outputs in use, {} same / {} different frame pairs from {} {} classes",
                p.partition.outputs_in_use,
                p.partition.outputs,
                p.partition.pairs.same_frame_pairs,
                p.partition.pairs.diff_frame_pairs,
                p.partition.pairs.classes_used,
                p.classes
            );
        }
        other => {
            let _ = writeln!(out, "  {}", section_note(other));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "(001) speaker CNN with invariance regularisers — accuracy clean and under gain shifts"
    );
    match &s.speaker_cnn {
        Section::Done(sp) => {
            let _ = write!(
                out,
                "  utterance accuracy %  {:<8} {:<7}",
                "reg.", "unit-L2"
            );
            for c in &sp.conditions {
                let _ = write!(out, " {c:>15}");
            }
            let _ = writeln!(out);
            for r in &sp.rows {
                let _ = write!(
                    out,
                    "  {:<19}  {:<8} {:<7}",
                    format!("seed {}", r.seed),
                    r.regulariser,
                    if r.unit_norm { "yes" } else { "no" }
                );
                for a in &r.accuracy {
                    let _ = write!(out, " {:>15}", acc(*a));
                }
                let _ = writeln!(out);
            }
        }
        other => {
            let _ = writeln!(out, "  {}", section_note(other));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "(002) supervector autoencoder — speaker verification (all pairs of the test rows)"
    );
    match &s.supervector {
        Section::Done(v) => {
            let _ = writeln!(
                out,
                "  {:<8} {:<10} {:>5}  {:<10} {:>18}  {:>7}  {:>10}",
                "protocol", "repr.", "dim", "distance", "threshold count", "EER %", "minDCF"
            );
            for r in &v.table {
                let _ = writeln!(
                    out,
                    "  {:<8} {:<10} {:>5}  {:<10} {:>8}/{:<9}  {:>7}  {:>10}",
                    r.protocol.to_string(),
                    r.representation,
                    r.dim,
                    r.metric.to_string(),
                    r.threshold_count,
                    r.nontarget_trials,
                    pct(r.eer),
                    min_dcf(r)
                );
            }
        }
        other => {
            let _ = writeln!(out, "  {}", section_note(other));
        }
    }
    out
}

fn section_note<T>(section: &Section<T>) -> String {
    match section {
        Section::Done(_) => "done".to_owned(),
        Section::Failed { error } => {
            format!("FAILED: {}", error.lines().next().unwrap_or_default())
        }
        Section::NotAvailable { reason } => format!("not available in this build: {reason}"),
    }
}

fn rel(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `report.md`: the same numbers as the table, with what they mean and where the plots are.
pub fn report_markdown(s: &DemoSummary, root: &Path) -> String {
    let mut md = String::from("# invar demo report\n\n");
    let _ = writeln!(md, "{}.\n", corpus_line(s));
    let _ = writeln!(
        md,
        "Every number below was computed by an ordinary `invar` subcommand; `recipe/run.sh` (or \
         `run.sh`, in a recipe folder) lists them in order and reruns them, and `logs/` holds each \
         one's output. The resolved configuration is `config.json`.\n"
    );

    md.push_str("## (000) Posteriorgram partitioning: phone identity without the speaker\n\n");
    match &s.partition {
        Section::Done(p) => {
            md.push_str(
                "ABX error (%) over the items of every speaker (`all.item`: the corpus's train and test `.item` files), zs2015 convention. Lower is better; \
                 *across* (A and B from one speaker, X from another) is the speaker-invariance test.\n\n",
            );
            md.push_str("| representation | dim | distance | within | across |\n| --- | ---: | --- | ---: | ---: |\n");
            for r in &p.abx {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} |",
                    r.representation,
                    r.dim,
                    r.distance,
                    pct(r.within),
                    pct(r.across)
                );
            }
            if let Some(first) = p.abx.first() {
                let same = p.abx.iter().all(|r| {
                    (r.items, r.within_triplets, r.across_triplets)
                        == (first.items, first.within_triplets, first.across_triplets)
                });
                let _ = writeln!(
                    md,
                    "\n{} items; {} within-speaker and {} across-speaker triplets{}.",
                    first.items,
                    first.within_triplets,
                    first.across_triplets,
                    if same {
                        " behind every row"
                    } else {
                        " in the first row (the rows differ: see each folder's results.json)"
                    }
                );
                if first.within_triplets.min(first.across_triplets) < 1000 {
                    md.push_str(
                        "**Too small to rank the representations:** with under a thousand \
                         triplets, differences of a point or two are within the noise of which \
                         items were drawn; give the demo more speakers and utterances (its \
                         config's `speakers`, `utterances`) to compare them.\n",
                    );
                }
            }
            let _ = writeln!(
                md,
                "\nThe partition maps {} UBM classes to {} outputs ({} in use), trained for {} epochs on \
                 {} same / {} different frame pairs aligned by DTW inside {} {} classes. {}\n",
                p.partition.inputs,
                p.partition.outputs,
                p.partition.outputs_in_use,
                p.partition.epochs,
                p.partition.pairs.same_frame_pairs,
                p.partition.pairs.diff_frame_pairs,
                p.partition.pairs.classes_used,
                p.classes,
                if p.classes.starts_with("gold") {
                    "Gold words are a topline: the pairs come from the true word alignments of every \
                     utterance, where a real run would use term discovery (`invar demo --utd`)."
                } else {
                    "The classes were discovered in the audio by invar-utd with no labels; its pair \
                     precision against the true words is in `utd/results.json`."
                }
            );
            md.push_str("Plots: ");
            let mut plots: Vec<String> = p
                .abx
                .iter()
                .map(|r| {
                    format!(
                        "[{0}]({1}/abx-across.svg)",
                        r.representation,
                        rel(&r.folder, root)
                    )
                })
                .collect();
            plots.push("[W heat map](partition/W.svg)".to_owned());
            md.push_str(&plots.join(", "));
            md.push_str(".\n\n");
        }
        other => {
            let _ = writeln!(md, "{}\n", section_note(other));
        }
    }

    md.push_str(
        "## (001) Speaker CNN with invariance regularisers: the speaker without the gain\n\n",
    );
    match &s.speaker_cnn {
        Section::Done(sp) => {
            md.push_str(
                "Utterance-level identification accuracy (%) on the ELSDSR-layout corpus's test \
                 utterances, clean and after a waveform gain, a gain ramp, or an offset of the log \
                 spectrum. One CNN per regulariser (λ·R added to the cross-entropy), with the \
                 original's unit-L2 scaling of each signal on or off: a constant gain is cancelled \
                 by that scaling, so the regularisers can only matter without it.\n\n",
            );
            md.push_str("| regulariser | unit-L2 | seed |");
            for c in &sp.conditions {
                let _ = write!(md, " {c} |");
            }
            md.push_str("\n| --- | --- | ---: |");
            for _ in &sp.conditions {
                md.push_str(" ---: |");
            }
            md.push('\n');
            for r in &sp.rows {
                let _ = write!(
                    md,
                    "| {} | {} | {} |",
                    r.regulariser,
                    if r.unit_norm { "yes" } else { "no" },
                    r.seed
                );
                for a in &r.accuracy {
                    let _ = write!(md, " {} |", acc(*a));
                }
                md.push('\n');
            }
            if let Some(n) = sp.test_utterances.filter(|&n| n > 0) {
                let _ = writeln!(
                    md,
                    "\nEach accuracy is over {n} test utterances: one utterance is {:.1} points.{}",
                    100.0 / n as f64,
                    if n < 100 {
                        " **Too small to rank the regularisers**: differences of a few \
                         utterances are noise; use more speakers and utterances, and several \
                         seeds (`crates/invar-speaker-cnn/README.md` has such a grid)."
                    } else {
                        ""
                    }
                );
            }
            md.push_str(
                "\nPlot: [chunk and utterance accuracy under every condition](speaker/robustness.svg) \
                 (also as PNG).\n\n",
            );
        }
        other => {
            let _ = writeln!(md, "{}\n", section_note(other));
        }
    }

    md.push_str("## (002) Supervector autoencoder: the speaker without what was said\n\n");
    match &s.supervector {
        Section::Done(v) => {
            md.push_str(
                "Raw MAP supervectors, i-vectors and the autoencoder's code, scored on every pair of \
                 held-out rows. *closed*: unseen utterances of the training speakers; *open*: unseen \
                 speakers. The threshold count is the seed's measure: different-speaker pairs closer \
                 than the farthest same-speaker pair (lower is better; it hangs on one outlier, hence \
                 EER and minDCF beside it).\n\n",
            );
            md.push_str("| protocol | representation | dim | distance | threshold count | EER % | minDCF |\n| --- | --- | ---: | --- | ---: | ---: | ---: |\n");
            for r in &v.table {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} / {} | {} | {} |",
                    r.protocol,
                    r.representation,
                    r.dim,
                    r.metric,
                    r.threshold_count,
                    r.nontarget_trials,
                    pct(r.eer),
                    min_dcf(r)
                );
            }
            let mut seen = Vec::new();
            for r in &v.table {
                if !seen.contains(&r.protocol) {
                    seen.push(r.protocol);
                    let _ = write!(
                        md,
                        "\n*{}*: {} same-speaker and {} different-speaker trials.",
                        r.protocol, r.target_trials, r.nontarget_trials
                    );
                    if r.target_trials < 100 {
                        let _ = write!(
                            md,
                            " **Too small to rank:** one same-speaker trial moves the EER by up to \
                             {:.1} points.",
                            100.0 / r.target_trials.max(1) as f64
                        );
                    }
                }
            }
            md.push_str(
                "\n\nPlots: [DET, closed set](autoencoder/det-closed.svg), \
                 [DET, open set](autoencoder/det-open.svg) (each curve's EER marked), \
                 [autoencoder training curves](autoencoder/curves.svg); each also as PNG.\n\n",
            );
        }
        other => {
            let _ = writeln!(md, "{}\n", section_note(other));
        }
    }

    md.push_str("## Stages\n\n| stage | seconds | ok |\n| --- | ---: | --- |\n");
    for st in &s.stages {
        let _ = writeln!(
            md,
            "| `{}` | {:.1} | {} |",
            st.name,
            st.seconds,
            if st.ok { "yes" } else { "no" }
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> DemoSummary {
        let mut splits = BTreeMap::new();
        splits.insert(
            "train".to_owned(),
            SplitSize {
                speakers: 6,
                utterances: 60,
                hours: 0.05,
            },
        );
        splits.insert(
            "test".to_owned(),
            SplitSize {
                speakers: 2,
                utterances: 20,
                hours: 0.01,
            },
        );
        DemoSummary {
            config: DemoConfig::default(),
            corpus: CorpusSummary { splits },
            partition: Section::Failed {
                error: "stage `partition train` failed\nmore".to_owned(),
            },
            speaker_cnn: Section::NotAvailable {
                reason: "no crate".to_owned(),
            },
            supervector: Section::NotAvailable {
                reason: "x".to_owned(),
            },
            stages: Vec::new(),
            seconds: 1.0,
        }
    }

    #[test]
    fn table_sums_the_splits_and_names_missing_sections() {
        let t = table(&summary());
        assert!(t.contains("8 speakers, 80 utterances, 3.6 min"), "{t}");
        assert!(t.contains("FAILED: stage `partition train` failed"), "{t}");
        assert!(!t.contains("more"), "only the first error line: {t}");
        assert!(t.contains("not available in this build: no crate"), "{t}");
    }

    #[test]
    fn sections_serialise_with_a_status_tag() {
        let s: Section<serde_json::Value> = Section::NotAvailable {
            reason: "r".to_owned(),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["status"], "not_available");
        assert_eq!(v["reason"], "r");
    }

    #[test]
    fn speaker_rows_pivot_conditions_into_columns() {
        let dir = tempfile::tempdir().unwrap();
        let row = |n: &str, u: bool, c: serde_json::Value, a: f64| {
            serde_json::json!({"nuisance": n, "lambda": 0.1, "unit_norm": u, "seed": 0,
                "condition": c, "chunk_accuracy": 0.0, "utterance_accuracy": a, "r": 0.0, "epochs": 2})
        };
        let clean = serde_json::json!({"kind": "clean"});
        let gain = serde_json::json!({"kind": "gain", "db": -20.0});
        let file = serde_json::json!({"config": "original", "rows": [
            row("none", false, clean.clone(), 0.5),
            row("none", false, gain.clone(), 0.25),
            row("gain", false, clean, 0.75),
        ]});
        std::fs::write(dir.path().join("robustness.json"), file.to_string()).unwrap();
        let sp = read_speaker(dir.path(), dir.path()).unwrap();
        assert_eq!(sp.conditions, ["clean", "gain-20dB"]);
        assert_eq!(sp.rows.len(), 2);
        assert_eq!(sp.rows[0].accuracy, [Some(0.5), Some(0.25)]);
        assert_eq!(sp.rows[1].regulariser, "gain");
        assert_eq!(sp.rows[1].accuracy, [Some(0.75), None]);
        assert_eq!(
            condition_label(&serde_json::json!({"kind": "ramp", "from_db": -10.0, "to_db": 10.0})),
            "ramp-10..+10dB"
        );
    }

    #[test]
    fn a_diverged_speaker_model_keeps_a_line_without_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let file = serde_json::json!({"config": "original", "rows": [
            {"nuisance": "none", "lambda": 1.0, "unit_norm": false, "seed": 0,
             "condition": {"kind": "clean"}, "chunk_accuracy": 0.5, "utterance_accuracy": 0.5,
             "r": 0.0, "epochs": 2}],
            "diverged": [{"nuisance": "offset", "lambda": 1.0, "unit_norm": false, "seed": 0,
             "reason": "loss is NaN at epoch 29, step 650"}]});
        std::fs::write(dir.path().join("robustness.json"), file.to_string()).unwrap();
        let sp = read_speaker(dir.path(), dir.path()).unwrap();
        assert_eq!(sp.rows.len(), 2);
        assert_eq!(sp.rows[1].regulariser, "offset (diverged)");
        assert_eq!(sp.rows[1].accuracy, [None]);
    }

    #[test]
    fn abx_rows_are_read_from_eval_output() {
        let dir = tempfile::tempdir().unwrap();
        let json = r#"[
          {"mode":"within","convention":"zs2015","distance":"angular","error":0.25,"items":4,
           "empty_items":[],"cells":1,"triplets":2,"pairs":[],"cell_scores":[]},
          {"mode":"across","convention":"zs2015","distance":"angular","error":0.5,"items":4,
           "empty_items":[],"cells":1,"triplets":2,"pairs":[],"cell_scores":[]}]"#;
        std::fs::create_dir_all(dir.path().join("abx")).unwrap();
        std::fs::write(dir.path().join("abx/results.json"), json).unwrap();
        let row = read_abx(dir.path(), Path::new("abx"), "mfcc", 39).unwrap();
        assert_eq!(row.folder, Path::new("abx"), "recorded relative to the run");
        assert_eq!(row.within, 0.25);
        assert_eq!(row.across, 0.5);
        assert_eq!(row.distance, "angular");
        std::fs::write(dir.path().join("abx/results.json"), "[]").unwrap();
        assert!(read_abx(dir.path(), Path::new("abx"), "mfcc", 39).is_err());
    }
}
