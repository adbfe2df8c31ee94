//! [`SetFrames`]: the utterances of a feature set (optionally one split, optionally one shard) as
//! an [`invar_io::FrameSource`], loaded from disk on demand, so that EM, MAP and i-vector
//! statistics stream a set larger than memory.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use invar_io::{FrameSource, Matrix, SourceError};

use crate::{Error, FeatureEntry, FeatureSet, FeatureStream, Result, Shard, Split, MANIFEST};

/// Some utterances of a feature set, in manifest order, each loaded (and its shape checked
/// against the manifest) only when asked for. Made by [`FeatureSet::frames_of`] or, without
/// holding the set's entries, [`FeatureStream::frames_of`].
///
/// Per utterance it holds its file's path (relative to the set's folder, all in one string) and
/// its frame count, about 30 bytes, not a manifest entry (issue #24: `gmm train`, `ivector train`
/// and their shards hold this for the whole set; the set's entries were ≈ 0.3 KB an utterance).
#[derive(Debug, Clone)]
pub struct SetFrames {
    dir: PathBuf,
    /// Every utterance's path, one after the other; utterance `i`'s is `paths[ends[i - 1]..ends[i]]`.
    paths: String,
    ends: Vec<usize>,
    frames: Vec<usize>,
    dims: usize,
}

/// [`SetFrames`] being built, entry by entry in manifest order.
struct Builder {
    frames: SetFrames,
    /// The first entry, for an error naming it when a later one has other dims.
    first: Option<String>,
    split: Option<Split>,
}

impl Builder {
    fn new(dir: &Path, split: Option<Split>, capacity: usize) -> Self {
        Builder {
            frames: SetFrames {
                dir: dir.to_path_buf(),
                paths: String::new(),
                ends: Vec::with_capacity(capacity),
                frames: Vec::with_capacity(capacity),
                dims: 0,
            },
            first: None,
            split,
        }
    }

    /// Takes `e` if it is of the split; every utterance must have the first one's dimension.
    fn push(&mut self, e: &FeatureEntry) -> Result<()> {
        if self.split.is_some_and(|s| e.split != s) {
            return Ok(());
        }
        let f = &mut self.frames;
        match &self.first {
            None => {
                self.first = Some(e.id.clone());
                f.dims = e.dims;
            }
            Some(first) if e.dims != f.dims => {
                return Err(Error::Mismatch {
                    path: f.dir.join(MANIFEST),
                    what: "feature dimensions",
                    expected: format!("{} (as {first})", f.dims),
                    found: format!("{} for {}", e.dims, e.id),
                })
            }
            Some(_) => {}
        }
        f.paths.push_str(&e.path.to_string_lossy());
        f.ends.push(f.paths.len());
        f.frames.push(e.frames);
        Ok(())
    }

    /// The utterances taken; an error naming the set's folder when there are none, since
    /// nothing can be trained on them.
    fn finish(self) -> Result<SetFrames> {
        let mut f = self.frames;
        if f.ends.is_empty() {
            return Err(Error::NoUtterances {
                path: f.dir,
                split: self.split,
            });
        }
        f.paths.shrink_to_fit();
        Ok(f)
    }
}

impl FeatureSet {
    /// The utterances of `split` (every utterance for `None`) as a streamed frame source; an
    /// error naming the set's folder when there are none, since nothing can be trained on them,
    /// and one naming the first utterance whose dimension differs from the first one's.
    pub fn frames_of(&self, split: Option<Split>) -> Result<SetFrames> {
        let mut b = Builder::new(self.dir(), split, 0);
        for e in self.entries() {
            b.push(e)?;
        }
        b.finish()
    }
}

impl FeatureStream {
    /// [`FeatureSet::frames_of`] from one pass over the manifest: the set's entries are never
    /// all held (the seal is checked at the pass's end, as every pass checks it).
    pub fn frames_of(&self, split: Option<Split>) -> Result<SetFrames> {
        let mut b = Builder::new(
            self.dir(),
            split,
            if split.is_none() { self.len() } else { 0 },
        );
        self.for_each_chunk(1024, &mut |_, chunk| {
            chunk.iter().try_for_each(|e| b.push(e))
        })?;
        b.finish()
    }
}

impl SetFrames {
    /// Keeps only the utterances of `shard` (round robin over the current order, as
    /// [`Shard::contains`] counts); a shard may be left with none.
    pub fn in_shard(self, shard: Shard) -> SetFrames {
        let mut out = SetFrames {
            dir: self.dir.clone(),
            paths: String::new(),
            ends: Vec::new(),
            frames: Vec::new(),
            dims: self.dims,
        };
        for i in (0..self.len()).filter(|&i| shard.contains(i)) {
            out.paths.push_str(self.path(i));
            out.ends.push(out.paths.len());
            out.frames.push(self.frames[i]);
        }
        out
    }

    /// The folder of the set the utterances come from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Utterance `i`'s file, relative to [`SetFrames::dir`] (`<id>.npy`, or `feats.ark:OFFSET`).
    pub fn path(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.paths[start..self.ends[i]]
    }

    /// The feature dimension of every utterance.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Frames over all the utterances, from the manifest (nothing is loaded).
    pub fn total_frames(&self) -> usize {
        self.frames.iter().sum()
    }

    /// Loads utterance `index` (`0..len()`), its shape checked against the manifest.
    pub fn load(&self, index: usize) -> Result<Matrix> {
        let Some(&frames) = self.frames.get(index) else {
            return Err(Error::OutOfRange {
                what: "utterance",
                index,
                len: self.frames.len(),
            });
        };
        let rel = Path::new(self.path(index));
        let m = crate::backend::load_matrix(&self.dir, rel)?;
        if m.shape() != (frames, self.dims) {
            return Err(Error::Mismatch {
                path: self.dir.join(rel),
                what: "matrix shape",
                expected: format!("{}×{} (from {MANIFEST})", frames, self.dims),
                found: format!("{}×{}", m.rows, m.cols),
            });
        }
        Ok(m)
    }
}

impl FrameSource for SetFrames {
    fn len(&self) -> usize {
        self.frames.len()
    }
    fn frames(&self, index: usize) -> std::result::Result<Cow<'_, Matrix>, SourceError> {
        Ok(Cow::Owned(self.load(index)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::featureset::tests::{mat, origin};
    use crate::FeatureSetWriter;

    /// Six utterances: `u0..u5`, splits train, test, train, test, train, validation; `u{i}` has `i + 1`
    /// frames of 3 dims counting up from `10 i`.
    fn six(dir: &std::path::Path) -> FeatureSet {
        let w = FeatureSetWriter::create(dir, &serde_json::json!({}), &origin()).unwrap();
        let splits = [
            Split::Train,
            Split::Test,
            Split::Train,
            Split::Test,
            Split::Train,
            Split::Validation,
        ];
        for (i, split) in splits.into_iter().enumerate() {
            w.write(
                &format!("u{i}"),
                "s",
                split,
                &mat(i + 1, 3, 10.0 * i as f32),
            )
            .unwrap();
        }
        w.finish().unwrap();
        FeatureSet::open(dir).unwrap()
    }

    /// The utterances' ids, from their file names (`<id>.npy`).
    fn ids(frames: &SetFrames) -> Vec<&str> {
        (0..frames.len())
            .map(|i| frames.path(i).trim_end_matches(".npy"))
            .collect()
    }

    #[test]
    fn a_split_keeps_its_utterances_in_manifest_order() {
        let dir = tempfile::tempdir().unwrap();
        let set = six(dir.path());
        let all = set.frames_of(None).unwrap();
        assert_eq!(ids(&all), ["u0", "u1", "u2", "u3", "u4", "u5"]);
        let train = set.frames_of(Some(Split::Train)).unwrap();
        assert_eq!(ids(&train), ["u0", "u2", "u4"]);
        assert_eq!(train.len(), 3);
        assert_eq!(train.total_frames(), 1 + 3 + 5);
        assert_eq!(
            ids(&set.frames_of(Some(Split::Test)).unwrap()),
            ["u1", "u3"]
        );
        // Sharding counts within the split: train's 2nd of 2 is its middle utterance.
        let half = train.clone().in_shard(Shard::parse("2/2").unwrap());
        assert_eq!(ids(&half), ["u2"]);
        assert_eq!(ids(&train.in_shard(Shard::ALL)), ["u0", "u2", "u4"]);
    }

    #[test]
    fn frames_are_the_sets_npy_files() {
        let dir = tempfile::tempdir().unwrap();
        let set = six(dir.path());
        let test = set.frames_of(Some(Split::Test)).unwrap();
        for (i, id) in [(0, "u1"), (1, "u3")] {
            let on_disk = invar_io::read_npy(dir.path().join(format!("{id}.npy"))).unwrap();
            let got = test.frames(i).unwrap();
            assert_eq!(*got, on_disk);
            let n: usize = id[1..].parse().unwrap();
            assert_eq!(*got, mat(n + 1, 3, 10.0 * n as f32));
        }
        let err = test.frames(2).unwrap_err().to_string();
        assert_eq!(err, "utterance index 2 is out of range: there are 2");
        // A file that no longer matches the manifest is an error naming it, not other frames.
        invar_io::write_npy(dir.path().join("u3.npy"), &mat(1, 3, 0.0)).unwrap();
        let err = test.frames(1).unwrap_err().to_string();
        assert!(
            err.contains("u3.npy") && err.contains("matrix shape"),
            "{err}"
        );
    }

    /// Issue #24: from a streamed manifest the same utterances, paths, frame counts and matrices
    /// as from the opened set, for every split, without holding the entries.
    #[test]
    fn a_stream_gives_the_sets_frames() {
        let dir = tempfile::tempdir().unwrap();
        let set = six(dir.path());
        let stream = FeatureStream::open(dir.path()).unwrap();
        for split in [
            None,
            Some(Split::Train),
            Some(Split::Test),
            Some(Split::Validation),
        ] {
            let (a, b) = (
                set.frames_of(split).unwrap(),
                stream.frames_of(split).unwrap(),
            );
            assert_eq!(ids(&a), ids(&b), "{split:?}");
            assert_eq!(
                (a.len(), a.total_frames(), a.dims()),
                (b.len(), b.total_frames(), 3)
            );
            for i in 0..a.len() {
                assert_eq!(a.load(i).unwrap(), b.load(i).unwrap());
            }
        }
        let err = stream.frames_of(Some(Split::Unassigned)).unwrap_err();
        assert!(matches!(err, Error::NoUtterances { .. }), "{err}");
    }

    /// A set of `.npy` files without a manifest may mix dimensions: refused when its frames are
    /// taken, naming the first utterance and the one that differs.
    #[test]
    fn mixed_dimensions_are_refused_naming_both_utterances() {
        let dir = tempfile::tempdir().unwrap();
        invar_io::write_npy(dir.path().join("a.npy"), &mat(2, 3, 0.0)).unwrap();
        invar_io::write_npy(dir.path().join("b.npy"), &mat(2, 4, 0.0)).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let err = set.frames_of(None).unwrap_err().to_string();
        assert!(err.contains("3 (as a)") && err.contains("4 for b"), "{err}");
    }

    #[test]
    fn an_empty_split_is_an_error_naming_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({}), &origin()).unwrap();
        w.write("a", "s", Split::Train, &mat(2, 3, 0.0)).unwrap();
        w.finish().unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let err = set.frames_of(Some(Split::Test)).unwrap_err();
        assert!(matches!(
            err,
            Error::NoUtterances {
                split: Some(Split::Test),
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            format!("{}: no utterances in split test", dir.path().display())
        );
        assert_eq!(set.frames_of(Some(Split::Train)).unwrap().len(), 1);
    }
}
