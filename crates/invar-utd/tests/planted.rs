//! Planted repeats are found with their boundaries; pure noise yields nothing; classes round-trip
//! through invar-data's class-file reader.

use invar_utd::{
    discover, discover_taking, summarize, to_classes, FragmentRef, GoldWord, UtdConfig,
    UtteranceFeatures,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

const DIMS: usize = 16;

/// `len` frames of AR(1) Gaussian noise (`x_t = ρ x_{t−1} + √(1−ρ²) ε`), like slowly varying
/// speech features when `rho > 0`.
fn noise(rng: &mut ChaCha8Rng, len: usize, rho: f32) -> Vec<f32> {
    let mut data = Vec::with_capacity(len * DIMS);
    let mut prev = [0.0f32; DIMS];
    let s = (1.0 - rho * rho).sqrt();
    for t in 0..len {
        for d in 0..DIMS {
            let e: f32 = StandardNormal.sample(rng);
            let x = if t == 0 { e } else { rho * prev[d] + s * e };
            prev[d] = x;
            data.push(x);
        }
    }
    data
}

fn utt(id: &str, data: Vec<f32>) -> UtteranceFeatures {
    UtteranceFeatures {
        id: id.to_string(),
        speaker: None,
        frames: invar_io::Matrix {
            rows: data.len() / DIMS,
            cols: DIMS,
            data,
        },
    }
}

/// Copies `segment` (frames) into `data` at frame `at`, adding Gaussian noise of std `sigma`.
fn plant(rng: &mut ChaCha8Rng, data: &mut [f32], segment: &[f32], at: usize, sigma: f32) {
    for (k, v) in segment.iter().enumerate() {
        let e: f32 = StandardNormal.sample(rng);
        data[at * DIMS + k] = v + sigma * e;
    }
}

fn planted(seed: u64) -> Vec<UtteranceFeatures> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let word = noise(&mut rng, 40, 0.3);
    let mut a = noise(&mut rng, 150, 0.3);
    let mut b = noise(&mut rng, 170, 0.3);
    plant(&mut rng, &mut a, &word, 30, 0.25);
    plant(&mut rng, &mut b, &word, 95, 0.25);
    let mut utts = vec![utt("a", a), utt("b", b)];
    for k in 0..8 {
        utts.push(utt(&format!("n{k}"), noise(&mut rng, 160, 0.3)));
    }
    utts
}

#[test]
fn planted_repeat_is_found_with_its_boundaries() {
    for seed in 0..3 {
        let utts = planted(seed);
        let d = discover(&utts, &UtdConfig::default()).unwrap();
        assert_eq!(d.pairs.len(), 1, "seed {seed}: {:?}", d.pairs);
        let p = d.pairs[0];
        let (a, b) = if p.a.utt == 0 { (p.a, p.b) } else { (p.b, p.a) };
        assert_eq!((a.utt, b.utt), (0, 1));
        for (f, start) in [(a, 30usize), (b, 95)] {
            assert!(
                f.start.abs_diff(start) <= 3 && f.end.abs_diff(start + 40) <= 3,
                "seed {seed}: {f:?} should be {start}..{}",
                start + 40
            );
        }
        assert!(p.score > 0.85, "{p:?}");
        assert_eq!(d.classes.len(), 1);
        assert_eq!(d.classes[0].len(), 2);
    }
}

#[test]
fn a_repeat_inside_one_utterance_needs_within() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let word = noise(&mut rng, 40, 0.3);
    let mut a = noise(&mut rng, 300, 0.3);
    plant(&mut rng, &mut a, &word, 20, 0.25);
    plant(&mut rng, &mut a, &word, 200, 0.25);
    let utts = vec![utt("a", a), utt("n", noise(&mut rng, 200, 0.3))];
    let mut cfg = UtdConfig::default();
    assert!(discover(&utts, &cfg).unwrap().pairs.is_empty());
    cfg.search.within = true;
    let d = discover(&utts, &cfg).unwrap();
    assert_eq!(d.pairs.len(), 1, "{:?}", d.pairs);
    let p = d.pairs[0];
    let (x, y) = if p.a.start < p.b.start {
        (p.a, p.b)
    } else {
        (p.b, p.a)
    };
    assert!(
        x.start.abs_diff(20) <= 3 && x.end.abs_diff(60) <= 3,
        "{x:?}"
    );
    assert!(
        y.start.abs_diff(200) <= 3 && y.end.abs_diff(240) <= 3,
        "{y:?}"
    );
}

#[test]
fn pure_noise_gives_no_pairs() {
    for (seed, rho) in [(1u64, 0.0f32), (2, 0.3), (3, 0.7)] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let utts: Vec<_> = (0..30)
            .map(|k| utt(&format!("n{k}"), noise(&mut rng, 200, rho)))
            .collect();
        let d = discover(&utts, &UtdConfig::default()).unwrap();
        assert!(d.pairs.is_empty(), "ρ = {rho}: {:?}", d.pairs);
        assert!(d.classes.is_empty());
    }
}

#[test]
fn classes_round_trip_through_the_class_file_reader() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let word = noise(&mut rng, 40, 0.3);
    let mut utts = Vec::new();
    for k in 0..4 {
        let mut x = noise(&mut rng, 140, 0.3);
        plant(&mut rng, &mut x, &word, 10 + 20 * k, 0.2);
        let mut u = utt(&format!("s{k}"), x);
        u.speaker = Some(if k < 2 { "A" } else { "B" }.to_string());
        utts.push(u);
    }
    let cfg = UtdConfig::default();
    let d = discover(&utts, &cfg).unwrap();
    // Four copies: six pairs (some may be missed), one class holding all four.
    assert!(d.pairs.len() >= 3, "{:?}", d.pairs);
    assert_eq!(d.classes.len(), 1, "{:?}", d.classes);
    assert_eq!(d.classes[0].len(), 4);
    let classes = to_classes(&d, &utts, &cfg.timing);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classes.txt");
    invar_data::write_classes(&path, &classes).unwrap();
    assert_eq!(invar_data::read_classes(&path).unwrap(), classes);
    // Gold: each utterance's planted span is the word "w"; pair precision 1, one type covered.
    let gold = utts
        .iter()
        .enumerate()
        .map(|(k, u)| {
            let start = (10 + 20 * k) as f64 * 0.01;
            let words = vec![
                GoldWord {
                    start: 0.0,
                    end: start,
                    label: format!("pre{k}"),
                },
                GoldWord {
                    start,
                    end: start + 0.4,
                    label: "w".into(),
                },
            ];
            (u.id.clone(), words)
        })
        .collect();
    let s = summarize(&d, &utts, &cfg.timing, Some(&gold));
    let g = s.gold.unwrap();
    assert_eq!(g.pair_precision, 1.0);
    assert_eq!(g.word_types_covered, 1);
    assert_eq!(g.word_types_repeated, 1);
    assert_eq!(g.class_purity, 1.0);
    assert_eq!(s.fragments, 4);
    // Coverage: four fragments of about 40 frames = about 1.6 s.
    assert!((s.coverage_s - 1.6).abs() < 0.15, "{}", s.coverage_s);
    // Speakers A (s0, s1) and B (s2, s3): one class across both; pairs across are those between.
    let across = d
        .pairs
        .iter()
        .filter(|p| (p.a.utt < 2) != (p.b.utt < 2))
        .count();
    assert!(across >= 1);
    assert_eq!(
        s.cross_speaker_pairs,
        Some(across as f64 / d.pairs.len() as f64)
    );
    assert_eq!(s.cross_speaker_classes, Some(1.0));
    assert_eq!(
        (g.cross_speaker_precision, g.cross_speaker_pairs_scored),
        (1.0, across)
    );
    // The four "w" tokens are covered, the four "pre" ones not; no fragment is outside words.
    assert_eq!(g.word_token_coverage, 0.5);
    assert_eq!(g.silence_fragments, 0.0);
    // With only the "pre" words aligned, every fragment lies in what the alignment calls pause.
    let pauses = gold
        .iter()
        .map(|(id, w): (&String, &Vec<GoldWord>)| (id.clone(), w[..1].to_vec()))
        .collect();
    let g = summarize(&d, &utts, &cfg.timing, Some(&pauses))
        .gold
        .unwrap();
    assert_eq!((g.silence_fragments, g.word_token_coverage), (1.0, 0.0));
    let _: &FragmentRef = &d.classes[0][0];
}

#[test]
fn a_tiny_hit_buffer_gives_the_same_discovery() {
    // 8 frame pairs in memory: the matrix is spilled as hundreds of sorted runs, merged in two
    // levels, and lines are found over batches of a few utterance pairs; nothing may change.
    let utts = planted(1);
    let reference = discover(&utts, &UtdConfig::default()).unwrap();
    assert_eq!(reference.pairs.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = UtdConfig::default();
    cfg.search.hit_buffer = 8;
    cfg.spill_dir = Some(dir.path().to_path_buf());
    let spilled = discover(&utts, &cfg).unwrap();
    assert_eq!(spilled, reference);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// Utterances whose dimension 0 is a log energy (speech about 10, pause about 0), with one shared
/// 40-frame stretch planted in utterances a and b: as speech, or as pause.
fn energy_utts(seed: u64, pause: bool) -> Vec<UtteranceFeatures> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let stretch = noise(&mut rng, 40, 0.3);
    let mut utts = Vec::new();
    for k in 0..8 {
        let mut x = noise(&mut rng, 150, 0.3);
        // Speech energy varies little (an energy range under silence.min_range without pauses).
        for t in 0..150 {
            x[t * DIMS] = 10.0 + 0.3 * x[t * DIMS];
        }
        if k < 2 {
            let at = 30 + 50 * k;
            plant(&mut rng, &mut x, &stretch, at, 0.25);
            for t in at..at + 40 {
                x[t * DIMS] = if pause { 0.0 } else { 10.0 } + 0.3 * x[t * DIMS];
            }
        }
        utts.push(utt(&format!("u{k}"), x));
    }
    utts
}

#[test]
fn the_energy_gate_keeps_pauses_from_matching() {
    // The same stretch in two utterances is found as a pair whether or not it is quiet; with the
    // gate on dimension 0 the quiet one (a shared pause) seeds nothing, the loud one still pairs.
    let mut gated = UtdConfig::default();
    gated.silence.energy_dim = Some(0);
    for seed in 0..2 {
        let quiet = energy_utts(seed, true);
        assert_eq!(
            discover(&quiet, &UtdConfig::default()).unwrap().pairs.len(),
            1
        );
        let d = discover(&quiet, &gated).unwrap();
        assert!(d.pairs.is_empty(), "seed {seed}: {:?}", d.pairs);
        // 5th–95th percentile cut at 0.2: the 80 quiet frames of 1200, nothing else.
        assert_eq!(d.counts.silent_frames, 80);
        let loud = energy_utts(seed, false);
        let d = discover(&loud, &gated).unwrap();
        assert_eq!(d.pairs.len(), 1, "seed {seed}");
        assert_eq!(d.counts.silent_frames, 0);
    }
    gated.silence.energy_dim = Some(DIMS);
    let err = discover(&energy_utts(0, true), &gated).unwrap_err();
    assert!(err.to_string().contains("silence.energy_dim"), "{err}");
}

/// Issue #24: taking the frames out of the input (held once, not twice) finds what borrowing them
/// finds, pair for pair and class for class, with hits in memory and spilled to runs, and leaves
/// each utterance its length (what the report reads) without its frames.
#[test]
fn taking_the_frames_finds_what_borrowing_finds() {
    let mut utts = planted(4);
    for (k, u) in utts.iter_mut().enumerate() {
        u.speaker = Some(format!("s{}", k % 3));
    }
    let mut spilled = UtdConfig::default();
    spilled.search.hit_buffer = 500;
    spilled.spill_dir = Some(std::env::temp_dir());
    let mut within = UtdConfig::default();
    within.search.within = true;
    within.cmvn_over = invar_utd::CmvnOver::Speaker;
    for cfg in [UtdConfig::default(), spilled, within] {
        let borrowed = discover(&utts, &cfg).unwrap();
        assert!(!borrowed.pairs.is_empty());
        let mut taken_from = utts.clone();
        let taken = discover_taking(&mut taken_from, &cfg, &|_, _, _| {}).unwrap();
        assert_eq!(taken, borrowed);
        for (t, u) in taken_from.iter().zip(&utts) {
            assert_eq!((t.frames.rows, t.frames.cols), (u.frames.rows, 0));
            assert!(t.frames.data.is_empty() && t.frames.data.capacity() == 0);
        }
        assert_eq!(
            to_classes(&taken, &taken_from, &cfg.timing),
            to_classes(&borrowed, &utts, &cfg.timing)
        );
        let a = serde_json::to_string(&summarize(&taken, &taken_from, &cfg.timing, None)).unwrap();
        let b = serde_json::to_string(&summarize(&borrowed, &utts, &cfg.timing, None)).unwrap();
        assert_eq!(a, b);
    }
}

/// Speech-like frames: `len` frames in segments of 4–10 frames, each segment one of `phones`
/// prototypes (unit vectors × 3) plus Gaussian noise of std `spread`, so that a frame has many
/// near neighbours (every frame of its phone), as MFCC frames do.
fn phones(rng: &mut ChaCha8Rng, protos: &[Vec<f32>], len: usize, spread: f32) -> Vec<f32> {
    use rand::Rng;
    let mut data = Vec::with_capacity(len * DIMS);
    while data.len() < len * DIMS {
        let p = &protos[rng.random_range(0..protos.len())];
        for _ in 0..rng.random_range(4..=10) {
            for v in p {
                let e: f32 = StandardNormal.sample(rng);
                data.push(3.0 * v + spread * e);
            }
        }
    }
    data.truncate(len * DIMS);
    data
}

/// `utts` utterances of 160 speech-like frames ([`phones`], 20 prototypes, spread 0.6); every fifth carries
/// one token of a 40-frame word made of the same phones (noise σ 0.4) at a random place.
/// Returns them and each token's (utterance, first frame).
fn tokens(seed: u64, utts: usize) -> (Vec<UtteranceFeatures>, Vec<(usize, usize)>) {
    use rand::Rng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let protos: Vec<Vec<f32>> = (0..20)
        .map(|_| {
            let v: Vec<f32> = (0..DIMS).map(|_| StandardNormal.sample(&mut rng)).collect();
            let n = v.iter().map(|x: &f32| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect()
        })
        .collect();
    let word = phones(&mut rng, &protos, 40, 0.6);
    let mut out = Vec::with_capacity(utts);
    let mut planted = Vec::new();
    for u in 0..utts {
        let mut data = phones(&mut rng, &protos, 160, 0.6);
        if u % 5 == 0 {
            let at = rng.random_range(0..120);
            plant(&mut rng, &mut data, &word, at, 0.4);
            planted.push((u, at));
        }
        out.push(utt(&format!("u{u:05}"), data));
    }
    (out, planted)
}
/// Share of the planted tokens that a discovered fragment covers by at least half.
fn token_coverage(utts: &[UtteranceFeatures], planted: &[(usize, usize)], cfg: &UtdConfig) -> f64 {
    let d = discover(utts, cfg).expect("discovery on generated frames");
    let hit = planted
        .iter()
        .filter(|&&(u, at)| {
            d.pairs.iter().flat_map(|p| [p.a, p.b]).any(|f| {
                let inter = f.end.min(at + 40).saturating_sub(f.start.max(at));
                f.utt == u && 2 * inter >= 40
            })
        })
        .count();
    hit as f64 / planted.len() as f64
}

/// Issue #24: with one beam over the whole corpus, a frame's neighbours thin out over more
/// competitors as the corpus grows, so a word's tokens that are found in a small corpus are lost
/// in one ten times larger. Searched in pools of the small corpus's size, the share found holds.
#[test]
fn a_repeated_word_is_still_found_in_a_corpus_ten_times_larger() {
    let (small, small_tokens) = tokens(7, 60);
    let (large, large_tokens) = tokens(7, 600);
    let frames = 60 * 160;
    let mut cfg = UtdConfig::default();
    cfg.search.pool_frames = frames;
    let before = token_coverage(&small, &small_tokens, &cfg);
    let pooled = token_coverage(&large, &large_tokens, &cfg);
    // The search before pools (one beam over the whole corpus): the large corpus as one pool.
    cfg.search.pool_frames = 600 * 160;
    let whole = token_coverage(&large, &large_tokens, &cfg);
    // Measured when written: 1.0, 1.0 and 0.05.
    assert!(before >= 0.9, "small corpus: {before}");
    assert!(pooled >= before - 0.05, "pooled {pooled} against {before}");
    assert!(whole < before - 0.3, "one pool: {whole} against {before}");
}

/// Issue #24: the frames written to the store and read back per pool and per utterance pair
/// (through a cache too small to hold two utterances, one that evicts, and one that holds all)
/// give the discovery the frames in memory give, pair for pair, class for class and count for
/// count: over several pools, with the linking pass, speaker normalisation and the energy gate.
#[test]
fn the_frame_store_finds_what_memory_finds() {
    let (mut words, _) = tokens(3, 120);
    for (k, u) in words.iter_mut().enumerate() {
        u.speaker = Some(format!("s{}", k % 7));
    }
    let mut plain = UtdConfig::default();
    plain.search.pool_frames = 40 * 160;
    plain.cluster.link_threshold = Some(0.7);
    let mut speaker = plain.clone();
    speaker.cmvn_over = invar_utd::CmvnOver::Speaker;
    speaker.search.hit_buffer = 2000;
    let mut gated = UtdConfig::default();
    gated.search.pool_frames = 300;
    gated.silence.energy_dim = Some(0);
    let dir = tempfile::tempdir().unwrap();
    for (utts, mut cfg) in [
        (words.clone(), plain),
        (words, speaker),
        (energy_utts(1, false), gated.clone()),
        (energy_utts(0, true), gated),
    ] {
        cfg.spill_dir = Some(dir.path().to_path_buf());
        cfg.store.frames = invar_utd::StoreFrames::Memory;
        let memory = discover(&utts, &cfg).unwrap();
        assert!(!memory.pairs.is_empty() || memory.counts.silent_frames > 0);
        for cache in [1, 8 * 160 * DIMS, 1 << 25] {
            cfg.store.frames = invar_utd::StoreFrames::Disk;
            cfg.store.cache_bytes = cache;
            let disk = discover(&utts, &cfg).unwrap();
            assert_eq!(disk, memory, "cache of {cache} bytes");
            // Auto: on disk, as the corpus is more than one pool.
            cfg.store.frames = invar_utd::StoreFrames::Auto;
            let mut taken = utts.clone();
            let auto = discover_taking(&mut taken, &cfg, &|_, _, _| {}).unwrap();
            assert_eq!(auto, memory, "cache of {cache} bytes, taking");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
    // A folder for the store that does not exist is named in the error.
    let mut cfg = UtdConfig::default();
    cfg.store.frames = invar_utd::StoreFrames::Disk;
    cfg.spill_dir = Some(dir.path().join("absent"));
    let err = discover(&planted(1), &cfg).unwrap_err().to_string();
    assert!(
        err.contains("frame store") && err.contains("absent"),
        "{err}"
    );
}

/// Issue #24: a feature set read utterance by utterance into the run (the input never held
/// whole) gives the discovery of the same utterances loaded into memory, with utterance and
/// speaker normalisation, in one pool (frames in memory) and several (the store), and returns
/// each utterance's id, speaker and length.
#[test]
fn reading_the_set_as_the_frames_are_gathered_finds_what_loading_finds() {
    let (mut utts, _) = tokens(5, 150);
    for (k, u) in utts.iter_mut().enumerate() {
        u.speaker = Some(format!("s{}", k % 4));
    }
    let dir = tempfile::tempdir().unwrap();
    let set_dir = dir.path().join("set");
    let w = invar_data::FeatureSetWriter::create(
        &set_dir,
        &serde_json::json!({}),
        &invar_data::SetOrigin::unknown(),
    )
    .unwrap();
    for u in &utts {
        let spk = u.speaker.as_deref().unwrap_or("");
        w.write(&u.id, spk, invar_data::Split::Train, &u.frames)
            .unwrap();
    }
    w.finish().unwrap();
    let set = invar_data::FeatureSet::open(&set_dir).unwrap();
    let loaded = invar_utd::load_featureset(&set).unwrap();
    let spill = dir.path().join("tmp");
    std::fs::create_dir(&spill).unwrap();
    let mut cfg = UtdConfig {
        spill_dir: Some(spill.clone()),
        ..UtdConfig::default()
    };
    cfg.cluster.link_threshold = Some(0.7);
    for pool in [150 * 160, 40 * 160] {
        for over in [invar_utd::CmvnOver::Utterance, invar_utd::CmvnOver::Speaker] {
            cfg.search.pool_frames = pool;
            cfg.cmvn_over = over;
            let reference = discover(&loaded, &cfg).unwrap();
            assert!(!reference.pairs.is_empty());
            let (d, meta) = invar_utd::discover_featureset(&set, &cfg, &|_, _, _| {}).unwrap();
            assert_eq!(d, reference, "pools of {pool} frames, {over:?}");
            // Issue #24: `invar utd` opens the set for passes (its entries never all held).
            let stream = invar_data::FeatureStream::open(&set_dir).unwrap();
            let (ds, meta_s) = invar_utd::discover_stream(&stream, &cfg, &|_, _, _| {}).unwrap();
            assert_eq!(ds, reference, "streamed: pools of {pool} frames, {over:?}");
            assert_eq!(meta.len(), loaded.len());
            assert_eq!(meta_s.len(), loaded.len());
            use invar_utd::Listing;
            for (k, u) in loaded.iter().enumerate() {
                for m in [&meta, &meta_s] {
                    assert_eq!(
                        (m.id(k), m.speaker(k), m.frames(k)),
                        (u.id.as_str(), u.speaker.as_deref(), u.frames.rows)
                    );
                }
            }
            assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0);
        }
    }
}
