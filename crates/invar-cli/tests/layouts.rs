//! The corpus layouts of issue 18 through the real binary: a LibriSpeech folder of FLAC and a Kaldi
//! data directory with `segments` give the same features as the same samples in WAV; `wav.scp`
//! pipes run only with `--allow-pipes`; a list with an id column (plain or SpeechBrain CSV) keeps the
//! corpus's own ids, so its own `.item` file works; a VoxCeleb folder of M4A and its trial list come
//! in through `corpus info`, `features`, `gmm train` and `eval verify`; the LibriSpeech and Kaldi sets
//! go on through `gmm train`, `gmm posteriors` and `eval abx` with `.item` files naming their own ids.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, json, refused, s, synth, ubm, write};
use invar_audio::{read_audio, write_wav, Audio, ReadOptions};

/// A committed audio fixture of invar-audio (each made by an independent encoder from
/// `speech16k.wav`; see its `make_compressed.sh`).
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../invar-audio/tests/fixtures")
        .join(name)
}

/// `invar features --layout LAYOUT PATH --kind mfcc --out OUT [EXTRA]`.
fn features(layout: &str, path: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "features",
        "--layout",
        layout,
        s(path),
        "--kind",
        "mfcc",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    invar(&args);
}

/// The bytes of `<id>.npy` in a feature set.
fn npy(set: &Path, id: &str) -> Vec<u8> {
    let path = set.join(format!("{id}.npy"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `corpus info --json` of a corpus, as text.
fn info(layout: &str, path: &Path, extra: &[&str]) -> String {
    let json_path = path.with_extension("info.json");
    let mut args = vec!["corpus", "info", "--layout", layout, s(path)];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--json", s(&json_path)]);
    invar(&args);
    std::fs::read_to_string(json_path).unwrap()
}

/// The rest of the pipeline on a layout's feature set: a UBM, its posteriorgrams, and ABX within
/// speaker from an `.item` file naming the corpus's own ids (`(id, speaker, seconds)`: each
/// utterance cut into alternating 0.1 s items of two phones). Returns the ABX error.
fn gmm_and_abx(d: &Path, set: &Path, utterances: &[(&str, &str, f64)]) -> f64 {
    let name = set.file_name().unwrap().to_string_lossy().into_owned();
    let ubm = d.join(format!("{name}-ubm"));
    let post = d.join(format!("{name}-post"));
    invar(&[
        "gmm",
        "train",
        "--features",
        s(set),
        "--out",
        s(&ubm),
        "--components",
        "2",
        "--iters",
        "2",
    ]);
    invar(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&ubm.join("ubm.safetensors")),
        "--features",
        s(set),
        "--out",
        s(&post),
    ]);
    let mut item = String::from("#file onset offset #phone prev next speaker\n");
    for (id, speaker, seconds) in utterances {
        let n = (seconds / 0.1).round() as usize;
        for k in 0..n.saturating_sub(1) {
            let phone = if k % 2 == 0 { "a" } else { "b" };
            item.push_str(&format!(
                "{id} {:.1} {:.1} {phone} x y {speaker}\n",
                k as f64 * 0.1,
                (k + 1) as f64 * 0.1
            ));
        }
    }
    let item_path = d.join(format!("{name}.item"));
    write(&item_path, &item);
    let abx = d.join(format!("{name}-abx"));
    invar(&[
        "eval",
        "abx",
        "--item",
        s(&item_path),
        "--features",
        s(&post),
        "--out",
        s(&abx),
        "--mode",
        "within",
        "--distance",
        "symmetric-kl",
    ]);
    json(&abx.join("results.json"))[0]["error"]
        .as_f64()
        .unwrap()
}

#[test]
fn librispeech_flac_gives_the_features_of_the_same_wav() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ls = d.join("LibriSpeech");
    let chapter = ls.join("dev-clean/19/198");
    std::fs::create_dir_all(&chapter).unwrap();
    std::fs::copy(fixture("speech16k.flac"), chapter.join("19-198-0001.flac")).unwrap();
    write(&chapter.join("19-198.trans.txt"), "19-198-0001 A VOICE\n");
    let text = info("librispeech", &ls, &[]);
    assert!(text.to_lowercase().contains("flac"), "{text}");
    let list = d.join("wav.list");
    write(
        &list,
        &format!("19-198-0001 {} 19\n", s(&fixture("speech16k.wav"))),
    );
    features("librispeech", &ls, &d.join("f-flac"), &[]);
    features("list", &list, &d.join("f-wav"), &[]);
    // FLAC is lossless: the same samples, so the same bytes.
    assert_eq!(
        npy(&d.join("f-flac"), "19-198-0001"),
        npy(&d.join("f-wav"), "19-198-0001")
    );
    let manifest = std::fs::read_to_string(d.join("f-flac/manifest.tsv")).unwrap();
    assert!(
        manifest.contains("19-198-0001") && manifest.contains("\t19"),
        "{manifest}"
    );
    let e = gmm_and_abx(d, &d.join("f-flac"), &[("19-198-0001", "19", 1.0)]);
    assert!((0.0..=1.0).contains(&e), "{e}");
}

#[test]
fn kaldi_segments_and_pipes_give_the_features_of_the_cut_wavs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rec = fixture("speech16k.wav");
    let audio = read_audio(&rec, &ReadOptions::default()).unwrap();
    assert_eq!(audio.samples.len(), 16_000);
    // The same halves as WAV files of their own, in a list with ids.
    let mut list = String::new();
    for (id, speaker, range) in [("u1", "s1", 0..8000), ("u2", "s2", 8000..16_000)] {
        let path = d.join(format!("{id}.wav"));
        let cut = Audio {
            samples: audio.samples[range].to_vec(),
            sample_rate: audio.sample_rate,
        };
        write_wav(&path, &cut).unwrap();
        list.push_str(&format!("{id} {} {speaker}\n", s(&path)));
    }
    write(&d.join("cut.list"), &list);
    features("list", &d.join("cut.list"), &d.join("f-cut"), &[]);

    let data = d.join("data/train");
    write(&data.join("wav.scp"), &format!("r1 {}\n", s(&rec)));
    write(&data.join("segments"), "u1 r1 0.0 0.5\nu2 r1 0.5 -1\n");
    write(&data.join("utt2spk"), "u1 s1\nu2 s2\n");
    let text = info("kaldi", &data, &[]);
    assert!(text.contains("\"utterances\": 2"), "{text}");
    features("kaldi", &data, &d.join("f-kaldi"), &[]);
    for id in ["u1", "u2"] {
        assert_eq!(
            npy(&d.join("f-kaldi"), id),
            npy(&d.join("f-cut"), id),
            "{id}"
        );
    }
    let e = gmm_and_abx(
        d,
        &d.join("f-kaldi"),
        &[("u1", "s1", 0.5), ("u2", "s2", 0.5)],
    );
    assert!((0.0..=1.0).contains(&e), "{e}");

    // A pipe entry: refused (naming the file, the line and the flag) unless --allow-pipes. A pipe
    // has no header to read the length from, so `-1` (to the end) is refused there: give the end.
    write(&data.join("wav.scp"), &format!("r1 cat {} |\n", s(&rec)));
    write(&data.join("segments"), "u1 r1 0.0 0.5\nu2 r1 0.5 1.0\n");
    let err = refused(&[
        "features",
        "--layout",
        "kaldi",
        s(&data),
        "--kind",
        "mfcc",
        "--out",
        s(&d.join("f-refused")),
    ]);
    assert!(err.contains("wav.scp") && err.contains(":1"), "{err}");
    assert!(err.contains("allow"), "{err}");
    assert!(!d.join("f-refused").join("manifest.tsv").exists());
    let err = refused(&["corpus", "info", "--layout", "kaldi", s(&data)]);
    assert!(err.contains("wav.scp"), "{err}");
    info("kaldi", &data, &["--allow-pipes"]);
    features("kaldi", &data, &d.join("f-pipe"), &["--allow-pipes"]);
    for id in ["u1", "u2"] {
        assert_eq!(
            npy(&d.join("f-pipe"), id),
            npy(&d.join("f-cut"), id),
            "{id}"
        );
    }
}

/// The corpus's own `.item` file works once a list gives the corpus's own ids. Without an id column
/// the ids are file stems, which repeat across TIMIT speakers (`SA1`): refused, pointing to the id
/// column, instead of merged.
#[test]
fn a_list_with_ids_serves_the_corpus_own_item_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 3, 3, 4);
    features("timit", &corpus, &d.join("f-timit"), &[]);
    // Every WAV of the TIMIT-layout corpus, listed as `SPEAKER_UTT path speaker` (the item's ids)
    // and as `path speaker` (ids from the path).
    let mut wavs = Vec::new();
    for split in ["TRAIN", "TEST"] {
        for region in std::fs::read_dir(corpus.join(split)).unwrap() {
            for speaker in std::fs::read_dir(region.unwrap().path()).unwrap() {
                let speaker = speaker.unwrap().path();
                for f in std::fs::read_dir(&speaker).unwrap() {
                    let f = f.unwrap().path();
                    if f.extension().is_some_and(|e| e == "WAV") {
                        wavs.push(f);
                    }
                }
            }
        }
    }
    wavs.sort();
    assert_eq!(wavs.len(), 9);
    let name = |p: &Path, part: usize| {
        let parts: Vec<String> = p
            .iter()
            .rev()
            .take(2)
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        parts[part].clone()
    };
    let with_ids: String = wavs
        .iter()
        .map(|p| {
            let (utt, spk) = (name(p, 0).replace(".WAV", ""), name(p, 1));
            format!("{spk}_{utt} {} {spk}\n", s(p))
        })
        .collect();
    let without: String = wavs
        .iter()
        .map(|p| format!("{} {}\n", s(p), name(p, 1)))
        .collect();
    write(&d.join("ids.list"), &with_ids);
    write(&d.join("paths.list"), &without);
    features("list", &d.join("ids.list"), &d.join("f-ids"), &[]);
    let err = refused(&[
        "features",
        "--layout",
        "list",
        s(&d.join("paths.list")),
        "--kind",
        "mfcc",
        "--out",
        s(&d.join("f-paths")),
    ]);
    assert!(
        err.contains("paths.list:") && err.contains("SA1") && err.contains("id column"),
        "{err}"
    );

    let item = corpus.join("train.item");
    let abx = |set: &str| {
        let out = d.join(format!("abx-{set}"));
        invar(&[
            "eval",
            "abx",
            "--item",
            s(&item),
            "--features",
            s(&d.join(set)),
            "--out",
            s(&out),
            "--mode",
            "across",
        ]);
        json(&out.join("results.json"))
    };
    assert_eq!(abx("f-ids"), abx("f-timit"));
}

#[test]
fn speechbrain_csv_keeps_its_ids() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let csv = d.join("train.csv");
    write(
        &csv,
        &format!(
            "ID,duration,wav,spk_id\nspk1_utt1,1.0,{},spk1\nspk2_utt1,1.0,{},spk2\n",
            s(&fixture("speech16k.wav")),
            s(&fixture("speech16k.flac"))
        ),
    );
    features("list", &csv, &d.join("f"), &[]);
    assert_eq!(
        npy(&d.join("f"), "spk1_utt1"),
        npy(&d.join("f"), "spk2_utt1")
    );
    let manifest = std::fs::read_to_string(d.join("f/manifest.tsv")).unwrap();
    assert!(
        manifest.contains("spk2_utt1\t") && manifest.contains("spk2"),
        "{manifest}"
    );
}

/// VoxCeleb: `<id>/<video>/<n>.m4a|wav` read with ids `id-video-n`, features for both formats, a
/// UBM trained on them, and its own trial list scored by `eval verify --trials-format voxceleb`.
#[test]
fn voxceleb_folders_and_trial_lists_come_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let vox = d.join("vox1");
    let files = [
        ("id10001/vidA/00001.wav", "speech16k.wav"),
        ("id10001/vidB/00001.m4a", "speech16k.m4a"),
        ("id10002/vidC/00001.wav", "speech16k.wav"),
    ];
    for (rel, src) in files {
        std::fs::create_dir_all(vox.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(fixture(src), vox.join(rel)).unwrap();
    }
    let text = info("voxceleb", &vox, &[]);
    assert!(
        text.to_lowercase().contains("m4a") || text.contains("mp4"),
        "{text}"
    );
    features("voxceleb", &vox, &d.join("f"), &[]);
    for id in [
        "id10001-vidA-00001",
        "id10001-vidB-00001",
        "id10002-vidC-00001",
    ] {
        assert!(d.join("f").join(format!("{id}.npy")).is_file(), "{id}");
    }
    ubm(&d.join("f"), &d.join("ubm"), 2, 1);
    // The trial list as VoxCeleb ships it, and scores in Kaldi's form for the same pairs.
    let trials = d.join("veri_test.txt");
    write(
        &trials,
        "1 id10001/vidA/00001.wav id10001/vidB/00001.wav\n0 id10001/vidA/00001.wav id10002/vidC/00001.wav\n",
    );
    let scores = d.join("scores");
    write(
        &scores,
        "id10001-vidA-00001 id10001-vidB-00001 2.5\nid10001-vidA-00001 id10002-vidC-00001 -1.0\n",
    );
    let verify = |out: &str, format: &[&str]| {
        let mut args = vec![
            "eval",
            "verify",
            "--trials",
            s(&trials),
            "--scores",
            s(&scores),
            "--out",
        ];
        let out = d.join(out);
        args.push(s(&out));
        args.extend_from_slice(format);
        common::run(&args)
    };
    let ok = verify("v", &["--trials-format", "voxceleb"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let r = json(&d.join("v/results.json"));
    assert_eq!(r["eer"].as_f64(), Some(0.0), "{r}");
    assert_eq!(r["target_trials"].as_u64(), Some(1), "{r}");
    // Read as a Kaldi trials file, the same list is refused with its line named.
    let bad = verify("k", &[]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("veri_test.txt") && err.contains('1'), "{err}");
}
