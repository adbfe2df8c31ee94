//! Fuzzes the `.item` parser: any input gives `Ok` or an error, never a panic, and an accepted file
//! has one context label per context column, finite non-negative times with onset ≤ offset, and
//! increasing line numbers.
#![no_main]

use std::path::Path;

use invar_eval::parse_items;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(f) = parse_items(&text, Path::new("fuzz.item")) {
        let mut last_line = 0;
        for item in &f.items {
            assert_eq!(item.context.len(), f.columns.context.len());
            assert!(item.onset.is_finite() && item.offset.is_finite());
            assert!(0.0 <= item.onset && item.onset <= item.offset);
            assert!(item.line > last_line);
            last_line = item.line;
        }
    }
});
