//! THE kill-and-resume test: a child process trains with a checkpoint every epoch, is killed with a
//! real SIGKILL once a checkpoint exists, is resumed to the end, and must end with weights
//! bit-identical to an uninterrupted run with the same seed: with a constant learning rate, and with
//! a plateau schedule that lowers it before the kill and after the resume.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use invar_train::{list_checkpoints, MetricLog};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const EPOCHS: &str = "8";

fn blobs(run_dir: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_invar-train-blobs"));
    cmd.arg("--run-dir")
        .arg(run_dir)
        .args(["--seed", "17", "--epochs", EPOCHS])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}

fn model_bytes(run_dir: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(run_dir.join("model.safetensors"))
}

#[test]
fn sigkilled_run_resumes_to_bit_identical_weights() -> TestResult {
    kill_and_resume(&[]).map(|_| ())
}

#[test]
fn sigkilled_run_with_a_plateau_schedule_resumes_to_bit_identical_weights() -> TestResult {
    let lrs = kill_and_resume(&["--plateau"])?;
    // The schedule must have acted on both sides of the kill (after the second checkpoint), or
    // the test would not show its state surviving the resume.
    assert!(lrs[2] < lrs[0], "no reduction by epoch 3: {lrs:?}");
    assert!(lrs[7] < lrs[3], "no reduction after epoch 4: {lrs:?}");
    Ok(())
}

/// Runs the kill-and-resume comparison with `extra` arguments on every run; returns the
/// learning rate of each epoch.
fn kill_and_resume(extra: &[&str]) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let with = |more: &[&'static str]| -> Vec<String> {
        extra.iter().chain(more).map(|s| s.to_string()).collect()
    };
    let uninterrupted = tempfile::tempdir()?;
    let status = blobs(uninterrupted.path(), &with(&[])).status()?;
    assert!(status.success(), "uninterrupted run failed: {status}");

    let killed = tempfile::tempdir()?;
    // 150 ms per epoch: long enough that epoch 3 is still running when we look.
    let mut child = blobs(killed.path(), &with(&["--epoch-delay-ms", "150"])).spawn()?;
    let started = Instant::now();
    loop {
        let done: Vec<usize> = list_checkpoints(killed.path())?
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        if done.contains(&2) {
            break;
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("child exited ({status}) before its second checkpoint").into());
        }
        if started.elapsed() > Duration::from_secs(120) {
            child.kill()?;
            return Err("no checkpoint after 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // Let it get into the next epoch, then SIGKILL (Child::kill sends SIGKILL on Unix).
    std::thread::sleep(Duration::from_millis(60));
    assert!(
        child.try_wait()?.is_none(),
        "the child finished before it could be killed"
    );
    child.kill()?;
    let status = child.wait()?;
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "child was not killed by SIGKILL: {status}"
        );
    }
    assert!(
        !killed.path().join("model.safetensors").exists(),
        "the killed run got to the end"
    );
    let newest = list_checkpoints(killed.path())?
        .last()
        .map(|(e, _)| *e)
        .unwrap_or(0);
    assert!(newest < 8, "the killed run wrote its final checkpoint");

    let status = blobs(killed.path(), &with(&["--resume"])).status()?;
    assert!(status.success(), "resumed run failed: {status}");

    assert_eq!(
        model_bytes(killed.path())?,
        model_bytes(uninterrupted.path())?,
        "final weights differ"
    );
    // The metric log reads as one run: same epochs, same losses (timings differ).
    let strip = |path: &Path| -> Result<Vec<_>, invar_train::Error> {
        Ok(MetricLog::read_epochs(path)?
            .into_iter()
            .map(|mut r| {
                r.metrics.remove("seconds");
                r.metrics.remove("samples_per_s");
                r
            })
            .collect())
    };
    let a = strip(&killed.path().join("metrics.jsonl"))?;
    let b = strip(&uninterrupted.path().join("metrics.jsonl"))?;
    assert_eq!(a.len(), 8);
    assert_eq!(a, b);
    Ok(b.iter().filter_map(|r| r.get("lr")).collect())
}
