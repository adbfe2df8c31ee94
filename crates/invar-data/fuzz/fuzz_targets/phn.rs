//! Fuzzes the TIMIT `.PHN`/`.WRD`/`.TXT` parsers: any input gives `Ok` or an error, never a panic,
//! and accepted phone alignments are ordered and non-overlapping.
#![no_main]

use std::path::Path;

use invar_data::{parse_segments, parse_transcript, SegmentOrder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(segs) = parse_segments(&text, Path::new("fuzz.PHN"), SegmentOrder::NoOverlap) {
        for w in segs.windows(2) {
            assert!(w[0].end <= w[1].start);
        }
        for s in &segs {
            assert!(s.start <= s.end);
        }
    }
    let _ = parse_segments(&text, Path::new("fuzz.WRD"), SegmentOrder::SortedByStart);
    let _ = parse_transcript(&text, Path::new("fuzz.TXT"));
});
