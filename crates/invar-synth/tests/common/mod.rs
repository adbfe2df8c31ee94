//! Helpers shared by the integration tests.
#![allow(dead_code)]

use invar_synth::Segment;

/// Mean power of `x[seg]`, dB.
pub fn power_db(x: &[f32], seg: &Segment) -> f64 {
    let s = &x[seg.start as usize..seg.end as usize];
    let p = s.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / s.len().max(1) as f64;
    10.0 * (p + 1e-20).log10()
}

/// Zero crossings per sample in `x[seg]`.
pub fn zcr(x: &[f32], seg: &Segment) -> f64 {
    let s = &x[seg.start as usize..seg.end as usize];
    s.windows(2)
        .filter(|w| (w[0] >= 0.0) != (w[1] >= 0.0))
        .count() as f64
        / s.len().max(1) as f64
}

/// Parses `start end label` lines (a TIMIT `.PHN`/`.WRD` file) written by the generator.
pub fn parse_segments(text: &str) -> anyhow::Result<Vec<Segment>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            anyhow::ensure!(f.len() == 3, "bad line {l:?}");
            Ok(Segment {
                start: f[0].parse()?,
                end: f[1].parse()?,
                label: f[2].to_string(),
            })
        })
        .collect()
}

/// Every file under `dir` (relative path → bytes), sorted.
pub fn tree(dir: &std::path::Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir)?.to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read(&p)?));
            }
        }
    }
    out.sort();
    Ok(out)
}
