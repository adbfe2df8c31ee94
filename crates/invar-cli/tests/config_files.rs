//! Issue 19's CLI grammar: `--config FILE` is TOML or JSON (by the `.json` name) for every command
//! that takes one. `gmm train` and `ivector train` read JSON only before; the same settings as TOML
//! must give the same model, and a misspelt key is refused naming the file.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{invar, mfcc, refused, s, synth, write};

#[test]
fn gmm_and_ivector_configs_read_toml_and_json_alike() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 2, 3, 11);
    let feats = mfcc(&corpus, &d.join("mfcc"), &[]);
    write(
        &d.join("em.json"),
        r#"{ "components": 4, "max_iters": 3, "tol": 0 }"#,
    );
    write(
        &d.join("em.toml"),
        "components = 4\nmax_iters = 3\ntol = 0\n",
    );
    for name in ["em.json", "em.toml"] {
        invar(&[
            "gmm",
            "train",
            "--features",
            s(&feats),
            "--config",
            s(&d.join(name)),
            "--out",
            s(&d.join(format!("ubm-{name}"))),
        ]);
    }
    let a = std::fs::read(d.join("ubm-em.json/ubm.safetensors")).unwrap();
    let b = std::fs::read(d.join("ubm-em.toml/ubm.safetensors")).unwrap();
    assert_eq!(
        a, b,
        "the same settings as TOML and JSON gave different UBMs"
    );

    write(&d.join("iv.json"), r#"{ "rank": 3, "iters": 2 }"#);
    write(&d.join("iv.toml"), "rank = 3\niters = 2\n");
    let ubm = d.join("ubm-em.json/ubm.safetensors");
    for name in ["iv.json", "iv.toml"] {
        invar(&[
            "ivector",
            "train",
            "--ubm",
            s(&ubm),
            "--features",
            s(&feats),
            "--config",
            s(&d.join(name)),
            "--out",
            s(&d.join(format!("ivec-{name}"))),
        ]);
    }
    let a = std::fs::read(d.join("ivec-iv.json/ivector.safetensors")).unwrap();
    let b = std::fs::read(d.join("ivec-iv.toml/ivector.safetensors")).unwrap();
    assert_eq!(
        a, b,
        "the same settings as TOML and JSON gave different extractors"
    );

    write(&d.join("bad.toml"), "components = 4\nmax_iter = 3\n");
    let err = refused(&[
        "gmm",
        "train",
        "--features",
        s(&feats),
        "--config",
        s(&d.join("bad.toml")),
        "--out",
        s(&d.join("bad")),
    ]);
    assert!(
        err.contains("bad.toml") && err.contains("max_iter"),
        "{err}"
    );
    assert!(
        !d.join("bad").exists(),
        "a refused config created the folder"
    );
}
