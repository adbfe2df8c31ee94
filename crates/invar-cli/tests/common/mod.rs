//! Helpers shared by the CLI test files: run the real `invar` binary, require success or failure,
//! read JSON, make small corpora. Each test file includes this with `mod common;`, so a helper a file
//! does not use is not dead code.

#![allow(dead_code, clippy::unwrap_used)] // test helpers: a panic is the failure report

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `invar ARGS` (warnings only on stderr) and returns whatever happened.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the invar binary starts")
}

/// Runs `invar ARGS`, failing the test with the command's output if it fails.
pub fn invar(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "`invar {}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `invar ARGS`, which must fail; returns its stderr.
pub fn refused(args: &[&str]) -> String {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "`invar {}` should have failed:\nstdout:\n{}\nstderr:\n{err}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
    );
    err
}

/// A temporary path as the `&str` an argument list needs.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Parses a JSON file, failing the test with the path if it cannot.
pub fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// `invar synth --quick` into the folder `corpus` (TIMIT layout, with train.item and test.item).
pub fn synth(corpus: &Path, speakers: usize, utterances: usize, seed: u64) -> PathBuf {
    invar(&[
        "synth",
        "--out",
        s(corpus),
        "--quick",
        "--speakers",
        &speakers.to_string(),
        "--utterances",
        &utterances.to_string(),
        "--seed",
        &seed.to_string(),
    ]);
    corpus.to_path_buf()
}

/// Writes `text` to `path`, creating its folder.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `invar synth` of an ELSDSR-layout corpus (001's), `speakers` × `utterances`, into `corpus`.
pub fn synth_elsdsr(corpus: &Path, speakers: usize, utterances: usize, seed: u64) -> PathBuf {
    invar(&[
        "synth",
        "--out",
        s(corpus),
        "--layout",
        "elsdsr",
        "--speakers",
        &speakers.to_string(),
        "--utterances",
        &utterances.to_string(),
        "--seed",
        &seed.to_string(),
    ]);
    corpus.to_path_buf()
}

/// `invar features --kind mfcc` of the TIMIT-layout `corpus` into `out`, with `extra` flags.
pub fn mfcc(corpus: &Path, out: &Path, extra: &[&str]) -> PathBuf {
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
    out.to_path_buf()
}

/// `invar gmm train` of a `components`-component UBM with `iters` EM iterations on `features`
/// into `out`; returns the model file.
pub fn ubm(features: &Path, out: &Path, components: usize, iters: usize) -> PathBuf {
    invar(&[
        "gmm",
        "train",
        "--features",
        s(features),
        "--out",
        s(out),
        "--components",
        &components.to_string(),
        "--iters",
        &iters.to_string(),
    ]);
    out.join("ubm.safetensors")
}

/// Every file under `dir` (relative path → bytes): what "left as it was" compares.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A pseudo-random delay below `max_ms` (at least 1) from the clock: kill tests land at a
/// different point each run.
pub fn random_ms(max_ms: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) % max_ms.max(1)
}

/// Starts `invar ARGS`, waits until `ready()` (polling every millisecond, failing the test after
/// `timeout_s`), sleeps a random delay below `max_delay_ms` and SIGKILLs it. Returns the delay, or
/// `None` when the run ended (successfully) before it could be killed.
pub fn kill_when(
    name: &str,
    args: &[String],
    ready: impl Fn() -> bool,
    max_delay_ms: u64,
    timeout_s: u64,
) -> Option<u64> {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{name}: the run failed: {status}");
            return None;
        }
        assert!(
            started.elapsed() < Duration::from_secs(timeout_s),
            "{name}: not ready after {timeout_s} s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let delay = random_ms(max_delay_ms);
    std::thread::sleep(Duration::from_millis(delay));
    if child.try_wait().unwrap().is_some() {
        return None;
    }
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no cleanup
    let status = child.wait().unwrap();
    if status.success() {
        return None; // it ended on its own between the check above and the kill
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{name}: {status}");
    }
    Some(delay)
}

/// The names in `dir` that start with `prefix`, sorted (none when `dir` does not exist): the
/// checkpoints a run has written so far.
pub fn names_with_prefix(dir: &Path, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
