//! Fuzzes the ZRTools class-file parser: any input gives `Ok` or an error, never a panic, and
//! accepted fragments have finite times with 0 <= start <= end.
#![no_main]

use std::path::Path;

use invar_data::parse_classes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(classes) = parse_classes(&text, Path::new("fuzz.classes")) {
        for c in &classes {
            for f in &c.fragments {
                assert!(f.start.is_finite() && f.end.is_finite());
                assert!(0.0 <= f.start && f.start <= f.end);
            }
        }
    }
});
