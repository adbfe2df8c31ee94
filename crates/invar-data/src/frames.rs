//! [`SetFrames`]: the utterances of a feature set (optionally one split, optionally one shard) as
//! an [`invar_io::FrameSource`], loaded from disk on demand, so that EM, MAP and i-vector
//! statistics stream a set larger than memory.

use std::borrow::Cow;

use invar_io::{FrameSource, Matrix, SourceError};

use crate::{Error, FeatureEntry, FeatureSet, Result, Shard, Split};

/// Some utterances of a [`FeatureSet`], in manifest order, each loaded (and its shape checked
/// against the manifest) only when asked for. Made by [`FeatureSet::frames_of`].
#[derive(Debug, Clone)]
pub struct SetFrames<'a> {
    set: &'a FeatureSet,
    entries: Vec<&'a FeatureEntry>,
}

impl FeatureSet {
    /// The utterances of `split` (every utterance for `None`) as a streamed frame source; an
    /// error naming the set's folder when there are none, since nothing can be trained on them.
    pub fn frames_of(&self, split: Option<Split>) -> Result<SetFrames<'_>> {
        let entries: Vec<&FeatureEntry> = self
            .entries()
            .iter()
            .filter(|e| split.is_none_or(|s| e.split == s))
            .collect();
        if entries.is_empty() {
            return Err(Error::NoUtterances {
                path: self.dir().to_path_buf(),
                split,
            });
        }
        Ok(SetFrames { set: self, entries })
    }
}

impl<'a> SetFrames<'a> {
    /// Keeps only the utterances of `shard` (round robin over the current order, as
    /// [`Shard::contains`] counts); a shard may be left with none.
    pub fn in_shard(self, shard: Shard) -> SetFrames<'a> {
        let entries = self
            .entries
            .into_iter()
            .enumerate()
            .filter(|(i, _)| shard.contains(*i))
            .map(|(_, e)| e)
            .collect();
        SetFrames {
            set: self.set,
            entries,
        }
    }

    /// The set the utterances come from.
    pub fn set(&self) -> &'a FeatureSet {
        self.set
    }

    /// The utterances' manifest entries, in order.
    pub fn entries(&self) -> &[&'a FeatureEntry] {
        &self.entries
    }

    /// Frames over all the utterances, from the manifest (nothing is loaded).
    pub fn total_frames(&self) -> usize {
        self.entries.iter().map(|e| e.frames).sum()
    }

    /// Loads utterance `index` (`0..len()`), its shape checked against the manifest.
    pub fn load(&self, index: usize) -> Result<Matrix> {
        let entry = self.entries.get(index).ok_or(Error::OutOfRange {
            what: "utterance",
            index,
            len: self.entries.len(),
        })?;
        self.set.load(entry)
    }
}

impl FrameSource for SetFrames<'_> {
    fn len(&self) -> usize {
        self.entries.len()
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

    fn ids<'a>(frames: &'a SetFrames<'_>) -> Vec<&'a str> {
        frames.entries().iter().map(|e| e.id.as_str()).collect()
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
