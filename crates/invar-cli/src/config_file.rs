//! Config files of the training subcommands: JSON when the name ends in `.json`, TOML otherwise;
//! an error names the file and, from the parser, the line and column.

use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;

/// Settings of the method configs that moved when the three methods took one shape (issue 19):
/// `deny_unknown_fields` refuses the old key, and this says where it went.
const MOVED: [(&str, &str); 4] = [
    (
        "optim",
        "method 000's `optim` section is gone: `epochs` → `train.epochs`, `lr` → \
         `train.optimizer.lr`, `patience` → `train.early_stopping.patience`, `min_delta` → \
         `train.early_stopping.min_delta`, `batch_size` and `validation_fraction` → top level",
    ),
    (
        "init_seed",
        "`init_seed` is now the top-level `seed`, which seeds the weights and the loop",
    ),
    (
        "seed",
        "`protocol.seed` and `train.seed` moved to the method config's top-level `seed`",
    ),
    (
        "batch_size",
        "`pairs.batch_size` and `optim.batch_size` moved to the method config's top-level \
         `batch_size`",
    ),
];

/// The hint for a parser's message about an old key, if it is one.
fn moved_hint(message: &str) -> String {
    MOVED
        .iter()
        .find(|(key, _)| message.contains(&format!("unknown field `{key}`")))
        .map(|(_, hint)| format!(" ({hint})"))
        .unwrap_or_default()
}

/// Reads a config struct from `path` (JSON for `*.json`, else TOML).
pub fn read<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        serde_json::from_str(&text).map_err(|e| {
            let hint = moved_hint(&e.to_string());
            anyhow::Error::new(e)
                .context(format!("{}: not a valid JSON config{hint}", path.display()))
        })
    } else {
        toml::from_str(&text).map_err(|e| {
            let hint = moved_hint(&e.to_string());
            anyhow::Error::new(e)
                .context(format!("{}: not a valid TOML config{hint}", path.display()))
        })
    }
}

/// Reads `path`'s config when a `--config` is given, else takes `default()` (every command's
/// `--config FILE` over the command's own defaults).
pub fn read_or<T: DeserializeOwned>(
    path: Option<&Path>,
    default: impl FnOnce() -> T,
) -> anyhow::Result<T> {
    match path {
        Some(p) => read(p),
        None => Ok(default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        epochs: usize,
        #[serde(default)]
        lr: f64,
    }

    #[test]
    fn json_and_toml_give_the_same_struct_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("c.json");
        let t = dir.path().join("c.toml");
        std::fs::write(&j, r#"{"epochs": 3, "lr": 0.5}"#).unwrap();
        std::fs::write(&t, "epochs = 3\nlr = 0.5\n").unwrap();
        let want = Cfg { epochs: 3, lr: 0.5 };
        assert_eq!(read::<Cfg>(&j).unwrap(), want);
        assert_eq!(read::<Cfg>(&t).unwrap(), want);
        std::fs::write(&t, "epochs = 3\nlearning_rate = 0.5\n").unwrap();
        let e = format!("{:#}", read::<Cfg>(&t).unwrap_err());
        assert!(
            e.contains("c.toml") && e.contains("learning_rate") && e.contains("line 2"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            read::<Cfg>(&dir.path().join("none.toml")).unwrap_err()
        );
        assert!(e.contains("cannot read") && e.contains("none.toml"), "{e}");
    }

    /// Issue 19: the keys the three method configs dropped are refused, naming the new key and
    /// the line; `train.seed` (still a key of the loop's config) is refused by `validate()`.
    #[test]
    fn old_method_config_keys_are_refused_naming_the_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let err = |name: &str, text: &str, read: &dyn Fn(&Path) -> anyhow::Result<()>| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            format!("{:#}", read(&p).expect_err(text))
        };
        let partition = |p: &Path| read::<invar_partition::PartitionConfig>(p).map(drop);
        let speaker = |p: &Path| read::<invar_speaker_cnn::SpeakerCnnConfig>(p).map(drop);
        let supervector = |p: &Path| read::<invar_supervector::SupervectorConfig>(p).map(drop);
        let e = err("p.toml", "seed = 1\n[optim]\nepochs = 3\n", &partition);
        assert!(
            e.contains("`optim`") && e.contains("train.epochs") && e.contains("line 2"),
            "{e}"
        );
        let e = err("p.json", r#"{"optim": {"lr": 0.1}}"#, &partition);
        assert!(
            e.contains("train.optimizer.lr") && e.contains("p.json"),
            "{e}"
        );
        let e = err("s.toml", "init_seed = 4\n", &speaker);
        assert!(e.contains("top-level `seed`"), "{e}");
        let e = err("v.toml", "[protocol]\nseed = 2\n", &supervector);
        assert!(
            e.contains("top-level `seed`") && e.contains("line 2"),
            "{e}"
        );
        let e = err("b.toml", "[pairs]\nbatch_size = 8\n", &supervector);
        assert!(e.contains("top-level") && e.contains("`batch_size`"), "{e}");
        // The new keys parse; a seed left in `train` is refused before any work.
        let p = dir.path().join("new.toml");
        std::fs::write(&p, "seed = 3\nbatch_size = 8\n[train]\nepochs = 2\n").unwrap();
        let c = read::<invar_supervector::SupervectorConfig>(&p).unwrap();
        assert_eq!((c.seed, c.batch_size, c.train.epochs), (3, 8, 2));
        c.validate().unwrap();
        std::fs::write(&p, "[train]\nseed = 3\n").unwrap();
        let c = read::<invar_partition::PartitionConfig>(&p).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("train.seed") && e.contains("`seed`"), "{e}");
    }
}
