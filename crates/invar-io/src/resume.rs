//! What every resumable run shares, whatever it trains: the SHA-256 that a checkpoint records of
//! its tensor files (and checks on load), the settings diff that refuses a resume with other
//! settings by naming the dotted keys, and the keep-the-newest-N retention policy. invar-train's
//! loop and invar-gmm's EM checkpoints both use these, so the three rules are written once.

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The settings that differ between a checkpoint's (`old`) and a resume's (`new`), as
/// `dotted.path: old → new`, sorted by path; a setting whose last key is in `may_change` is left
/// out (and so is everything below it). A key present on one side only differs from `null`.
pub fn settings_differences(
    old: &serde_json::Value,
    new: &serde_json::Value,
    may_change: &[&str],
) -> Vec<String> {
    fn walk(
        path: &str,
        old: &serde_json::Value,
        new: &serde_json::Value,
        may_change: &[&str],
        out: &mut Vec<String>,
    ) {
        use serde_json::Value;
        let last = path.rsplit('.').next().unwrap_or(path);
        if may_change.contains(&last) {
            return;
        }
        match (old, new) {
            (Value::Object(a), Value::Object(b)) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(
                        &sub,
                        a.get(k).unwrap_or(&Value::Null),
                        b.get(k).unwrap_or(&Value::Null),
                        may_change,
                        out,
                    );
                }
            }
            (a, b) if a != b => out.push(format!("{path}: {a} → {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", old, new, may_change, &mut out);
    out
}

/// The retention policy: of the checkpoints numbered `ids`, which to delete so that the newest
/// `keep_last` remain, plus `keep` if given (a best epoch that must survive).
pub fn checkpoints_to_remove(ids: &[usize], keep_last: usize, keep: Option<usize>) -> Vec<usize> {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let cut = sorted.len().saturating_sub(keep_last);
    sorted[..cut]
        .iter()
        .copied()
        .filter(|&e| Some(e) != keep)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sha256_of_known_inputs() {
        // FIPS 180-2 test vectors.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn differences_name_dotted_keys_and_skip_what_may_change() {
        let old = json!({"em": {"components": 8, "seed": 1, "max_iters": 3}, "split": null});
        let new = json!({"em": {"components": 16, "seed": 1, "max_iters": 9}, "split": "train"});
        assert_eq!(
            settings_differences(&old, &new, &["max_iters"]),
            vec!["em.components: 8 → 16", "split: null → \"train\""]
        );
        assert!(settings_differences(&old, &old, &[]).is_empty());
        // A key missing on one side differs from null.
        let fewer = json!({"em": {"components": 8, "seed": 1}, "split": null});
        assert_eq!(
            settings_differences(&old, &fewer, &[]),
            vec!["em.max_iters: 3 → null"]
        );
    }

    #[test]
    fn policy_keeps_last_n_and_the_kept_one() {
        assert_eq!(
            checkpoints_to_remove(&[1, 2, 3, 4, 5], 2, Some(2)),
            vec![1, 3]
        );
        assert_eq!(
            checkpoints_to_remove(&[1, 2, 3, 4, 5], 2, None),
            vec![1, 2, 3]
        );
        assert_eq!(
            checkpoints_to_remove(&[3, 1, 2], 5, None),
            Vec::<usize>::new()
        );
    }
}
