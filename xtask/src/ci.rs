//! `cargo xtask ci`: formatting, lints with warnings denied, the map check (`tidy`), then the test suite and the
//! Python package's tests (`py`).

use anyhow::Result;

use crate::cargo;

pub fn run() -> Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    crate::tidy::run(&[])?;
    crate::test::run()?;
    crate::py::run_tests()
}
