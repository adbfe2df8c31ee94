//! Transparent huge pages for this process: off unless `--huge-pages` (issue #24).
//!
//! mimalloc, the binary's allocator, asks the kernel for transparent huge pages on its arenas
//! (`madvise(MADV_HUGEPAGE)`), so resident memory grows in 2 MiB steps whatever the stage touches.
//! On the Scale corpora (BENCHMARKS.md) that was most of what several stages held: release build,
//! 3.93 h, `--threads 2`, peak RSS with / without huge pages: `features` 52 / 20 MB, `gmm
//! posteriors` 49 / 17 MB, `gmm supervectors` 43 / 17 MB, `eval abx` 69 / 47 MB, `speaker train` 225
//! / 184 MB, with the same CPU time within run-to-run noise (the crate README has the table). So
//! every command turns them off for itself with `prctl(PR_SET_THP_DISABLE)`, which the kernel
//! applies to the whole process, the arenas mimalloc already reserved included, and which child
//! processes (`invar demo`'s stages) inherit.

/// Turns transparent huge pages off for this process, first thing in `main` (before the argument
/// parser and the log set-up allocate), unless the user set `MIMALLOC_ALLOW_THP` (mimalloc has
/// applied it at start-up). A kernel that refuses is only logged: huge pages change how much
/// memory a run holds, never what it computes.
pub fn turn_off() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        set(false);
    }
}

/// Allows them again (`--huge-pages`), also where a parent process turned them off, and for the
/// child processes this one starts (`invar demo`'s stages): they find `MIMALLOC_ALLOW_THP=1`.
pub fn allow() {
    std::env::set_var("MIMALLOC_ALLOW_THP", "1");
    set(true);
}

/// Logs (at debug level, `RUST_LOG=debug`) what the kernel holds for this process now.
pub fn log_state() {
    match disabled() {
        Ok(true) => tracing::debug!("transparent huge pages: off for this process"),
        Ok(false) => tracing::debug!("transparent huge pages: as the system allows"),
        Err(e) => tracing::debug!("transparent huge pages: unknown ({e})"),
    }
}

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
    /// The kernel's per-process flag follows `turn_off` and `allow` (read back with
    /// `PR_GET_THP_DISABLE`, not from invar's own state).
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
