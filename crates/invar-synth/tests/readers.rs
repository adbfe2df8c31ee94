//! invar-data's corpus readers load what the writers write, with no special cases: same ids,
//! speakers, sexes, splits, paths and alignments as the generator's manifest.

use invar_synth::{generate, Layout, Sex, Split, SynthConfig};

fn same_split(a: Split, b: invar_data::Split) -> bool {
    matches!(
        (a, b),
        (Split::Train, invar_data::Split::Train) | (Split::Test, invar_data::Split::Test)
    )
}

fn check(layout: Layout, data_layout: invar_data::Layout) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cfg = SynthConfig::quick();
    let m = generate(&cfg, dir.path(), layout)?;
    let corpus = invar_data::read_corpus(data_layout, dir.path())?;
    assert_eq!(corpus.utterances.len(), m.utterances.len());
    for u in &m.utterances {
        let got = corpus
            .utterances
            .iter()
            .find(|c| c.id == u.id)
            .ok_or_else(|| anyhow::anyhow!("reader has no utterance {}", u.id))?;
        assert_eq!(got.speaker, u.speaker, "{}", u.id);
        assert!(same_split(u.split, got.split), "{}", u.id);
        assert_eq!(
            got.path.canonicalize()?,
            dir.path().join(&u.audio).canonicalize()?
        );
        let spk = m
            .speakers
            .iter()
            .find(|s| s.id == u.speaker)
            .ok_or_else(|| anyhow::anyhow!("no speaker {}", u.speaker))?;
        let sex = got.sex.ok_or_else(|| anyhow::anyhow!("{}: no sex", u.id))?;
        assert_eq!(
            sex == invar_data::Sex::Female,
            spk.sex == Sex::Female,
            "{}",
            u.id
        );
        let as_pairs = |s: &[invar_synth::Segment]| {
            s.iter()
                .map(|x| (x.start, x.end, x.label.clone()))
                .collect::<Vec<_>>()
        };
        match layout {
            Layout::Timit => {
                let phones = got
                    .phones
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("{}: no phones", u.id))?;
                let words = got
                    .words
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("{}: no words", u.id))?;
                let back = |s: &[invar_data::Segment]| {
                    s.iter()
                        .map(|x| (x.start, x.end, x.label.clone()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(back(phones), as_pairs(&u.phones), "{}", u.id);
                assert_eq!(back(words), as_pairs(&u.words), "{}", u.id);
                let txt = corpus
                    .transcripts
                    .get(&u.id)
                    .ok_or_else(|| anyhow::anyhow!("{}: no transcript", u.id))?;
                assert_eq!(
                    (txt.start, txt.end, txt.label.as_str()),
                    (0, u.samples, u.text.as_str())
                );
            }
            Layout::Elsdsr => assert!(got.phones.is_none() && got.words.is_none()),
        }
    }
    Ok(())
}

#[test]
fn timit_reader_loads_the_generated_corpus() -> anyhow::Result<()> {
    check(Layout::Timit, invar_data::Layout::Timit)
}

#[test]
fn elsdsr_reader_loads_the_generated_corpus() -> anyhow::Result<()> {
    check(Layout::Elsdsr, invar_data::Layout::Elsdsr)
}
