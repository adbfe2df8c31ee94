//! invar reads Kaldi archives written by kaldiio to the values kaldiio reads back, and what invar
//! writes kaldiio reads back. Fixtures and expected values: `tests/data/kaldi/make.py` (kaldiio 2.18.1).

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

use std::path::{Path, PathBuf};

use invar_io::kaldi::{read_ark, read_matrix_at, read_scp, write_ark_scp};
use invar_io::{read_npy, Matrix};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kaldi")
}

const KEYS: [&str; 2] = ["spk1-utt1", "spk2-utt2"];

fn expected(name: &str, key: &str, reader: &str) -> Matrix {
    read_npy(data().join(format!("{name}.{key}.{reader}.npy"))).unwrap()
}

/// Every entry of NAME.ark, read whole and through NAME.scp, as a list in file order.
fn read_both(name: &str) -> Vec<(String, Matrix)> {
    let by_ark = read_ark(data().join(format!("{name}.ark"))).unwrap();
    let scp = data().join(format!("{name}.scp"));
    if scp.exists() {
        let by_scp: Vec<(String, Matrix)> = read_scp(&scp)
            .unwrap()
            .into_iter()
            .map(|e| (e.key.clone(), read_matrix_at(&e.file, e.offset).unwrap()))
            .collect();
        assert_eq!(by_ark, by_scp, "{name}: ark and scp disagree");
    }
    assert_eq!(
        by_ark.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        KEYS
    );
    by_ark
}

#[test]
fn binary_float_double_and_text_equal_kaldiio_exactly() {
    for name in ["float", "double", "text"] {
        for (key, m) in read_both(name) {
            assert_eq!(m, expected(name, &key, "kaldiio"), "{name} {key}");
        }
    }
}

/// CM, CM2, CM3 decompress bit for bit as Kaldi's `CopyToMat` (make.py transcribes it in numpy with
/// the same float/double steps). kaldiio decompresses in float32 with a different operation order;
/// make.py printed how far it lands from Kaldi's values on these fixtures:
///   cm  spk1-utt1: max |kaldi - kaldiio| = 4.77e-07, 7 of 33 values differ
///   cm2 spk1-utt1: max |kaldi - kaldiio| = 9.54e-07, 13 of 33 values differ
///   cm3 spk1-utt1: max |kaldi - kaldiio| = 1.91e-06, 6 of 33 values differ
/// so invar equals Kaldi exactly and kaldiio to within 2e-6 (values up to 12.3 here).
#[test]
fn compressed_matrices_decompress_as_kaldi_does() {
    for name in ["cm", "cm2", "cm3"] {
        for (key, m) in read_both(name) {
            assert_eq!(
                m,
                expected(name, &key, "kaldi"),
                "{name} {key}: Kaldi's values"
            );
            let kd = expected(name, &key, "kaldiio");
            for (a, b) in m.data.iter().zip(&kd.data) {
                assert!((a - b).abs() <= 2e-6, "{name} {key}: {a} vs kaldiio {b}");
            }
        }
    }
    // Compression is lossy: the values stay near the originals kaldiio compressed (float.ark).
    for (key, m) in read_both("cm") {
        let orig = expected("float", &key, "kaldiio");
        let spread = orig.data.iter().fold(0f32, |a, &v| a.max(v.abs()));
        for (a, b) in m.data.iter().zip(&orig.data) {
            assert!((a - b).abs() < 0.02 * spread, "cm {key}: {a} vs {b}");
        }
    }
}

/// What invar writes, kaldiio reads back exactly. Checked once with:
///   INVAR_KEEP_KALDI_OUT=1 cargo test -p invar-io --test kaldi written_by_invar   (writes /tmp/invar-kaldi-out)
///   cd /tmp/invar-kaldi-out && /tmp/kaldi-venv/bin/python -c "import kaldiio, numpy as np
///   d = kaldiio.load_scp('out.scp'); a = dict(kaldiio.load_ark('out.ark'))
///   print(sorted(d), {k: (d[k].dtype, d[k].shape, bool(np.array_equal(d[k], a[k]))) for k in d},
///         d['b'][1].tolist(), d['a'].tolist())"
/// which printed (kaldiio 2.18.1, numpy 2.4.6):
///   ['a', 'b'] {'a': (dtype('float32'), (1, 3), True), 'b': (dtype('float32'), (2, 2), True)}
///     [3.0, -0.10000000149011612] [[1.5, -2.0, 1.0000000031710769e-30]]
#[test]
fn written_by_invar() {
    let a = Matrix::new(1, 3, vec![1.5, -2.0, 1e-30]).unwrap();
    let b = Matrix::new(2, 2, vec![0.0, f32::MAX, 3.0, -0.1]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ark = dir.path().join("out.ark");
    let scp = dir.path().join("out.scp");
    write_ark_scp(&ark, &scp, &[("b", &b), ("a", &a)]).unwrap();
    // The bytes Kaldi's binary float matrix writer produces for "a" (first after "b"'s 15 + 16 bytes).
    let bytes = std::fs::read(&ark).unwrap();
    assert_eq!(&bytes[..9], b"b \0BFM \x04\x02");
    let text = std::fs::read_to_string(&scp).unwrap();
    let want = format!(
        "a {}:{}\nb {}:2\n",
        ark.display(),
        2 + 15 + 16 + 2,
        ark.display()
    );
    assert_eq!(text, want);
    assert_eq!(
        read_ark(&ark).unwrap(),
        vec![("b".to_string(), b.clone()), ("a".to_string(), a.clone())]
    );
    if std::env::var_os("INVAR_KEEP_KALDI_OUT").is_some() {
        let keep = Path::new("/tmp/invar-kaldi-out");
        std::fs::create_dir_all(keep).unwrap();
        write_ark_scp(
            keep.join("out.ark"),
            keep.join("out.scp"),
            &[("b", &b), ("a", &a)],
        )
        .unwrap();
    }
}
