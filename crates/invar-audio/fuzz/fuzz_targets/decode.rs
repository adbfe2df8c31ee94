//! Fuzzes the decoders (format detection, hound's RIFF parsing, the SPHERE header parser, and
//! symphonia's FLAC, Ogg/Vorbis, MP3 and MP4/AAC demuxers and decoders) and the front-end on
//! whatever decodes: no input may panic. The first byte picks a magic to put in front of the rest,
//! so every format is reached without the fuzzer having to discover its magic first.
#![no_main]

use invar_audio::features::{Frontend, FrontendConfig};
use invar_audio::{decode, ChannelSelect};
use libfuzzer_sys::fuzz_target;

const MAGICS: [&[u8]; 7] = [
    b"",
    b"fLaC",
    b"OggS",
    b"ID3",
    b"\xff\xfb",
    b"\x00\x00\x00\x18ftyp",
    b"RIFF\x24\x00\x00\x00WAVE",
];

fuzz_target!(|input: &[u8]| {
    let Some((&pick, rest)) = input.split_first() else {
        return;
    };
    let mut data = MAGICS[usize::from(pick) % MAGICS.len()].to_vec();
    data.extend_from_slice(rest);
    for channel in [ChannelSelect::Mix, ChannelSelect::Index(1)] {
        if let Ok(audio) = decode("fuzz-input", &data, channel) {
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
