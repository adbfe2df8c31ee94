//! Every `invar` process runs without transparent huge pages unless `--huge-pages` (issue #24:
//! mimalloc's 2 MiB arena pages were most of a small stage's peak RSS). The state is read back
//! from the kernel (`PR_GET_THP_DISABLE`) by the process itself and logged at debug level.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::Command;

fn thp_log(args: &[&str], env: Option<(&str, &str)>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_invar"));
    cmd.args(args)
        .args(["corpus", "info", "--layout", "timit"])
        .arg(dir.path().join("no-such-corpus"))
        .env("RUST_LOG", "debug")
        .env("RUST_BACKTRACE", "0")
        .env_remove("MIMALLOC_ALLOW_THP");
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    stderr
        .lines()
        .find(|l| l.contains("transparent huge pages:"))
        .unwrap_or_else(|| panic!("no huge-page line in:\n{stderr}"))
        .to_owned()
}

#[test]
fn off_by_default_allowed_with_the_flag_and_left_to_the_user_s_mimalloc_setting() {
    assert!(thp_log(&[], None).contains("off for this process"));
    assert!(thp_log(&["--huge-pages"], None).contains("as the system allows"));
    // Given after the subcommand too (a global flag).
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(["corpus", "info", "--layout", "timit", "--huge-pages"])
        .arg(dir.path().join("none"))
        .env("RUST_LOG", "debug")
        .env_remove("MIMALLOC_ALLOW_THP")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("as the system allows"));
    // The user's own choice through mimalloc's variable is kept both ways.
    assert!(thp_log(&[], Some(("MIMALLOC_ALLOW_THP", "1"))).contains("as the system allows"));
    assert!(thp_log(&[], Some(("MIMALLOC_ALLOW_THP", "0"))).contains("off for this process"));
}
