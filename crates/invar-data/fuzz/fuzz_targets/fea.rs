//! Fuzzes the ZeroSpeech 2015 `.fea` parser: any input gives `Ok` or an error, never a panic, and
//! an accepted file has one time per row.
#![no_main]

use std::path::Path;

use invar_data::parse_fea;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((times, m)) = parse_fea(&text, Path::new("fuzz.fea")) {
        assert_eq!(times.len(), m.rows);
        assert_eq!(m.data.len(), m.rows * m.cols);
    }
});
