//! `cargo xtask test`: the whole test suite (what CI runs after the lints).

use anyhow::Result;

use crate::cargo;

pub fn run() -> Result<()> {
    // Run every test binary even after a failure, so one run shows every broken test.
    cargo(&["test", "--workspace", "--all-targets", "--no-fail-fast"])
}
