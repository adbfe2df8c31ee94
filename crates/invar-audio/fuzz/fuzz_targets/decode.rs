//! Fuzzes the WAV/SPHERE decoder (format detection, hound's RIFF parsing, the SPHERE header parser
//! and sample decoding) and the front-end on whatever decodes: no input may panic.
#![no_main]

use invar_audio::features::{Frontend, FrontendConfig};
use invar_audio::{decode, ChannelSelect};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for channel in [ChannelSelect::Mix, ChannelSelect::Index(1)] {
        if let Ok(audio) = decode("fuzz-input", data, channel) {
            assert!(audio.sample_rate > 0);
            let config = FrontendConfig {
                sample_rate: audio.sample_rate,
                ..FrontendConfig::default()
            };
            // Rates too low for the default mel bank are config errors, not panics.
            if let Ok(frontend) = Frontend::new(&config) {
                let _ = frontend.compute(&audio);
            }
        }
    }
});
