//! Fault injection, values (issue 17): bad numbers, empty audio, colliding file names and failing
//! plots given to the built `invar` binary. Each case failed on the code before the fix: a NaN row
//! hung `eval verify` or came back as NaN results with exit 0, a header-only WAV counted as 10.4 s,
//! one of two non-UTF-8 twins was dropped without a word, and a plot that could not be drawn cost
//! the command its `results.json`.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use invar_audio::{write_wav, Audio};
use invar_io::Matrix;

/// Longer than any case takes on a loaded 2-core machine in a debug build, far shorter than
/// "forever": a command still running then has hung.
const LIMIT: Duration = Duration::from_secs(180);

/// Runs `invar ARGS` with `envs`, killing it (and failing the test) if it outlives [`LIMIT`].
fn run_env(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_invar"));
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the invar binary starts");
    let start = Instant::now();
    // Drain the pipes on threads so a chatty command cannot block on a full pipe.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out_pipe, &mut v).ok();
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err_pipe, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "`invar {}` still ran after {LIMIT:?}: it hangs",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
    }
}

fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `invar ARGS` and fails the test with its output unless it succeeds.
fn ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(
        out.status.success(),
        "`invar {}` failed ({}):\n{}",
        args.join(" "),
        out.status,
        stderr(&out)
    );
    out
}

/// Runs `invar ARGS`, expects it to fail, and returns its stderr.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "`invar {}` should have failed but exited 0:\n{err}",
        args.join(" ")
    );
    err
}

fn s(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// A little-endian `f32` C-order `.npy` file, written by hand from numpy's format description (NEP 1):
/// `invar_io::write_npy` refuses the NaN these tests need.
fn write_raw_npy(path: &Path, rows: usize, cols: usize, data: &[f32]) {
    assert_eq!(data.len(), rows * cols);
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for x in data {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// Rewrites one `.npy` matrix with `value` at (`row`, `col`), keeping its shape.
fn poison(path: &Path, row: usize, col: usize, value: f32) {
    let mut m = invar_io::read_npy(path).unwrap();
    assert!(
        row < m.rows && col < m.cols,
        "{}: too small",
        path.display()
    );
    m.row_mut(row)[col] = value;
    write_raw_npy(path, m.rows, m.cols, &m.data);
}

/// Six embeddings of three speakers, two each: the speakers are told apart by direction.
fn embeddings() -> (Matrix, Vec<&'static str>) {
    let m = Matrix::new(
        6,
        3,
        vec![
            1.0, 0.1, 0.0, 0.9, 0.0, 0.1, //
            0.0, 1.0, 0.1, 0.1, 0.9, 0.0, //
            0.0, 0.1, 1.0, 0.1, 0.0, 0.9,
        ],
    )
    .unwrap();
    (m, vec!["a", "a", "b", "b", "c", "c"])
}

/// A NaN in row 3 of an embedding matrix: `eval verify` used to spin forever in the DET curve; now
/// it stops at once, naming the file and the row, and writes no results.
#[test]
fn nan_embedding_row_is_refused_by_eval_verify_naming_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut m, speakers) = embeddings();
    m.row_mut(3)[1] = f32::NAN;
    let emb = d.join("emb.npy");
    write_raw_npy(&emb, m.rows, m.cols, &m.data);
    let spk = d.join("speakers.txt");
    std::fs::write(&spk, speakers.join("\n") + "\n").unwrap();
    let out = d.join("verify");
    let start = Instant::now();
    let err = fails(&[
        "eval",
        "verify",
        "--embeddings",
        s(&emb),
        "--speakers",
        s(&spk),
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("emb.npy") && err.contains("row 3, column 1") && err.contains("NaN"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(60), "slow refusal");
    assert!(!out.join("results.json").exists());

    // An infinity is refused the same way; the clean matrix goes through.
    let (mut m, _) = embeddings();
    m.row_mut(5)[0] = f32::INFINITY;
    write_raw_npy(&emb, m.rows, m.cols, &m.data);
    let err = fails(&[
        "eval",
        "verify",
        "--embeddings",
        s(&emb),
        "--speakers",
        s(&spk),
        "--out",
        s(&out),
    ]);
    assert!(
        err.contains("row 5, column 0") && err.contains("inf"),
        "{err}"
    );
    let (m, _) = embeddings();
    invar_io::write_npy(&emb, &m).unwrap();
    ok(&[
        "eval",
        "verify",
        "--embeddings",
        s(&emb),
        "--speakers",
        s(&spk),
        "--out",
        s(&out),
    ]);
    assert!(out.join("results.json").is_file());
}

/// A NaN supervector: `supervector train` used to train on it and hang (or fail late, far from the
/// cause); it is refused before any training, naming the file and row.
#[test]
fn nan_supervector_is_refused_by_supervector_train() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (rows, cols) = (12, 8);
    let mut data: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0)
        .collect();
    data[7 * cols + 2] = f32::NAN;
    let sv = d.join("sv.npy");
    write_raw_npy(&sv, rows, cols, &data);
    let labels = d.join("speakers.txt");
    let names: Vec<String> = (0..rows).map(|i| format!("s{}", i % 4)).collect();
    std::fs::write(&labels, names.join("\n") + "\n").unwrap();
    // Held (the default) and read from the file on demand (issue #24): refused before training.
    for mb in ["256", "0"] {
        let out = d.join(format!("ae{mb}"));
        let err = fails(&[
            "supervector",
            "train",
            "--matrix",
            s(&sv),
            "--labels",
            s(&labels),
            "--out",
            s(&out),
            "--epochs",
            "1",
            "--row-memory-mb",
            mb,
        ]);
        assert!(
            err.contains("sv.npy") && err.contains("row 7, column 2"),
            "--row-memory-mb {mb}: {err}"
        );
        assert!(!out.join("model.safetensors").exists());
    }
}

/// Synthesises a tiny TIMIT-layout corpus and its MFCC feature set under `d`; returns the set.
fn tiny_features(d: &Path) -> PathBuf {
    let corpus = d.join("corpus");
    ok(&[
        "synth",
        "--out",
        s(&corpus),
        "--quick",
        "--speakers",
        "2",
        "--utterances",
        "3",
        "--seed",
        "4",
    ]);
    let mfcc = d.join("mfcc");
    ok(&[
        "features",
        "--layout",
        "timit",
        s(&corpus),
        "--kind",
        "mfcc",
        "--out",
        s(&mfcc),
    ]);
    mfcc
}

/// The `.npy` of the first utterance of a feature set (from its manifest).
fn first_npy(set: &Path) -> PathBuf {
    let manifest = std::fs::read_to_string(set.join("manifest.tsv")).unwrap();
    let row = manifest.lines().nth(1).expect("a manifest row");
    set.join(row.split('\t').nth(3).expect("a path column"))
}

/// A NaN frame in one utterance of a feature set: `gmm posteriors` wrote NaN posteriorgrams with exit
/// 0, and `utd` and `partition apply` passed NaN posteriorgrams on. Each stage now refuses its input
/// where it enters, naming the utterance's file and the frame.
#[test]
fn nan_utterance_is_refused_by_every_stage_that_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mfcc = tiny_features(d);
    let ubm = d.join("ubm");
    ok(&[
        "gmm",
        "train",
        "--features",
        s(&mfcc),
        "--out",
        s(&ubm),
        "--components",
        "4",
        "--iters",
        "2",
        "--seed",
        "1",
    ]);
    let model = ubm.join("ubm.safetensors");
    let post = d.join("post");
    ok(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&model),
        "--features",
        s(&mfcc),
        "--out",
        s(&post),
    ]);

    // The features: gmm posteriors and gmm train refuse them.
    let bad = first_npy(&mfcc);
    let name = bad.file_name().unwrap().to_str().unwrap().to_string();
    poison(&bad, 2, 0, f32::NAN);
    let post2 = d.join("post2");
    let err = fails(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&model),
        "--features",
        s(&mfcc),
        "--out",
        s(&post2),
    ]);
    assert!(
        err.contains(&name) && err.contains("row 2, column 0"),
        "{err}"
    );
    assert!(!post2.join("manifest.tsv").exists());
    let err = fails(&[
        "gmm",
        "train",
        "--features",
        s(&mfcc),
        "--out",
        s(&d.join("ubm2")),
        "--components",
        "4",
        "--iters",
        "2",
    ]);
    assert!(
        err.contains(&name) && err.contains("row 2, column 0"),
        "{err}"
    );

    // The posteriorgrams: utd and partition apply refuse them.
    let bad = first_npy(&post);
    let name = bad.file_name().unwrap().to_str().unwrap().to_string();
    poison(&bad, 1, 3, f32::NAN);
    let err = fails(&[
        "utd",
        "--features",
        s(&post),
        "--out",
        s(&d.join("utd")),
        "--cmvn",
        "off",
    ]);
    assert!(
        err.contains(&name) && err.contains("row 1, column 3"),
        "{err}"
    );
    // A 4 → 2 partition model, written by hand (rows are distributions).
    let part = d.join("part");
    std::fs::create_dir_all(&part).unwrap();
    invar_io::write_npy(
        part.join("W.npy"),
        &Matrix::new(4, 2, vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.2, 0.8]).unwrap(),
    )
    .unwrap();
    let soft = d.join("soft");
    let err = fails(&[
        "partition",
        "apply",
        "--model",
        s(&part),
        "--posteriors",
        s(&post),
        "--out",
        s(&soft),
    ]);
    assert!(
        err.contains(&name) && err.contains("row 1, column 3"),
        "{err}"
    );
    assert!(!soft.join("manifest.tsv").exists());
}

/// A canonical 44-byte PCM WAV header (mono, 16 kHz, 16-bit) whose data chunk claims `data_bytes`.
fn wav_header(data_bytes: u32) -> Vec<u8> {
    let mut h = b"RIFF".to_vec();
    h.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&16_000u32.to_le_bytes());
    h.extend_from_slice(&32_000u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_bytes.to_le_bytes());
    h
}

fn tone(samples: usize) -> Audio {
    Audio {
        samples: (0..samples)
            .map(|i| 0.3 * (i as f32 * 0.07).sin())
            .collect(),
        sample_rate: 16_000,
    }
}

/// A header-only WAV (44 bytes): `corpus info` passed it and counted the 10.4 s its data chunk
/// claimed (333 312 bytes at 32 000 bytes/s). Zero-sample audio is an error naming the file; the
/// command fails and says how many utterances are unreadable. So is a header that promises nothing.
#[test]
fn header_only_wav_is_an_error_in_corpus_info() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_wav(d.join("good1.wav"), &tone(8000)).unwrap();
    write_wav(d.join("good2.wav"), &tone(4000)).unwrap();
    std::fs::write(d.join("claims.wav"), wav_header(333_312)).unwrap();
    std::fs::write(d.join("nothing.wav"), wav_header(0)).unwrap();
    let list = d.join("list.txt");
    std::fs::write(
        &list,
        "good1.wav s1\ngood2.wav s2\nclaims.wav s1\nnothing.wav s2\n",
    )
    .unwrap();
    let json = d.join("info.json");
    let err = fails(&[
        "corpus",
        "info",
        "--layout",
        "list",
        s(&list),
        "--json",
        s(&json),
    ]);
    assert!(
        err.contains("claims.wav") && err.contains("truncated"),
        "{err}"
    );
    assert!(
        err.contains("nothing.wav") && err.contains("no audio samples"),
        "{err}"
    );
    assert!(err.contains("2 unreadable"), "{err}");
    // The statistics count only the two real recordings: 0.75 s, not 10.4 s more.
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(stats["total"]["utterances"], 2, "{stats}");
    let hours = stats["total"]["hours"].as_f64().unwrap();
    assert!((hours * 3600.0 - 0.75).abs() < 1e-9, "{hours} h");
}

/// Two recordings whose names differ only in bytes that are not UTF-8 were read as one utterance (one
/// silently dropped). Now an error that names both files, their bytes escaped so they differ.
#[test]
fn non_utf8_twins_are_an_error_naming_both() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let spk = dir.path().join("TRAIN/DR1/FABC0");
    std::fs::create_dir_all(&spk).unwrap();
    write_wav(spk.join("SA1.WAV"), &tone(4000)).unwrap();
    write_wav(
        spk.join(std::ffi::OsStr::from_bytes(b"SX7\xff.WAV")),
        &tone(4000),
    )
    .unwrap();
    write_wav(
        spk.join(std::ffi::OsStr::from_bytes(b"SX7\xfe.WAV")),
        &tone(5000),
    )
    .unwrap();
    let err = fails(&["corpus", "info", "--layout", "timit", s(dir.path())]);
    assert!(
        err.contains(r"SX7\xFF.WAV") && err.contains(r"SX7\xFE.WAV"),
        "{err}"
    );
    assert!(err.contains("appears twice"), "{err}");
}

/// `utterance reference predicted` lines for two speakers.
fn predictions(d: &Path) -> PathBuf {
    let p = d.join("predictions.txt");
    std::fs::write(&p, "u1 alice alice\nu2 alice bob\nu3 bob bob\nu4 bob bob\n").unwrap();
    p
}

/// Runs `invar ARGS` whose input `fifo` is a named pipe: once the command has claimed `out` (its
/// lock file is there) and blocks reading the pipe, `in_the_way` is made a non-empty folder (so the
/// plot cannot be written under that name), then `content` is fed through the pipe. The obstacle
/// cannot be put there before the run: the output-folder rule refuses a non-empty folder.
fn run_with_obstacle(
    args: &[&str],
    out: &Path,
    fifo: &Path,
    content: &str,
    in_the_way: &Path,
) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the invar binary starts");
    let start = Instant::now();
    while !out.join(invar_io::LOCK_FILE).exists() {
        assert!(
            start.elapsed() < LIMIT,
            "the command never claimed {}",
            out.display()
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the command exited ({status}) before claiming {}",
                out.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::create_dir_all(in_the_way.join("in-the-way")).unwrap();
    std::fs::write(fifo, content).unwrap();
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) -> bool {
    match Command::new("mkfifo").arg(path).status() {
        Ok(s) if s.success() => true,
        other => {
            eprintln!("skipped: cannot make a named pipe with mkfifo ({other:?})");
            false
        }
    }
}

/// A plot that cannot be written (here: a folder sits where the SVG goes) cost `eval identify` and
/// `eval verify` their results.json and exit status. Results now come first and the plot is a
/// warning.
#[test]
fn plot_failure_keeps_results_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("identify");
    let fifo = d.join("predictions.fifo");
    if !mkfifo(&fifo) {
        return;
    }
    let text = std::fs::read_to_string(predictions(d)).unwrap();
    let o = run_with_obstacle(
        &[
            "eval",
            "identify",
            "--predictions",
            s(&fifo),
            "--out",
            s(&out),
        ],
        &out,
        &fifo,
        &text,
        &out.join("confusion.svg"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["accuracy"], 0.75, "{results}");
    let err = stderr(&o);
    assert!(
        err.contains("WARN") && err.contains("confusion plot not drawn"),
        "{err}"
    );

    let (m, speakers) = embeddings();
    let emb = d.join("emb.npy");
    invar_io::write_npy(&emb, &m).unwrap();
    let spk = d.join("speakers.fifo");
    assert!(mkfifo(&spk));
    let ver = d.join("verify");
    let o = run_with_obstacle(
        &[
            "eval",
            "verify",
            "--embeddings",
            s(&emb),
            "--speakers",
            s(&spk),
            "--out",
            s(&ver),
        ],
        &ver,
        &spk,
        &(speakers.join("\n") + "\n"),
        &ver.join("det.svg"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(ver.join("results.json").is_file());
    assert!(stderr(&o).contains("DET plot not drawn"), "{}", stderr(&o));
}

/// Plots draw their text with the font compiled into invar: with fontconfig pointed at nothing (as
/// on a machine with no fonts) `eval identify` still writes its confusion plot as SVG and PNG,
/// without a warning.
#[test]
fn plots_render_without_system_fonts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("identify");
    let nowhere = d.join("no-fonts");
    std::fs::create_dir_all(&nowhere).unwrap();
    let o = run_env(
        &[
            "eval",
            "identify",
            "--predictions",
            s(&predictions(d)),
            "--out",
            s(&out),
        ],
        &[
            ("FONTCONFIG_FILE", s(&nowhere.join("fonts.conf"))),
            ("FONTCONFIG_PATH", s(&nowhere)),
            ("XDG_DATA_HOME", s(&nowhere)),
            ("XDG_DATA_DIRS", s(&nowhere)),
            ("HOME", s(&nowhere)),
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    for f in ["results.json", "confusion.svg", "confusion.png"] {
        assert!(out.join(f).is_file(), "no {f}: {err}");
    }
    let svg = std::fs::read_to_string(out.join("confusion.svg")).unwrap();
    assert!(
        svg.contains("alice") && svg.contains("bob"),
        "labels missing"
    );
    let png = std::fs::read(out.join("confusion.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
}
