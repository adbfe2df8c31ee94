//! What a feature set is, kept in its `config.json` under `"set"` ([`SetMeta`]): the frame timing
//! of its rows, the front-end that computed the frames it derives from, its dimensions, and a seal
//! on its manifest (row count and FNV-1a checksum). Writers record the origin when they start and
//! seal when the manifest is final; [`crate::FeatureSet::open`] refuses an invar set whose
//! description is missing, truncated, unsealed or disagrees with its manifest. Derived sets
//! (posteriorgrams, partition outputs) carry their input's origin forward.
//!
//! Sets written before the seal existed are refused with the command that rewrites them: a default
//! timing or an unchecked manifest is what the seal is there to prevent.

use std::path::Path;

use invar_audio::FrontendConfig;
use invar_io::FrameTiming;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, CONFIG, MANIFEST};

/// The key of the description inside `config.json`.
pub const SET_KEY: &str = "set";

const REWRITE: &str = "rewrite the set with the command that made it (with --force), or restore \
                       the file from the run that wrote it";

/// Where a set's rows come from: recorded when a writer starts, carried forward by derived sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetOrigin {
    /// Frame timing of the rows. `None` only for a set derived from one that records none (a Kaldi
    /// scp or a plain `.npy` folder): readers then take the timing from their flags.
    pub timing: Option<FrameTiming>,
    /// The front-end that computed the frames (`None` as for `timing`).
    pub frontend: Option<FrontendConfig>,
}

impl SetOrigin {
    /// The origin of frames computed by `frontend`.
    pub fn from_frontend(frontend: &FrontendConfig) -> SetOrigin {
        SetOrigin {
            timing: Some(FrameTiming::from_ms(
                f64::from(frontend.frame.shift_ms),
                f64::from(frontend.frame.length_ms),
            )),
            frontend: Some(frontend.clone()),
        }
    }

    /// The origin of a set that records none (a Kaldi scp, a plain `.npy` folder).
    pub fn unknown() -> SetOrigin {
        SetOrigin {
            timing: None,
            frontend: None,
        }
    }
}

/// The manifest's row count and the FNV-1a (64-bit) checksum of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSeal {
    pub rows: usize,
    /// Lowercase hex, 16 digits.
    pub fnv1a: String,
}

impl ManifestSeal {
    /// The seal of a manifest's text with `rows` entries.
    pub fn of(text: &[u8], rows: usize) -> ManifestSeal {
        ManifestSeal {
            rows,
            fnv1a: format!("{:016x}", fnv1a(text)),
        }
    }
}

/// A sealed set's full description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetMeta {
    pub timing: Option<FrameTiming>,
    pub frontend: Option<FrontendConfig>,
    /// Columns of every matrix (0 for an empty set).
    pub dims: usize,
    pub manifest: ManifestSeal,
}

impl SetMeta {
    /// The origin part, for a derived set to carry forward.
    pub fn origin(&self) -> SetOrigin {
        SetOrigin {
            timing: self.timing,
            frontend: self.frontend.clone(),
        }
    }
}

/// 64-bit FNV-1a.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_more(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a continued from the state `h` over `bytes`.
pub(crate) fn fnv1a_more(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// [`fnv1a`] of a file's bytes, read in 64 KiB blocks (a manifest of millions of lines is never
/// held whole).
fn fnv1a_file(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut h = fnv1a(b"");
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h);
        }
        h = fnv1a_more(h, &buf[..n]);
    }
}

/// `config` with the origin recorded under [`SET_KEY`] (an object is required).
pub(crate) fn with_origin(
    dir: &Path,
    config: &serde_json::Value,
    origin: &SetOrigin,
) -> Result<serde_json::Value> {
    let mut config = config.clone();
    let Some(map) = config.as_object_mut() else {
        return Err(Error::Config {
            field: "feature-set config",
            reason: format!(
                "{}: must be a JSON object to hold the set's description, found {config}",
                dir.display()
            ),
        });
    };
    map.insert(SET_KEY.into(), json(origin)?);
    Ok(config)
}

fn json<T: Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::Config {
        field: "feature-set description",
        reason: e.to_string(),
    })
}

/// Seals the set in `dir` once its manifest is final: adds the dimensions and the manifest's seal
/// to the origin (`origin`, or for merged shards the one in `config.json`) and rewrites
/// `config.json` atomically.
pub(crate) fn seal(
    dir: &Path,
    origin: Option<&SetOrigin>,
    dims: usize,
    rows: usize,
) -> Result<SetMeta> {
    let config_path = dir.join(CONFIG);
    let mut config = read_config(&config_path)?;
    let origin: SetOrigin = match (origin, config.get(SET_KEY)) {
        (Some(o), _) => o.clone(),
        (None, Some(v)) => {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                m.remove("dims");
                m.remove("manifest");
            }
            parse(&config_path, v)?
        }
        (None, None) => return Err(older(&config_path)),
    };
    let manifest_path = dir.join(MANIFEST);
    let hash = fnv1a_file(&manifest_path)
        .map_err(|e| Error::io(&manifest_path, "read the manifest to seal it", e))?;
    let meta = SetMeta {
        timing: origin.timing,
        frontend: origin.frontend,
        dims,
        manifest: ManifestSeal {
            rows,
            fnv1a: format!("{hash:016x}"),
        },
    };
    if let Some(m) = config.as_object_mut() {
        m.insert(SET_KEY.into(), json(&meta)?);
    }
    invar_io::write_json(&config_path, &config)?;
    Ok(meta)
}

fn read_config(path: &Path) -> Result<serde_json::Value> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Undescribed {
                path: path.to_path_buf(),
                problem: format!(
                    "missing: an invar feature set (it has {MANIFEST}) needs its {CONFIG} for \
                     its frame timing, dimensions, front-end and sealed row count, which are \
                     never assumed"
                ),
                fix: REWRITE,
            })
        }
        Err(e) => return Err(Error::io(path, "read the set's description", e)),
    };
    serde_json::from_slice(&bytes).map_err(|e| Error::Undescribed {
        path: path.to_path_buf(),
        problem: format!(
            "not a complete JSON object ({e}); expected the set's description (frame timing, \
             dimensions, front-end, sealed row count)"
        ),
        fix: REWRITE,
    })
}

fn parse<T: serde::de::DeserializeOwned>(path: &Path, v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Undescribed {
        path: path.to_path_buf(),
        problem: format!("its \"{SET_KEY}\" entry is not a set description: {e}"),
        fix: REWRITE,
    })
}

fn older(path: &Path) -> Error {
    Error::Undescribed {
        path: path.to_path_buf(),
        problem: format!(
            "has no \"{SET_KEY}\" entry (frame timing, dimensions, front-end, sealed manifest \
             row count): written by an older invar, or not by invar"
        ),
        fix: REWRITE,
    }
}

/// Reads and checks the description of the invar set in `dir` against its manifest's bytes and
/// entry count.
pub(crate) fn read_sealed(dir: &Path, manifest_text: &[u8], rows: usize) -> Result<SetMeta> {
    let meta = read_seal(dir)?;
    check_seal(dir, &meta, fnv1a(manifest_text), rows)?;
    Ok(meta)
}

/// The sealed description of the invar set in `dir`, not yet checked against its manifest (see
/// [`check_seal`]).
pub(crate) fn read_seal(dir: &Path) -> Result<SetMeta> {
    let config_path = dir.join(CONFIG);
    let config = read_config(&config_path)?;
    let Some(v) = config.get(SET_KEY) else {
        return Err(older(&config_path));
    };
    if v.get("manifest").is_none() {
        return Err(Error::Undescribed {
            path: config_path,
            problem: "the set was never sealed (the run that wrote it did not finish, or its \
                      shards were not merged)"
                .into(),
            fix: REWRITE,
        });
    }
    parse(&config_path, v.clone())
}

/// Checks a manifest's FNV-1a checksum and entry count against the seal `meta` holds.
pub(crate) fn check_seal(dir: &Path, meta: &SetMeta, fnv1a: u64, rows: usize) -> Result<()> {
    let manifest_path = dir.join(MANIFEST);
    if meta.manifest.rows != rows {
        return Err(Error::Mismatch {
            path: manifest_path,
            what: "rows",
            expected: format!(
                "{} (sealed in {CONFIG} when the set was written)",
                meta.manifest.rows
            ),
            found: format!("{rows}: the manifest was cut or edited; {REWRITE}"),
        });
    }
    let found = ManifestSeal {
        rows,
        fnv1a: format!("{fnv1a:016x}"),
    };
    if found.fnv1a != meta.manifest.fnv1a {
        return Err(Error::Mismatch {
            path: manifest_path,
            what: "content checksum (FNV-1a)",
            expected: format!("{} (sealed in {CONFIG})", meta.manifest.fnv1a),
            found: format!(
                "{}: the manifest was changed after it was written; {REWRITE}",
                found.fnv1a
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_values() {
        // Reference values of 64-bit FNV-1a (Fowler/Noll/Vo test vectors).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// The streamed checksum a seal takes equals the one over the whole bytes, across the 64 KiB
    /// block boundaries.
    #[test]
    fn fnv1a_of_a_file_streams_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.tsv");
        let bytes: Vec<u8> = (0..200_003u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(fnv1a_file(&path).unwrap(), fnv1a(&bytes));
        std::fs::write(&path, b"").unwrap();
        assert_eq!(fnv1a_file(&path).unwrap(), fnv1a(b""));
    }

    #[test]
    fn origin_from_a_frontend_is_its_frame_timing() {
        let mut fe = FrontendConfig::default();
        fe.frame.shift_ms = 20.0;
        fe.frame.length_ms = 30.0;
        let o = SetOrigin::from_frontend(&fe);
        let t = o.timing.unwrap();
        assert!((t.hop_s - 0.020).abs() < 1e-12 && (t.win_s - 0.030).abs() < 1e-12);
        assert_eq!(o.frontend.unwrap(), fe);
    }
}
