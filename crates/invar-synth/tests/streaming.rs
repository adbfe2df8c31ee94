//! The streamed corpus writer (issue #24) writes what the collected one wrote: the manifest as
//! `serde_json::to_writer_pretty` of the whole [`Manifest`] plus a newline, and the `.item` files as
//! [`item_text`] of every utterance re-rendered from the plan, on random small configs that cross
//! the writer's chunk boundaries (64 utterances).

use invar_synth::{
    generate_streaming, generate_with_progress, item_text, CorpusPlan, Layout, Manifest, Split,
    SynthConfig, CONFIG_FILE, MANIFEST_FILE,
};
use proptest::prelude::*;

fn check(cfg: &SynthConfig, layout: Layout) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let manifest: Manifest = generate_with_progress(cfg, dir.path(), layout, &|_, _| {})?;
    let plan = CorpusPlan::new(cfg, layout)?;
    let planned: Vec<_> = plan.utterances().collect();
    assert_eq!(manifest.utterances.len(), planned.len());
    assert_eq!(plan.utterance_count(), planned.len());

    // The manifest file: the bytes the collected writer produced.
    let mut expected = serde_json::to_vec_pretty(&manifest)?;
    expected.push(b'\n');
    let written = std::fs::read(dir.path().join(MANIFEST_FILE))?;
    assert!(
        written == expected,
        "{MANIFEST_FILE} differs from the collected manifest"
    );
    let mut config = serde_json::to_vec_pretty(&plan.config)?;
    config.push(b'\n');
    assert!(std::fs::read(dir.path().join(CONFIG_FILE))? == config);

    // Each record is the plan's utterance, and each .item file the one made from every rendering.
    let rendered: Vec<_> = planned.iter().map(|u| plan.render(u)).collect();
    for ((u, r), rec) in planned.iter().zip(&rendered).zip(&manifest.utterances) {
        assert_eq!(rec.id, u.id);
        assert_eq!(rec.split, u.split);
        assert_eq!(rec.samples, r.samples.len() as u64);
        assert_eq!(
            (&rec.phones, &rec.words, &rec.text),
            (&r.phones, &r.words, &r.text)
        );
    }
    let mut item_files = Vec::new();
    for split in [Split::Train, Split::Test] {
        let rows: Vec<_> = manifest
            .utterances
            .iter()
            .zip(&rendered)
            .filter(|(rec, _)| rec.split == split)
            .map(|(rec, r)| (rec, &r.tokens))
            .collect();
        let name = format!("{}.item", split.name());
        let path = dir.path().join(&name);
        if rows.is_empty() {
            assert!(!path.exists(), "{name} written for an empty split");
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        assert!(
            text == item_text(&rows, manifest.sample_rate),
            "{name} differs"
        );
        item_files.push(name);
    }
    assert_eq!(manifest.item_files, item_files);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]
    #[test]
    fn streamed_files_equal_the_collected_ones(
        speakers in 1usize..6,
        utterances in 1usize..40,
        seed in 0u64..1000,
        elsdsr in any::<bool>(),
    ) {
        let cfg = SynthConfig { speakers, utterances, seed, ..SynthConfig::quick() };
        let layout = if elsdsr { Layout::Elsdsr } else { Layout::Timit };
        prop_assert!(check(&cfg, layout).is_ok(), "{:?}", check(&cfg, layout).err());
    }
}

#[test]
fn a_corpus_across_several_chunks() -> anyhow::Result<()> {
    // 150 utterances: two full chunks and a partial one.
    let cfg = SynthConfig {
        speakers: 5,
        utterances: 30,
        ..SynthConfig::quick()
    };
    check(&cfg, Layout::Timit)
}

#[test]
fn the_callback_sees_every_record_in_corpus_order() -> anyhow::Result<()> {
    let cfg = SynthConfig {
        speakers: 3,
        utterances: 30,
        ..SynthConfig::quick()
    };
    let dir = tempfile::tempdir()?;
    let mut ids = Vec::new();
    let written = generate_streaming(&cfg, dir.path(), Layout::Timit, &|_, _| {}, &mut |r| {
        ids.push(r.id.clone())
    })?;
    let plan = CorpusPlan::new(&cfg, Layout::Timit)?;
    let planned: Vec<_> = plan.utterances().map(|u| u.id).collect();
    assert_eq!(ids, planned);
    assert_eq!(written.speakers.len(), 3);
    Ok(())
}
