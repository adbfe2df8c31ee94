//! Config files of the training subcommands: JSON when the name ends in `.json`, TOML otherwise;
//! an error names the file and, from the parser, the line and column.

use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;

/// Reads a config struct from `path` (JSON for `*.json`, else TOML).
pub fn read<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        serde_json::from_str(&text)
            .with_context(|| format!("{}: not a valid JSON config", path.display()))
    } else {
        toml::from_str(&text)
            .with_context(|| format!("{}: not a valid TOML config", path.display()))
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
}
