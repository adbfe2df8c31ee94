//! `--huge-pages auto|on|off` (issue #24): the data stages run without transparent huge pages
//! (mimalloc's 2 MiB arena pages were most of their peak RSS), the autoencoder's training with them
//! (its ~1 GB of weights and moments walked every step). The state is read back from the kernel (`PR_GET_THP_DISABLE`) by the process itself
//! and logged at debug level; each command here fails on its missing input right after.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::Command;

/// The huge-page line `invar ARGS` logs, with `MIMALLOC_ALLOW_THP` unset or set to `env`.
fn thp_log(args: &[&str], env: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_invar"));
    cmd.args(args)
        .env("RUST_LOG", "debug")
        .env("RUST_BACKTRACE", "0")
        .env_remove("MIMALLOC_ALLOW_THP");
    if let Some(v) = env {
        cmd.env("MIMALLOC_ALLOW_THP", v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "expected a missing-input error:\n{stderr}"
    );
    stderr
        .lines()
        .find(|l| l.contains("transparent huge pages:"))
        .unwrap_or_else(|| panic!("no huge-page line in:\n{stderr}"))
        .to_owned()
}

const OFF: &str = "off for this process";
const ON: &str = "as the system allows";

#[test]
fn only_the_autoencoder_runs_with_huge_pages_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let m = missing.to_str().unwrap();
    let data: &[&str] = &["corpus", "info", "--layout", "timit", m];
    let training: &[&str] = &["supervector", "train", "--supervectors", m, "--out", m];
    let cnn: &[&str] = &[
        "speaker", "train", "--corpus", m, "--layout", "timit", "--out", m,
    ];
    assert!(thp_log(data, None).contains(OFF));
    assert!(thp_log(training, None).contains(ON));
    assert!(thp_log(cnn, None).contains(OFF));
    // `on` / `off`, before or after the subcommand, override the command's default.
    assert!(thp_log(&[&["--huge-pages", "on"], data].concat(), None).contains(ON));
    assert!(thp_log(&[data, &["--huge-pages", "on"]].concat(), None).contains(ON));
    assert!(thp_log(&[&["--huge-pages", "off"], training].concat(), None).contains(OFF));
    // The user's own choice through mimalloc's variable is kept by `auto`, both ways (and is what
    // `on` / `off` hand to the processes `invar demo` starts).
    assert!(thp_log(data, Some("1")).contains(ON));
    assert!(thp_log(training, Some("0")).contains(OFF));
    // Refused values are named.
    let out = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args([
            "--huge-pages",
            "sometimes",
            "corpus",
            "info",
            "--layout",
            "timit",
            m,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sometimes"));
}
