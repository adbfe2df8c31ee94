//! `invar features` front-end flags (issue 21): Δ/ΔΔ and CMVN as flags with their defaults in
//! `--help`, the same features from a TOML config file, and the frame shift recorded in the set's
//! config so later stages read the timing the frames have.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{invar, json, refused, s, synth, write};

fn features(corpus: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "features",
        "--layout",
        "timit",
        s(corpus),
        "--kind",
        "mfcc",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    invar(&args);
}

/// Every `.npy` of a set, by file name.
fn matrices(set: &Path) -> Vec<(String, invar_io::Matrix)> {
    let mut out: Vec<(String, invar_io::Matrix)> = std::fs::read_dir(set)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, invar_io::read_npy(&p).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn deltas_and_cmvn_flags_equal_a_config_file_and_normalise() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 2, 2, 6);
    features(&corpus, &d.join("plain"), &[]);
    features(
        &corpus,
        &d.join("flags"),
        &["--deltas", "2", "--cmvn", "meanvar"],
    );
    let cfg = json(&d.join("flags/config.json")).to_string();
    assert!(cfg.contains("\"order\":2"), "{cfg}");
    assert!(
        cfg.contains("\"mean\":true") && cfg.contains("\"variance\":true"),
        "{cfg}"
    );
    let plain = matrices(&d.join("plain"));
    let flags = matrices(&d.join("flags"));
    assert_eq!(plain.len(), 4);
    for ((_, p), (name, m)) in plain.iter().zip(&flags) {
        assert_eq!((p.cols, m.cols), (13, 39), "{name}");
        assert_eq!(p.rows, m.rows, "{name}");
        for c in 0..m.cols {
            let col: Vec<f64> = (0..m.rows).map(|r| f64::from(m.row(r)[c])).collect();
            let mean = col.iter().sum::<f64>() / col.len() as f64;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / col.len() as f64;
            assert!(mean.abs() < 1e-3, "{name} column {c}: mean {mean}");
            assert!(
                (var - 1.0).abs() < 1e-2,
                "{name} column {c}: variance {var}"
            );
        }
    }
    // The same front-end from a TOML file: the same bytes.
    let toml = d.join("frontend.toml");
    write(
        &toml,
        "kind = \"mfcc\"\n[deltas]\norder = 2\n[cmvn]\nmean = true\nvariance = true\n",
    );
    features(&corpus, &d.join("toml"), &["--config", s(&toml)]);
    assert_eq!(matrices(&d.join("toml")), flags);
    // Out of range is refused by the parser, before any work.
    let err = refused(&[
        "features",
        "--layout",
        "timit",
        s(&corpus),
        "--kind",
        "mfcc",
        "--out",
        s(&d.join("bad")),
        "--deltas",
        "3",
    ]);
    assert!(err.contains("--deltas"), "{err}");
    assert!(!d.join("bad").exists());
}

#[test]
fn frame_shift_flag_changes_the_frames_and_the_recorded_timing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 2, 1, 7);
    features(&corpus, &d.join("10ms"), &[]);
    features(&corpus, &d.join("20ms"), &["--frame-shift-ms", "20"]);
    let cfg = json(&d.join("20ms/config.json")).to_string();
    assert!(cfg.contains("\"shift_ms\":20"), "{cfg}");
    for ((name, a), (_, b)) in matrices(&d.join("10ms"))
        .iter()
        .zip(&matrices(&d.join("20ms")))
    {
        // Kaldi's snip-edges framing: 1 + (n − 400) / shift frames.
        assert!(
            b.rows == (a.rows - 1) / 2 + 1 || b.rows == (a.rows - 1) / 2,
            "{name}: {} frames at 10 ms, {} at 20 ms",
            a.rows,
            b.rows
        );
    }
}

#[test]
fn help_shows_every_front_end_default() {
    let out = invar(&["features", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--deltas",
        "--cmvn",
        "--frame-shift-ms",
        "--frame-length-ms",
        "--num-ceps",
        "--num-mel-bins",
        "--sample-rate",
        "--dither",
    ] {
        let line = help
            .lines()
            .skip_while(|l| !l.contains(flag))
            .take(3)
            .collect::<String>();
        assert!(line.contains("[default:"), "{flag}: {line}");
    }
}
