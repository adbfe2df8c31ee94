//! The ELSDSR layout: `train/` and `test/` folders of `<F|M><3 letters or digits>_S<a..g>.wav` (the
//! seven training paragraphs) and `<F|M><3 letters or digits>_Sr<n>.wav` (the test sentences), in
//! any case.

use std::collections::BTreeMap;
use std::path::Path;

use crate::fsutil::{find_dir_ci, list_dir, split_ext};
use crate::{Corpus, Error, Layout, Result, Sex, Split, Utterance};

const LAYOUT: &str = "ELSDSR";
const SCHEME: &str = "<F|M><3 letters or digits>_S<a..g>.wav or <F|M><3 letters or digits>_Sr<n>.wav (FAML_Sa.wav, F1ES_Sa.wav)";

/// Reads an ELSDSR folder holding `train/` and/or `test/`. The split comes from the folder; the
/// speaker is the upper-cased 4-letter code (`FAML`), the id the file stem (`FAML_Sa`).
pub fn read_elsdsr(root: &Path) -> Result<Corpus> {
    let top = list_dir(root)?;
    let mut utterances = Vec::new();
    let mut any_dir = false;
    for (split, name) in [(Split::Train, "train"), (Split::Test, "test")] {
        let Some(dir) = find_dir_ci(&top, name) else {
            continue;
        };
        any_dir = true;
        for e in list_dir(&dir)?.into_iter().filter(|e| !e.is_dir) {
            let (stem, ext) = split_ext(&e.name);
            if ext != "wav" {
                continue;
            }
            let Some((sex, speaker)) = parse_name(stem) else {
                return Err(Error::BadName {
                    path: e.path,
                    layout: LAYOUT,
                    expected: SCHEME,
                });
            };
            utterances.push(Utterance {
                sex: Some(sex),
                ..Utterance::new(stem, speaker, e.path, split)
            });
        }
    }
    if !any_dir {
        return Err(Error::NotACorpus {
            path: root.to_path_buf(),
            layout: LAYOUT,
            reason: "no train/ or test/ folder (in any case)".into(),
        });
    }
    if utterances.is_empty() {
        return Err(Error::NotACorpus {
            path: root.to_path_buf(),
            layout: LAYOUT,
            reason: "train/ and test/ hold no .wav files".into(),
        });
    }
    Corpus::new(
        Layout::Elsdsr,
        root.to_path_buf(),
        utterances,
        BTreeMap::new(),
    )
}

/// `FAML_Sa` → (female, "FAML"); `F1ES_Sa` → (female, "F1ES"); `MASM_Sr12` → (male, "MASM");
/// anything else → `None`.
pub fn parse_name(stem: &str) -> Option<(Sex, String)> {
    let (code, sentence) = stem.split_once('_')?;
    let mut chars = code.chars();
    let sex = Sex::from_code(chars.next()?)?;
    let initials = chars.as_str();
    if initials.len() != 3 || !initials.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let mut s = sentence.chars();
    if !s.next()?.eq_ignore_ascii_case(&'s') {
        return None;
    }
    let rest = s.as_str();
    let training =
        rest.len() == 1 && matches!(rest.as_bytes()[0].to_ascii_lowercase(), b'a'..=b'g');
    let test = rest.len() > 1
        && rest.as_bytes()[0].eq_ignore_ascii_case(&b'r')
        && rest[1..].bytes().all(|b| b.is_ascii_digit());
    (training || test).then(|| (sex, code.to_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_scheme() {
        assert_eq!(parse_name("FAML_Sa"), Some((Sex::Female, "FAML".into())));
        assert_eq!(parse_name("masm_sg"), Some((Sex::Male, "MASM".into())));
        assert_eq!(parse_name("MASM_Sr1"), Some((Sex::Male, "MASM".into())));
        assert_eq!(parse_name("MASM_Sr12"), Some((Sex::Male, "MASM".into())));
        // Issue 18: speaker codes with digits (refused before).
        assert_eq!(parse_name("F1ES_Sa"), Some((Sex::Female, "F1ES".into())));
        assert_eq!(parse_name("m2b3_Sr4"), Some((Sex::Male, "M2B3".into())));
        for bad in [
            "FAML_Sh", "XAML_Sa", "FAM_Sa", "FAMLX_Sa", "FAML_Sr", "FAML_Srx", "FAML_Ta", "FAML",
            "F_ML_Sa", "FAML_Sab", "1AML_Sa",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
