//! Transparent huge pages for this process (`--huge-pages auto|on|off`, issue #24).
//!
//! mimalloc, the binary's allocator, asks the kernel for transparent huge pages on its arenas
//! (`madvise(MADV_HUGEPAGE)`), so resident memory grows in 2 MiB steps whatever a stage touches.
//! On the Scale corpora (BENCHMARKS.md) that was most of what the data stages held: release build,
//! 3.93 h, `--threads 2`, peak RSS with / without huge pages: `features` 52 / 20 MB, `gmm
//! posteriors` 49 / 17 MB, `gmm supervectors` 43 / 17 MB, `eval abx` 69 / 47 MB, the same CPU time
//! within run-to-run noise. The training steps, timed on a quiet machine (2026-11-28 14:04 UTC,
//! release examples, `--threads 2`, `MIMALLOC_ALLOW_THP` 1 / 0 interleaved): the 001 CNN step
//! 4.07 / 3.77 / 3.81 ms with against 4.07 / 3.61 / 3.58 ms without (400 steps after 100
//! warm-up, three rounds), the 000 partition step 5.54 / 5.96 against 5.07 / 5.07 ms; only the 002
//! autoencoder, whose 94.7 M weights and Adam moments (≈ 1.1 GB) are walked every step, ran faster
//! with them: 326 / 299 against 333 / 347 ms (fewer TLB misses). So `auto`, the default, turns
//! them off with `prctl(PR_SET_THP_DISABLE)` for every command but `supervector train|eval`. The
//! kernel applies the flag to the whole process, the arenas mimalloc already reserved included,
//! and child processes inherit it.

/// What `--huge-pages` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HugePages {
    /// On for the commands that train the 002 autoencoder (`supervector train|eval`), off for
    /// the others.
    #[default]
    Auto,
    /// On for this command and the processes it starts (`invar demo`'s stages).
    On,
    /// Off for this command and the processes it starts.
    Off,
}

/// First thing in `main`, before the argument parser and the log set-up allocate: off, unless the
/// user set `MIMALLOC_ALLOW_THP` (mimalloc has applied it at start-up; `--huge-pages on|off` set it
/// for the processes they start).
pub fn turn_off_early() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        set(false);
    }
}

/// Applies the parsed setting; `wanted` says whether the command gains from huge pages. `on` and `off`
/// also set `MIMALLOC_ALLOW_THP` for the child processes, so `invar demo --huge-pages on` reaches
/// its stages; `auto` leaves each child to decide by its own command.
pub fn apply(setting: HugePages, wanted: bool) {
    match setting {
        HugePages::On => {
            std::env::set_var("MIMALLOC_ALLOW_THP", "1");
            set(true);
        }
        HugePages::Off => {
            std::env::set_var("MIMALLOC_ALLOW_THP", "0");
            set(false);
        }
        HugePages::Auto => {
            if wanted && std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
                set(true);
            }
        }
    }
}

/// Logs (at debug level, `RUST_LOG=debug`) what the kernel holds for this process now.
pub fn log_state() {
    match disabled() {
        Ok(true) => tracing::debug!("transparent huge pages: off for this process"),
        Ok(false) => tracing::debug!("transparent huge pages: as the system allows"),
        Err(e) => tracing::debug!("transparent huge pages: unknown ({e})"),
    }
}

/// A kernel that refuses is only logged: huge pages change how much memory a run holds, never
/// what it computes.
fn set(allowed: bool) {
    if let Err(e) = set_disabled(!allowed) {
        tracing::warn!("transparent huge pages left as they were: {e}");
    }
}

#[cfg(target_os = "linux")]
fn set_disabled(disabled: bool) -> Result<(), String> {
    nix::sys::prctl::set_thp_disable(disabled).map_err(|e| format!("prctl refused: {e}"))
}

#[cfg(target_os = "linux")]
fn disabled() -> Result<bool, String> {
    nix::sys::prctl::get_thp_disable().map_err(|e| format!("prctl refused: {e}"))
}

#[cfg(not(target_os = "linux"))]
fn set_disabled(_disabled: bool) -> Result<(), String> {
    Err("not a Linux kernel".to_owned())
}

#[cfg(not(target_os = "linux"))]
fn disabled() -> Result<bool, String> {
    Err("not a Linux kernel".to_owned())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The kernel's per-process flag follows `set` (read back with `PR_GET_THP_DISABLE`, not
    /// from invar's own state).
    #[test]
    fn the_kernel_flag_follows_both_ways() {
        super::set(false);
        assert!(nix::sys::prctl::get_thp_disable().unwrap());
        assert_eq!(super::disabled(), Ok(true));
        super::set(true);
        assert!(!nix::sys::prctl::get_thp_disable().unwrap());
        assert_eq!(super::disabled(), Ok(false));
    }
}
