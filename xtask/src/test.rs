//! `cargo xtask test`: the whole test suite (what CI runs after the lints).

use anyhow::Result;

use crate::cargo;

pub fn run() -> Result<()> {
    cargo(&["test", "--workspace", "--all-targets"])
}
