//! From words to sound: phone durations, formant keyframes with smooth transitions, source
//! amplitudes, intonation, then the Klatt renderer; returns the audio with its alignments.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::config::TextConfig;
use crate::klatt::{self, Frame, Voice, NASAL_POLE_HZ};
use crate::lexicon::Word;
use crate::phones::{PhoneClass, INVENTORY, PAU, SIL};
use crate::speaker::{normal, Speaker};

/// A labelled span of an utterance in samples, `[start, end)`, as in TIMIT `.PHN`/`.WRD` files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// First sample.
    pub start: u64,
    /// One past the last sample.
    pub end: u64,
    /// Phone or word label.
    pub label: String,
}

/// One synthesised utterance before the channel: clean audio and its alignments.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanUtterance {
    /// Mono samples at the corpus sample rate (arbitrary scale; the channel sets the level).
    pub samples: Vec<f32>,
    /// TIMIT phone labels: stops as closure (`tcl`) then release (`t`); `h#` at the ends, `pau` between words.
    pub phones: Vec<Segment>,
    /// Word spans (a word-initial stop's closure belongs to the word).
    pub words: Vec<Segment>,
    /// One span per phone token, stops from closure onset to release end, silences included:
    /// the units of the ZeroSpeech `.item` file.
    pub tokens: Vec<Segment>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PieceKind {
    Silence,
    Steady,
    Closure,
    Burst,
    Aspiration,
}

#[derive(Debug, Clone)]
struct Piece {
    kind: PieceKind,
    phone: usize,
    label: &'static str,
    token: usize,
    blocks: usize,
    /// Voicing gain of the word (accent), linear.
    accent: f32,
    /// Token-level formant factors.
    jitter: [f32; 3],
}

/// Synthesises `words` (a sentence) as said by `speaker`. `rng` drives durations, pauses,
/// intonation and the noise sources; the same rng state gives the same samples.
pub fn articulate<R: Rng>(
    speaker: &Speaker,
    words: &[&Word],
    text: &TextConfig,
    token_spread: f32,
    sample_rate: u32,
    rng: &mut R,
) -> CleanUtterance {
    let fs = sample_rate as f32;
    let block = (sample_rate as usize / 1000).max(1); // 1 ms control blocks
    let ms_to_blocks = |ms: f32| (ms.max(0.0) * fs / 1000.0 / block as f32).round() as usize;

    // 1. Tokens: (phone, word index) with silences.
    let mut tokens: Vec<(usize, Option<usize>)> = vec![(SIL, None)];
    for (w, word) in words.iter().enumerate() {
        if w > 0 && rng.random::<f32>() < text.pause_probability {
            tokens.push((PAU, None));
        }
        for &p in &word.phones {
            tokens.push((p, Some(w)));
        }
    }
    tokens.push((SIL, None));
    let accents: Vec<bool> = (0..words.len())
        .map(|w| w == 0 || rng.random::<f32>() < 0.5)
        .collect();
    let last_word = words.len().saturating_sub(1);

    // 2. Pieces with durations.
    let mut pieces: Vec<Piece> = Vec::with_capacity(tokens.len() + 8);
    for (t, &(p, w)) in tokens.iter().enumerate() {
        let spec = &INVENTORY[p];
        let real = &speaker.phones[p];
        let mut jitter = [1.0f32; 3];
        for j in &mut jitter {
            *j = normal(rng, 0.0, token_spread).exp();
        }
        let final_lengthening = if w == Some(last_word) { 1.25 } else { 1.0 };
        let scale = real.duration_factor / speaker.rate
            * normal(rng, 0.0, 2.5 * token_spread).exp()
            * final_lengthening;
        let accent = match w {
            Some(w) if accents[w] => 10f32.powf(2.0 / 20.0),
            _ => 1.0,
        };
        let mut push = |kind, label, ms: f32, min_ms: f32| {
            pieces.push(Piece {
                kind,
                phone: p,
                label,
                token: t,
                blocks: ms_to_blocks(ms.max(min_ms)).max(1),
                accent,
                jitter,
            });
        };
        match spec.class {
            PhoneClass::Silence => {
                let ms = if p == SIL {
                    text.edge_silence_ms * (1.0 + rng.random::<f32>())
                } else {
                    spec.duration_ms * (0.7 + 0.8 * rng.random::<f32>())
                };
                push(PieceKind::Silence, spec.symbol, ms, 1.0);
            }
            PhoneClass::Stop => {
                if let (Some(rel), Some(cl)) = (spec.release, spec.closure_label()) {
                    push(PieceKind::Closure, cl, rel.closure_ms * scale, 20.0);
                    push(
                        PieceKind::Burst,
                        spec.symbol,
                        rel.burst_ms * scale.sqrt(),
                        5.0,
                    );
                    push(
                        PieceKind::Aspiration,
                        spec.symbol,
                        rel.aspiration_ms * real.vot_factor * scale.sqrt(),
                        3.0,
                    );
                }
            }
            _ => push(
                PieceKind::Steady,
                spec.symbol,
                spec.duration_ms * scale,
                25.0,
            ),
        }
    }

    // 3. Timeline.
    let mut starts = Vec::with_capacity(pieces.len());
    let mut total = 0usize;
    for pc in &pieces {
        starts.push(total);
        total += pc.blocks;
    }

    // 4. Formant keyframes (block position, F1–F3, B1–B3).
    let vtl = speaker.vtl;
    let target = |pc: &Piece, end: bool| -> ([f32; 3], [f32; 3]) {
        let spec = &INVENTORY[pc.phone];
        let real = &speaker.phones[pc.phone];
        let (base, fac) = if end {
            (spec.formants_end, real.end_factors)
        } else {
            (spec.formants, real.formant_factors)
        };
        let mut f = [0.0; 3];
        for k in 0..3 {
            f[k] = base[k] * fac[k] * vtl * pc.jitter[k];
        }
        // Keep the formants ordered and apart (allophone offsets can push them together).
        f[1] = f[1].max(f[0] + 150.0);
        f[2] = f[2].max(f[1] + 200.0);
        (f, spec.bandwidths)
    };
    let mut keys: Vec<(f32, [f32; 3], [f32; 3])> = Vec::with_capacity(2 * pieces.len());
    for (i, pc) in pieces.iter().enumerate() {
        let spec = &INVENTORY[pc.phone];
        let (s, d) = (starts[i] as f32, pc.blocks as f32);
        match pc.kind {
            PieceKind::Silence | PieceKind::Aspiration => {}
            PieceKind::Closure | PieceKind::Burst => {
                let (f, b) = target(pc, false);
                keys.push((s, f, b));
                if pc.kind == PieceKind::Closure {
                    keys.push((s + d, f, b));
                }
            }
            PieceKind::Steady if !spec.has_formants() => {}
            PieceKind::Steady => {
                let frac = if matches!(spec.class, PhoneClass::Vowel | PhoneClass::Diphthong) {
                    0.3
                } else {
                    0.2
                };
                let tr = (d * frac).min(ms_to_blocks(35.0) as f32);
                let (f0, b0) = target(pc, false);
                let (f1, b1) = target(pc, true);
                keys.push((s + tr, f0, b0));
                keys.push((s + d - tr, f1, b1));
            }
        }
    }
    if keys.is_empty() {
        let neutral = [500.0 * vtl, 1500.0 * vtl, 2500.0 * vtl];
        keys.push((0.0, neutral, [100.0, 100.0, 150.0]));
    }

    // 5. Per-block frames.
    let mut frames = vec![Frame::default(); total];
    let mut key = 0usize;
    for (b, fr) in frames.iter_mut().enumerate() {
        let t = b as f32 + 0.5;
        while key + 1 < keys.len() && keys[key + 1].0 <= t {
            key += 1;
        }
        let (f, bw) = if t <= keys[0].0 {
            (keys[0].1, keys[0].2)
        } else if key + 1 >= keys.len() {
            (keys[key].1, keys[key].2)
        } else {
            let (a, z) = (&keys[key], &keys[key + 1]);
            let u = if z.0 > a.0 {
                ((t - a.0) / (z.0 - a.0)).clamp(0.0, 1.0)
            } else {
                1.0
            };
            let w = 0.5 - 0.5 * (std::f32::consts::PI * u).cos();
            let mut f = [0.0; 3];
            let mut bw = [0.0; 3];
            for k in 0..3 {
                f[k] = a.1[k] + w * (z.1[k] - a.1[k]);
                bw[k] = a.2[k] + w * (z.2[k] - a.2[k]);
            }
            (f, bw)
        };
        fr.formants = f;
        fr.bandwidths = bw;
    }

    let nasal_pole = NASAL_POLE_HZ * vtl;
    let mut av = vec![0.0f32; total];
    let mut ah = vec![0.0f32; total];
    let mut nz = vec![nasal_pole; total];
    let db = |x: f32| {
        if x.is_finite() {
            10f32.powf(x / 20.0)
        } else {
            0.0
        }
    };
    let mut noise = ([3000.0f32, 5000.0], [1000.0f32, 1000.0], [0.0f32; 3]);
    for (i, pc) in pieces.iter().enumerate() {
        let spec = &INVENTORY[pc.phone];
        let real = &speaker.phones[pc.phone];
        let range = starts[i]..starts[i] + pc.blocks;
        if let Some(shape) = spec.noise {
            let nf = vtl * real.noise_factor;
            noise = (
                [shape.freqs[0] * nf, shape.freqs[1] * nf],
                [shape.bandwidths[0] * vtl, shape.bandwidths[1] * vtl],
                [
                    db(shape.gains_db[0]),
                    db(shape.gains_db[1]),
                    db(shape.bypass_db),
                ],
            );
        }
        let (voicing, asp, fric) = match pc.kind {
            PieceKind::Silence => (0.0, 0.0, 0.0),
            PieceKind::Closure => (db(spec.voicing_db), 0.0, 0.0),
            PieceKind::Burst => (
                if spec.voiced { db(-14.0) } else { 0.0 },
                0.0,
                spec.noise.map_or(0.0, |n| db(n.level_db)),
            ),
            PieceKind::Aspiration => (
                if spec.voiced { db(-8.0) } else { 0.0 },
                if spec.voiced { 0.0 } else { 0.3 },
                0.0,
            ),
            PieceKind::Steady if spec.symbol == "hh" => (0.0, 0.35, 0.0),
            PieceKind::Steady => (
                db(spec.voicing_db) * pc.accent,
                0.0,
                spec.noise.map_or(0.0, |n| db(n.level_db)),
            ),
        };
        let n = pc.blocks;
        let rise = match pc.kind {
            PieceKind::Steady => (n as f32 * 0.3).min(ms_to_blocks(20.0) as f32).max(1.0),
            _ => 1.0,
        };
        for (j, b) in range.enumerate() {
            av[b] = voicing;
            ah[b] = asp;
            // Frication envelope: trapezoid for fricatives, abrupt for bursts.
            let env = ((j as f32 + 0.5) / rise)
                .min((n - j) as f32 / rise)
                .min(1.0);
            frames[b].af = fric * env;
            frames[b].noise_freqs = noise.0;
            frames[b].noise_bandwidths = noise.1;
            frames[b].noise_gains = noise.2;
            if let Some(z) = spec.nasal_zero {
                nz[b] = z * vtl * real.formant_factors[1];
            }
        }
    }
    let av = box_smooth(&av, ms_to_blocks(8.0));
    let ah = box_smooth(&ah, ms_to_blocks(6.0));
    let nz = box_smooth(&nz, ms_to_blocks(10.0));

    // 6. Intonation: declination plus a raised-cosine accent over accented words, final fall.
    let mut semis = vec![0.0f32; total];
    for (b, s) in semis.iter_mut().enumerate() {
        *s = 1.0 - 3.0 * b as f32 / total.max(1) as f32;
    }
    let mut word_spans: Vec<(usize, usize)> = vec![(usize::MAX, 0); words.len()];
    for (i, pc) in pieces.iter().enumerate() {
        if let Some(w) = tokens[pc.token].1 {
            word_spans[w].0 = word_spans[w].0.min(starts[i]);
            word_spans[w].1 = word_spans[w].1.max(starts[i] + pc.blocks);
        }
    }
    for (w, &(s, e)) in word_spans.iter().enumerate() {
        if s >= e {
            continue;
        }
        let height = if accents[w] {
            speaker.f0_range_semitones * rng.random_range(0.6..=1.0f32)
        } else {
            0.0
        };
        for b in s..e {
            let u = (b - s) as f32 / (e - s) as f32;
            let bump = 0.5 - 0.5 * (2.0 * std::f32::consts::PI * u).cos();
            semis[b] += height * bump;
            if w == last_word {
                semis[b] -= 0.5 * speaker.f0_range_semitones * u;
            }
        }
    }
    for (b, fr) in frames.iter_mut().enumerate() {
        fr.f0 = speaker.f0_hz * 2f32.powf(semis[b] / 12.0);
        fr.av = av[b];
        fr.ah = ah[b];
        fr.nasal_zero = nz[b];
    }

    // 7. Render.
    let voice = Voice {
        high_formants: [3300.0 * vtl, 3750.0 * vtl],
        nasal_pole,
        open_quotient: speaker.open_quotient,
        jitter: speaker.jitter,
        shimmer: speaker.shimmer,
        breathiness: speaker.breathiness,
        tilt_db: speaker.tilt_db,
    };
    let mut samples = Vec::new();
    klatt::render(&frames, block, &voice, fs, rng, &mut samples);

    // 8. Labels in samples.
    let bs = block as u64;
    let mut phones: Vec<Segment> = Vec::new();
    let mut token_spans: Vec<Segment> = Vec::new();
    for (i, pc) in pieces.iter().enumerate() {
        let (s, e) = (starts[i] as u64 * bs, (starts[i] + pc.blocks) as u64 * bs);
        match phones.last_mut() {
            Some(last) if last.label == pc.label && i > 0 && pieces[i - 1].token == pc.token => {
                last.end = e
            }
            _ => phones.push(Segment {
                start: s,
                end: e,
                label: pc.label.to_string(),
            }),
        }
        match token_spans.last_mut() {
            Some(last) if i > 0 && pieces[i - 1].token == pc.token => last.end = e,
            _ => token_spans.push(Segment {
                start: s,
                end: e,
                label: INVENTORY[pc.phone].symbol.to_string(),
            }),
        }
    }
    let words_out = word_spans
        .iter()
        .zip(words)
        .filter(|((s, e), _)| s < e)
        .map(|(&(s, e), w)| Segment {
            start: s as u64 * bs,
            end: e as u64 * bs,
            label: w.spelling.to_string(),
        })
        .collect();
    CleanUtterance {
        samples,
        phones,
        words: words_out,
        tokens: token_spans,
    }
}

/// Centred moving average of width `w` (≥ 1), edges averaged over what exists.
fn box_smooth(x: &[f32], w: usize) -> Vec<f32> {
    let w = w.max(1);
    let half = w / 2;
    let mut prefix = Vec::with_capacity(x.len() + 1);
    prefix.push(0.0f64);
    for v in x {
        prefix.push(prefix[prefix.len() - 1] + *v as f64);
    }
    (0..x.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + w - half).min(x.len());
            ((prefix[hi] - prefix[lo]) / (hi - lo) as f64) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_smooth_averages_and_keeps_constants() {
        assert_eq!(box_smooth(&[2.0; 5], 3), vec![2.0; 5]);
        let y = box_smooth(&[0.0, 0.0, 3.0, 0.0, 0.0], 3);
        assert_eq!(y, vec![0.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(box_smooth(&[1.0, 2.0], 1), vec![1.0, 2.0]);
    }
}
