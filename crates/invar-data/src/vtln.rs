//! Per-speaker VTLN warp factors (Kaldi's `spk2warp`: one `speaker warp` line each) and the
//! front-end each speaker's utterances are computed with.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use invar_audio::Frontend;
use serde::{Deserialize, Serialize};

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{Error, Result, Utterance};

/// Speaker → VTLN warp factor. Read from and written as a `speaker warp` text file (Kaldi's
/// `spk2warp`); carried in a feature job's `config.json` so the set records how it was warped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VtlnWarps(pub BTreeMap<String, f32>);

impl VtlnWarps {
    /// Reads a `speaker warp` file: one speaker and one factor per line, separated by white
    /// space; blank lines and lines starting with `#` are skipped. A line with another shape, a
    /// factor that is not a finite number in (0, 10], or a speaker given twice is an error naming
    /// the file and line.
    pub fn read(path: &Path) -> Result<VtlnWarps> {
        let text = read_text(path)?;
        let mut warps = BTreeMap::new();
        let mut first_line = HashMap::new();
        for (line, l) in numbered_lines(&text) {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let bad = |expected: &str| Error::Malformed {
                path: path.to_path_buf(),
                line,
                expected: expected.to_string(),
                found: excerpt(l),
            };
            let mut fields = t.split_whitespace();
            let (Some(speaker), Some(warp), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad("two fields: `speaker warp`"));
            };
            let warp: f32 = warp
                .parse()
                .map_err(|_| bad("a warp factor that is a number, e.g. `spk1 0.95`"))?;
            if !(warp.is_finite() && warp > 0.0 && warp <= 10.0) {
                return Err(bad("a warp factor in (0, 10] (1 = no warp)"));
            }
            if let Some(first) = first_line.insert(speaker.to_string(), line) {
                return Err(bad(&format!(
                    "each speaker once ({speaker} is already on line {first})"
                )));
            }
            warps.insert(speaker.to_string(), warp);
        }
        Ok(VtlnWarps(warps))
    }

    /// The file [`VtlnWarps::read`] reads: `speaker warp` lines in speaker order.
    pub fn to_text(&self) -> String {
        self.0.iter().map(|(s, w)| format!("{s} {w}\n")).collect()
    }

    /// The factor of `speaker`, if listed.
    pub fn get(&self, speaker: &str) -> Option<f32> {
        self.0.get(speaker).copied()
    }

    /// One front-end per speaker of `utterances`, `base` with its mel bank warped by the speaker's
    /// factor (shared FFT plan and DCT). A speaker without a factor is an error naming it, one of
    /// its utterances and `source` (where the factors came from).
    pub fn frontends<'u>(
        &self,
        base: &Frontend,
        utterances: impl IntoIterator<Item = &'u Utterance>,
        source: &str,
    ) -> Result<HashMap<String, Frontend>> {
        let mut out = HashMap::new();
        for u in utterances {
            if out.contains_key(&u.speaker) {
                continue;
            }
            let warp = self.get(&u.speaker).ok_or_else(|| Error::Config {
                field: "vtln_warps",
                reason: format!(
                    "speaker {} (utterance {}) has no warp factor in {source}; estimate one \
                     for every speaker (`invar vtln estimate`) or add a `{} 1.0` line",
                    u.speaker, u.id, u.speaker
                ),
            })?;
            out.insert(u.speaker.clone(), base.with_vtln_warp(warp)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report
    use super::*;

    fn read(text: &str) -> Result<VtlnWarps> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("spk2warp");
        std::fs::write(&p, text).unwrap();
        VtlnWarps::read(&p)
    }

    #[test]
    fn reads_speaker_warp_lines_and_writes_them_back() {
        let w = read("# estimated\nFAKS0 0.95\r\n\n  MDAB0\t1.2 \n").unwrap();
        assert_eq!(w.get("FAKS0"), Some(0.95));
        assert_eq!(w.get("MDAB0"), Some(1.2));
        assert_eq!(w.get("nobody"), None);
        assert_eq!(w.to_text(), "FAKS0 0.95\nMDAB0 1.2\n");
        assert_eq!(read(&w.to_text()).unwrap(), w);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        for (text, line, expect) in [
            ("a 1.0\nb\n", 2, "two fields"),
            ("a 1.0 x\n", 1, "two fields"),
            ("a one\n", 1, "a number"),
            ("a 1.0\nb 0\n", 2, "(0, 10]"),
            ("a NaN\n", 1, "(0, 10]"),
            ("a 1.0\nb 1.1\na 0.9\n", 3, "already on line 1"),
        ] {
            let err = read(text).unwrap_err().to_string();
            assert!(
                err.contains("spk2warp") && err.contains(expect),
                "{text:?}: {err}"
            );
            assert!(
                err.contains(&format!(":{line}")) || err.contains(&format!("line {line}")),
                "{err}"
            );
        }
    }
}
