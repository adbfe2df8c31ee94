//! Where a feature set's matrices live, behind [`FeatureSet`](crate::FeatureSet): one `<id>.npy`
//! per utterance (invar's own format), or a Kaldi archive (`feats.ark` + `feats.scp`; an entry's
//! manifest path then reads `feats.ark:OFFSET`). Sets without an invar manifest open too:
//! a Kaldi `scp` given directly (or a folder holding `feats.scp`, as a Kaldi data directory does,
//! with its `utt2spk` when present) and a plain folder of `<id>.npy` files as fastabx reads them.
//! Such sets carry no `config.json`, so stages that need frame timing take it from their flags.

use std::path::{Path, PathBuf};

use invar_io::kaldi::ArkWriter;
use invar_io::Matrix;

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{check_id, Error, FeatureEntry, Result, Split, CONFIG, MANIFEST};

/// The Kaldi archive and index names inside a feature set written as [`FeatureFormat::Kaldi`].
pub const KALDI_ARK: &str = "feats.ark";
/// See [`KALDI_ARK`].
pub const KALDI_SCP: &str = "feats.scp";

/// How a feature set stores its matrices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureFormat {
    /// One `<id>.npy` per utterance.
    #[default]
    Npy,
    /// One binary float Kaldi archive (`feats.ark`) with its index (`feats.scp`).
    Kaldi,
}

impl std::fmt::Display for FeatureFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FeatureFormat::Npy => "npy",
            FeatureFormat::Kaldi => "kaldi",
        })
    }
}

impl std::str::FromStr for FeatureFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "npy" => Ok(FeatureFormat::Npy),
            "kaldi" => Ok(FeatureFormat::Kaldi),
            _ => Err(format!("{s:?} is not a feature format: use npy or kaldi")),
        }
    }
}

/// `FILE:OFFSET` (a matrix inside a Kaldi archive) as a manifest path; `None` for a `.npy` path.
fn ark_location(path: &Path) -> Option<(PathBuf, u64)> {
    let s = path.to_str()?;
    let (file, offset) = s.rsplit_once(':')?;
    if offset.is_empty() || !offset.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((PathBuf::from(file), offset.parse().ok()?))
}

/// Reads the matrix an entry's path names, relative to the set's folder.
pub(crate) fn load_matrix(dir: &Path, rel: &Path) -> Result<Matrix> {
    Ok(match ark_location(rel) {
        Some((file, offset)) => invar_io::kaldi::read_matrix_at(dir.join(file), offset)?,
        None => invar_io::read_npy(dir.join(rel))?,
    })
}

/// Rows `rows` of the matrix an entry's path names, with the whole matrix's shape: a `.npy` is read
/// from those rows only ([`invar_io::NpyRowReader`]); a matrix in a Kaldi archive is read whole and
/// cut (one utterance). Rows past the matrix's end are an error naming the file.
pub(crate) fn load_matrix_rows(
    dir: &Path,
    rel: &Path,
    rows: std::ops::Range<usize>,
) -> Result<(Matrix, (usize, usize))> {
    if ark_location(rel).is_none() {
        let mut reader = invar_io::NpyRowReader::open(dir.join(rel))?;
        let shape = reader.shape();
        if rows.end > shape.0 || rows.start > rows.end {
            return Err(rows_past_end(dir.join(rel), &rows, shape));
        }
        return Ok((reader.read_rows(rows.start, rows.end)?, shape));
    }
    let m = load_matrix(dir, rel)?;
    let shape = m.shape();
    if rows.end > shape.0 || rows.start > rows.end {
        return Err(rows_past_end(dir.join(rel), &rows, shape));
    }
    let data = m.data[rows.start * m.cols..rows.end * m.cols].to_vec();
    Ok((Matrix::new(rows.len(), m.cols, data)?, shape))
}

fn rows_past_end(path: PathBuf, rows: &std::ops::Range<usize>, shape: (usize, usize)) -> Error {
    Error::Mismatch {
        path,
        what: "row range",
        expected: format!(
            "rows within 0..{} of a {}×{} matrix",
            shape.0, shape.0, shape.1
        ),
        found: format!("{}..{}", rows.start, rows.end),
    }
}

/// The archive being written for a [`FeatureFormat::Kaldi`] set (or one shard of it).
#[derive(Debug)]
pub(crate) struct KaldiOut {
    ark: ArkWriter,
    ark_name: String,
    scp_name: String,
}

impl KaldiOut {
    /// `feats.ark`/`feats.scp`, or `feats.K-of-N.ark`/`.scp` for a shard.
    pub(crate) fn create(dir: &Path, shard_suffix: Option<String>) -> Result<KaldiOut> {
        let (ark_name, scp_name) = match shard_suffix {
            None => (KALDI_ARK.to_string(), KALDI_SCP.to_string()),
            Some(s) => (format!("feats.{s}.ark"), format!("feats.{s}.scp")),
        };
        Ok(KaldiOut {
            ark: ArkWriter::create(dir.join(&ark_name))?,
            ark_name,
            scp_name,
        })
    }

    /// Appends one matrix; returns the manifest path (`feats.ark:OFFSET`).
    pub(crate) fn write(&self, id: &str, m: &Matrix) -> Result<PathBuf> {
        let offset = self.ark.write(id, m)?;
        Ok(PathBuf::from(format!("{}:{offset}", self.ark_name)))
    }

    /// Renames the archive into place and writes its `scp` (with the archive's absolute path, so
    /// Kaldi tools and kaldiio read it from any folder).
    pub(crate) fn finish(self, dir: &Path) -> Result<()> {
        let abs = absolute(&dir.join(&self.ark_name))?;
        self.ark.finish(dir.join(&self.scp_name), &abs)?;
        Ok(())
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| Error::io(p, "make the path absolute", e))
}

/// Writes `feats.scp` for a merged sharded set from its manifest, read line by line (absolute
/// archive paths); an `.npy` set gets none.
pub(crate) fn write_merged_scp(dir: &Path, manifest: &Path) -> Result<()> {
    let mut scp: Option<std::io::BufWriter<std::fs::File>> = None;
    let tmp = dir.join(format!(".{KALDI_SCP}.tmp-{}", std::process::id()));
    let streamed = crate::featureset::for_each_entry(manifest, |e| {
        let Some((file, offset)) = ark_location(&e.path) else {
            return Ok(()); // an .npy set has no scp
        };
        let abs = absolute(&dir.join(file))?;
        let w = match &mut scp {
            Some(w) => w,
            None => {
                let f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
                scp.insert(std::io::BufWriter::new(f))
            }
        };
        use std::io::Write;
        writeln!(w, "{} {}:{offset}", e.id, abs.display()).map_err(|e| Error::io(&tmp, "write", e))
    });
    let finished = streamed.and_then(|()| match scp.take() {
        None => Ok(()),
        Some(w) => {
            let f = w
                .into_inner()
                .map_err(|e| Error::io(&tmp, "write", e.into_error()))?;
            f.sync_all().map_err(|e| Error::io(&tmp, "sync", e))?;
            std::fs::rename(&tmp, dir.join(KALDI_SCP))
                .map_err(|e| Error::io(dir.join(KALDI_SCP), "rename into place", e))
        }
    });
    if finished.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    finished
}

/// Opens a set that has no invar manifest: a Kaldi `scp` file, a folder with `feats.scp` and no
/// `config.json`, or a folder of `.npy` files with neither `config.json` nor any `manifest*.tsv`
/// (so an unfinished or unmerged invar set is never mistaken for one). `Ok(None)` otherwise.
pub(crate) fn open_unindexed(path: &Path) -> Result<Option<(PathBuf, Vec<FeatureEntry>)>> {
    if path.is_file() {
        if path.extension().is_none_or(|e| e != "scp") {
            return Err(Error::Mismatch {
                path: path.to_path_buf(),
                what: "features",
                expected: "a feature-set folder, or a Kaldi `.scp` file".into(),
                found: "another file".into(),
            });
        }
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        return Ok(Some((dir, from_scp(path)?)));
    }
    if !path.is_dir() || path.join(MANIFEST).exists() || path.join(CONFIG).exists() {
        return Ok(None);
    }
    let scp = path.join(KALDI_SCP);
    if scp.is_file() {
        return Ok(Some((path.to_path_buf(), from_scp(&scp)?)));
    }
    let mut npys = Vec::new();
    let listing = std::fs::read_dir(path).map_err(|e| Error::io(path, "list the folder", e))?;
    for f in listing {
        let f = f.map_err(|e| Error::io(path, "list the folder", e))?;
        let name = f.file_name().to_string_lossy().into_owned();
        if name.starts_with("manifest") && name.ends_with(".tsv") {
            return Ok(None);
        }
        if let Some(id) = name.strip_suffix(".npy") {
            npys.push(id.to_string());
        }
    }
    if npys.is_empty() {
        return Ok(None);
    }
    npys.sort();
    let mut entries = Vec::with_capacity(npys.len());
    for id in npys {
        let rel = PathBuf::from(format!("{id}.npy"));
        check_id(&id).map_err(|_| Error::Mismatch {
            path: path.join(&rel),
            what: "file name",
            expected: "`<id>.npy` with a filesystem-safe id".into(),
            found: format!("{id:?}"),
        })?;
        let (frames, dims) = invar_io::npy_shape(path.join(&rel))?;
        entries.push(FeatureEntry {
            speaker: id.clone(),
            id,
            split: Split::Unassigned,
            path: rel,
            frames,
            dims,
        });
    }
    Ok(Some((path.to_path_buf(), entries)))
}

/// Entries of a Kaldi `scp`: ids are its keys, speakers from `utt2spk` beside it (each utterance
/// its own speaker without one, Kaldi's convention), shapes from each matrix's header.
fn from_scp(scp: &Path) -> Result<Vec<FeatureEntry>> {
    let dir = scp.parent().unwrap_or(Path::new("."));
    let utt2spk = dir.join("utt2spk");
    let speakers = if utt2spk.is_file() {
        Some(read_utt2spk(&utt2spk)?)
    } else {
        None
    };
    let mut entries = Vec::new();
    for e in invar_io::kaldi::read_scp(scp)? {
        check_id(&e.key).map_err(|_| {
            Error::malformed(
                scp,
                e.line,
                "a filesystem-safe key ([A-Za-z0-9._-])",
                excerpt(&e.key),
            )
        })?;
        let speaker = match &speakers {
            None => e.key.clone(),
            Some(map) => map.get(&e.key).cloned().ok_or_else(|| Error::Mismatch {
                path: utt2spk.clone(),
                what: "speakers",
                expected: format!(
                    "a line for {:?} (named by {}:{})",
                    e.key,
                    scp.display(),
                    e.line
                ),
                found: "none".into(),
            })?,
        };
        let (frames, dims) = invar_io::kaldi::shape_at(&e.file, e.offset)?;
        let file = absolute(&e.file)?;
        entries.push(FeatureEntry {
            id: e.key,
            speaker,
            split: Split::Unassigned,
            path: PathBuf::from(format!("{}:{}", file.display(), e.offset)),
            frames,
            dims,
        });
    }
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(entries)
}

fn read_utt2spk(path: &Path) -> Result<std::collections::HashMap<String, String>> {
    let text = read_text(path)?;
    let mut out = std::collections::HashMap::new();
    for (n, line) in numbered_lines(&text) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [] => {}
            [utt, spk] => {
                if out.insert(utt.to_string(), spk.to_string()).is_some() {
                    return Err(Error::malformed(
                        path,
                        n,
                        "each utterance once",
                        excerpt(utt),
                    ));
                }
            }
            _ => {
                return Err(Error::malformed(
                    path,
                    n,
                    "`utterance speaker`",
                    excerpt(line),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::featureset::tests::{mat, origin};
    use crate::{FeatureSet, FeatureSetWriter, Shard};

    #[test]
    fn kaldi_written_set_reads_back_through_manifest_and_scp() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create_as(
            dir.path(),
            &serde_json::json!({}),
            &origin(),
            Shard::ALL,
            FeatureFormat::Kaldi,
        )
        .unwrap();
        w.write("b", "s2", Split::Test, &mat(3, 2, 1.0)).unwrap();
        w.write("a", "s1", Split::Train, &mat(2, 2, 9.0)).unwrap();
        w.finish().unwrap();
        assert!(!dir.path().join("a.npy").exists());
        let set = FeatureSet::open(dir.path()).unwrap();
        assert_eq!(set.entries()[1].path, PathBuf::from("feats.ark:2"));
        assert_eq!(set.load(&set.entries()[0]).unwrap(), mat(2, 2, 9.0));
        assert_eq!(set.load(&set.entries()[1]).unwrap(), mat(3, 2, 1.0));
        assert_eq!(set.entries()[0].speaker, "s1");
        // The scp alone: same matrices; speakers from utt2spk when one is beside it.
        let scp = dir.path().join(KALDI_SCP);
        let bare = FeatureSet::open(&scp).unwrap();
        assert_eq!(bare.entries()[0].speaker, "a", "no utt2spk: own speaker");
        assert_eq!(bare.load(&bare.entries()[1]).unwrap(), mat(3, 2, 1.0));
        std::fs::write(dir.path().join("utt2spk"), "a s1\n").unwrap();
        let e = FeatureSet::open(&scp).unwrap_err().to_string();
        assert!(e.contains("utt2spk") && e.contains("\"b\""), "{e}");
        std::fs::write(dir.path().join("utt2spk"), "a s1\nb s9\n").unwrap();
        assert_eq!(FeatureSet::open(&scp).unwrap().entries()[1].speaker, "s9");
    }

    #[test]
    fn plain_npy_folder_opens_but_an_unfinished_invar_set_does_not() {
        let dir = tempfile::tempdir().unwrap();
        invar_io::write_npy(dir.path().join("x1.npy"), &mat(4, 3, 0.0)).unwrap();
        invar_io::write_npy(dir.path().join("x0.npy"), &mat(2, 3, 5.0)).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let ids: Vec<_> = set
            .entries()
            .iter()
            .map(|e| (e.id.as_str(), e.frames))
            .collect();
        assert_eq!(ids, [("x0", 2), ("x1", 4)]);
        assert_eq!(set.load(&set.entries()[0]).unwrap(), mat(2, 3, 5.0));
        // A set whose shards have not merged is an invar set without its manifest: an error.
        std::fs::write(dir.path().join("manifest.1-of-2.tsv"), "").unwrap();
        assert!(FeatureSet::open(dir.path()).is_err());
        std::fs::remove_file(dir.path().join("manifest.1-of-2.tsv")).unwrap();
        std::fs::write(dir.path().join(CONFIG), "{}").unwrap();
        assert!(FeatureSet::open(dir.path()).is_err());
    }

    #[test]
    fn sharded_kaldi_sets_merge_into_one_scp() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ["a", "b", "c"];
        for k in 1..=2 {
            let shard = Shard::parse(&format!("{k}/2")).unwrap();
            let w = FeatureSetWriter::create_as(
                dir.path(),
                &serde_json::json!({}),
                &origin(),
                shard,
                FeatureFormat::Kaldi,
            )
            .unwrap();
            for (i, id) in ids.iter().enumerate().filter(|(i, _)| shard.contains(*i)) {
                w.write(id, "s", Split::Train, &mat(i + 1, 2, i as f32))
                    .unwrap();
            }
            w.finish().unwrap();
            crate::merge_shards(dir.path(), 2).unwrap();
        }
        let bare = FeatureSet::open(dir.path().join(KALDI_SCP)).unwrap();
        for (i, e) in bare.entries().iter().enumerate() {
            assert_eq!(bare.load(e).unwrap(), mat(i + 1, 2, i as f32));
        }
    }

    /// Issue #24: a Kaldi-format writer whose entries spill (runs of 3 over 20 utterances, written
    /// in reverse id order) commits the manifest an unspilled one commits, and every archive
    /// offset in it loads its own matrix, through the set and through the merged `feats.scp` of a
    /// two-shard run.
    #[test]
    fn kaldi_sets_spill_and_merge_from_disk() {
        let ids: Vec<String> = (0..20).map(|k| format!("u{k:02}")).collect();
        let write = |dir: &Path, run: usize, shard: Shard| {
            let w = FeatureSetWriter::create_as(
                dir,
                &serde_json::json!({}),
                &origin(),
                shard,
                FeatureFormat::Kaldi,
            )
            .unwrap()
            .with_run_size(run);
            for (i, id) in ids.iter().enumerate().rev() {
                if shard.contains(i) {
                    w.write(id, "s", Split::Train, &mat(i % 5 + 1, 2, i as f32))
                        .unwrap();
                }
            }
            w.finish().unwrap()
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(
            write(a.path(), 3, Shard::ALL),
            write(b.path(), 1000, Shard::ALL)
        );
        assert_eq!(
            std::fs::read(a.path().join(MANIFEST)).unwrap(),
            std::fs::read(b.path().join(MANIFEST)).unwrap()
        );
        // Every offset loads its own matrix, in the set and in a merged feats.scp.
        let loads_all = |set: &FeatureSet| {
            assert_eq!(set.entries().len(), 20);
            for (i, e) in set.entries().iter().enumerate() {
                let m = set.load(e).unwrap();
                assert_eq!(m, mat(i % 5 + 1, 2, i as f32), "{}", e.id);
            }
        };
        loads_all(&FeatureSet::open(a.path()).unwrap());
        let c = tempfile::tempdir().unwrap();
        for k in 1..=2 {
            write(c.path(), 3, Shard::parse(&format!("{k}/2")).unwrap());
        }
        crate::merge_shards(c.path(), 2).unwrap().unwrap();
        loads_all(&FeatureSet::open(c.path().join(KALDI_SCP)).unwrap());
    }
}
