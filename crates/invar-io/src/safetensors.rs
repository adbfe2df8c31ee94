//! safetensors files of plain little-endian f32/f64 tensors, the format of invar-gmm's models,
//! statistics and EM checkpoints and of supervector matrices: tensors to bytes (with the header's
//! keys sorted, so the same tensors always give the same bytes), atomic writes, and reads into
//! `Vec<f32>`/`Vec<f64>` that check each tensor's dtype and shape and name the file and tensor.
//! A malformed or truncated file is an error, never a panic.

use std::collections::HashMap;
use std::path::Path;

pub use ::safetensors::{Dtype, SafeTensors};

use crate::{Error, Result};

/// One tensor to write: its name, dtype, shape and little-endian bytes (see [`f32_bytes`] and
/// [`f64_bytes`]).
pub type NamedTensor<'a> = (&'a str, Dtype, Vec<usize>, Vec<u8>);

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::Safetensors {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The little-endian bytes of `v`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The little-endian bytes of `v`.
pub fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Named tensors and `metadata` as the bytes of one safetensors file (`path` only names errors).
/// A tensor whose bytes do not fill its shape is an error naming it.
pub fn to_bytes(
    path: &Path,
    tensors: &[NamedTensor<'_>],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let views = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            ::safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.to_string(), v))
                .map_err(|e| bad(path, format!("tensor {name} ({dtype:?} {shape:?}): {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes =
        ::safetensors::serialize(views, Some(metadata)).map_err(|e| bad(path, e.to_string()))?;
    sorted_header(bytes, path)
}

/// Writes named tensors and `metadata` as one safetensors file, atomically (see [`to_bytes`]).
pub fn write(
    path: &Path,
    tensors: &[NamedTensor<'_>],
    metadata: HashMap<String, String>,
) -> Result<()> {
    let bytes = to_bytes(path, tensors, metadata)?;
    crate::atomic_write(path, |w| w.write_all(&bytes))
}

/// safetensors writes the `__metadata__` entries in a `HashMap`'s order, which changes from
/// process to process: a file with two or more entries (the i-vector extractor's) had different
/// bytes on every run. The header is rewritten with every object's keys sorted (same tensors,
/// same offsets, padded with spaces to 8 bytes as safetensors pads it), so the same tensors always
/// give the same bytes.
fn sorted_header(bytes: Vec<u8>, path: &Path) -> Result<Vec<u8>> {
    fn write_sorted(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::String(k.clone()).to_string());
                    out.push(':');
                    write_sorted(&map[k], out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let header_err = |reason: &str| bad(path, format!("header: {reason}"));
    let len = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| header_err("shorter than 8 bytes"))?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| header_err("length past the end"))?;
    let header: serde_json::Value =
        serde_json::from_slice(&bytes[8..end]).map_err(|e| header_err(&e.to_string()))?;
    let mut text = String::new();
    write_sorted(&header, &mut text);
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + bytes.len() - end);
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[end..]);
    Ok(out)
}

/// Reads a whole file, naming it in the error.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// Parses safetensors bytes read from `path` (named in the error): a truncated or malformed file
/// is an error.
pub fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| bad(path, e.to_string()))
}

/// The tensor `name` of dtype `want`: its bytes and shape, or an error naming the file, the
/// tensor and both dtypes.
fn tensor<'a>(
    st: &SafeTensors<'a>,
    path: &Path,
    name: &str,
    want: Dtype,
) -> Result<(&'a [u8], Vec<usize>)> {
    let t = st
        .tensor(name)
        .map_err(|e| bad(path, format!("tensor {name}: {e}")))?;
    if t.dtype() != want {
        return Err(bad(
            path,
            format!("tensor {name} has dtype {:?}, expected {want:?}", t.dtype()),
        ));
    }
    Ok((t.data(), t.shape().to_vec()))
}

/// The f32 tensor `name` and its shape; another dtype is an error naming it.
pub fn read_f32(st: &SafeTensors<'_>, path: &Path, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
    let (data, shape) = tensor(st, path, name, Dtype::F32)?;
    let v = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok((v, shape))
}

/// The f64 tensor `name` and its shape; another dtype is an error naming it.
pub fn read_f64(st: &SafeTensors<'_>, path: &Path, name: &str) -> Result<(Vec<f64>, Vec<usize>)> {
    let (data, shape) = tensor(st, path, name, Dtype::F64)?;
    let v = data
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        .collect();
    Ok((v, shape))
}

/// The f64 tensor `name`, which must have shape `shape`: another dtype or shape is an error
/// naming the tensor, what it holds and what was expected.
pub fn read_f64_shaped(
    st: &SafeTensors<'_>,
    path: &Path,
    name: &str,
    shape: &[usize],
) -> Result<Vec<f64>> {
    let (v, got) = read_f64(st, path, name)?;
    if got != shape {
        return Err(bad(
            path,
            format!("tensor {name} has shape {got:?}, expected {shape:?}"),
        ));
    }
    Ok(v)
}

/// The tensor `name` as f32 whether it is stored as f32 or f64 (f64 rounded to nearest), and its
/// shape; another dtype is an error naming it.
pub fn read_as_f32(
    st: &SafeTensors<'_>,
    path: &Path,
    name: &str,
) -> Result<(Vec<f32>, Vec<usize>)> {
    let dtype = st
        .tensor(name)
        .map_err(|e| bad(path, format!("tensor {name}: {e}")))?
        .dtype();
    match dtype {
        Dtype::F32 => read_f32(st, path, name),
        Dtype::F64 => {
            let (v, shape) = read_f64(st, path, name)?;
            #[allow(clippy::cast_possible_truncation)]
            Ok((v.into_iter().map(|x| x as f32).collect(), shape))
        }
        other => Err(bad(
            path,
            format!("tensor {name} is {other:?}; use F32 or F64"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<NamedTensor<'static>> {
        vec![
            (
                "w",
                Dtype::F32,
                vec![2, 3],
                f32_bytes(&[1.0, -2.5, 3.25, 0.0, 1e-30, -7.0]),
            ),
            ("n", Dtype::F64, vec![3], f64_bytes(&[0.1, 1e300, -0.0])),
        ]
    }

    fn meta() -> HashMap<String, String> {
        HashMap::from([
            ("format".to_string(), "test v1".to_string()),
            ("b".to_string(), "2".to_string()),
            ("a".to_string(), "1".to_string()),
        ])
    }

    #[test]
    fn round_trip_keeps_values_shapes_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.safetensors");
        write(&path, &sample(), meta()).unwrap();
        let bytes = read_file(&path).unwrap();
        let st = parse(&bytes, &path).unwrap();
        let (w, ws) = read_f32(&st, &path, "w").unwrap();
        assert_eq!(ws, [2, 3]);
        assert_eq!(w, [1.0, -2.5, 3.25, 0.0, 1e-30, -7.0]);
        let n = read_f64_shaped(&st, &path, "n", &[3]).unwrap();
        assert_eq!(
            n.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [0.1f64, 1e300, -0.0]
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(header.metadata().as_ref().unwrap(), &meta());
        let (as32, _) = read_as_f32(&st, &path, "n").unwrap();
        assert_eq!(as32, [0.1f32, 1e300f64 as f32, -0.0]);
    }

    #[test]
    fn same_tensors_give_the_same_bytes_with_sorted_keys() {
        let p = Path::new("x.safetensors");
        let a = to_bytes(p, &sample(), meta()).unwrap();
        for _ in 0..5 {
            assert_eq!(to_bytes(p, &sample(), meta()).unwrap(), a);
        }
        let len = u64::from_le_bytes(a[..8].try_into().unwrap()) as usize;
        assert_eq!(len % 8, 0);
        let header = std::str::from_utf8(&a[8..8 + len]).unwrap();
        assert!(
            header.starts_with(r#"{"__metadata__":{"a":"1","b":"2","format":"test v1"},"n":"#),
            "{header}"
        );
    }

    #[test]
    fn wrong_dtype_and_shape_are_named() {
        let p = Path::new("dir/model.safetensors");
        let bytes = to_bytes(p, &sample(), meta()).unwrap();
        let st = parse(&bytes, p).unwrap();
        let e = read_f64(&st, p, "w").unwrap_err().to_string();
        assert!(
            e.contains("dir/model.safetensors")
                && e.contains("tensor w has dtype F32, expected F64"),
            "{e}"
        );
        let e = read_f32(&st, p, "n").unwrap_err().to_string();
        assert!(e.contains("tensor n has dtype F64, expected F32"), "{e}");
        let e = read_f64_shaped(&st, p, "n", &[1, 3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("tensor n has shape [3], expected [1, 3]"), "{e}");
        let e = read_f32(&st, p, "missing").unwrap_err().to_string();
        assert!(e.contains("tensor missing"), "{e}");
        // Bytes that do not fill the shape are refused on writing too.
        let short = [("t", Dtype::F32, vec![2, 2], f32_bytes(&[1.0; 3]))];
        let e = to_bytes(p, &short, HashMap::new()).unwrap_err().to_string();
        assert!(e.contains("tensor t (F32 [2, 2])"), "{e}");
    }

    #[test]
    fn truncated_or_garbage_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let bytes = to_bytes(&path, &sample(), meta()).unwrap();
        for cut in [0, 3, 8, 20, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let read = read_file(&path).unwrap();
            let e = parse(&read, &path)
                .err()
                .unwrap_or_else(|| panic!("cut {cut} parsed"));
            assert!(e.to_string().contains("t.safetensors"), "{e}");
        }
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&huge, &path).is_err());
        let e = read_file(&dir.path().join("absent.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("absent.safetensors"), "{e}");
    }
}
