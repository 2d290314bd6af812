//! Envoy's rate limit service layout: a directory given as the config path loads every
//! `*.yaml` (and `*.yml`) file of its `config/` subdirectory
//! (`RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/`), or of the directory itself when it has
//! no `config/`, in name order. Each file holds one domain, or several as YAML documents
//! separated by `---`; a domain defined twice is an error naming both files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ConfigFileError;
use crate::file::{DomainFile, FileConfig};

/// The directory whose files are read: `dir/config` if it exists, else `dir`.
pub fn root(dir: &Path) -> PathBuf {
    let sub = dir.join("config");
    if sub.is_dir() { sub } else { dir.to_path_buf() }
}

/// The YAML files of the layout at `dir`, in name order.
fn files(dir: &Path) -> Result<Vec<PathBuf>, ConfigFileError> {
    let root = root(dir);
    let read = |source| ConfigFileError::Read {
        path: root.clone(),
        source,
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .map_err(read)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                    e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml")
                })
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The documents of a multi-document YAML text: each with the number of lines before
/// it, so that a document padded with as many empty lines keeps the file's line numbers.
fn documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let marker = line.trim_end();
        if marker == "---" || marker.starts_with("--- ") || marker == "..." {
            docs.push((start, std::mem::take(&mut current)));
            start = i + 1;
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start, current));
    docs.retain(|(_, d)| {
        d.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// Read the layout at `dir`: the file it makes (its `domains`) and the text of every
/// file with its name (what a reload compares to see a change).
pub fn read(dir: &Path) -> Result<(FileConfig, String), ConfigFileError> {
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut file = FileConfig::default();
    let mut all = String::new();
    let paths = files(dir)?;
    if paths.is_empty() {
        return Err(ConfigFileError::Invalid {
            path: root(dir),
            at: "directory".into(),
            message: "no *.yaml file: Envoy's layout keeps one domain per file in RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/".into(),
        });
    }
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigFileError::Read {
            path: path.clone(),
            source,
        })?;
        all.push_str(&format!("{}\n{text}\n", path.display()));
        for (before, doc) in documents(&text) {
            let padded = format!("{}{doc}", "\n".repeat(before));
            let d: DomainFile = floodgate_engine::config::from_yaml(&path, &padded)?;
            if let Some(first) = seen.get(&d.domain) {
                return Err(ConfigFileError::Invalid {
                    path: path.clone(),
                    at: format!("domain {:?}", d.domain),
                    message: format!(
                        "defined twice: in {} and in {}",
                        first.display(),
                        path.display()
                    ),
                });
            }
            seen.insert(d.domain.clone(), path.clone());
            file.domains.push(d);
        }
    }
    Ok((file, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_keep_their_lines() {
        let d = documents("# a\ndomain: a\n---\ndomain: b\n--- \n\n...\n");
        assert_eq!(
            d,
            [
                (0, "# a\ndomain: a\n".to_string()),
                (3, "domain: b\n".to_string())
            ]
        );
    }
}

#[cfg(test)]
mod layout_tests {
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn a_runtime_directory_loads_every_domain_of_its_config_files() {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config");
        write(
            &config,
            "a.yaml",
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
        );
        write(
            &config,
            "b.yaml",
            "domain: mongo\ndescriptors:\n  - key: database\n    rate_limit: {unit: minute, requests_per_unit: 60}\n---\ndomain: auth\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
        );
        write(&config, "notes.txt", "not read");
        let cfg = crate::config::load(root.path()).unwrap();
        let mut names: Vec<&String> = cfg.rules.domains.keys().collect();
        names.sort();
        assert_eq!(names, ["auth", "edge", "mongo"]);
        // the directory itself, without config/
        let cfg = crate::config::load(&config).unwrap();
        assert_eq!(cfg.rules.domains.len(), 3);
    }

    #[test]
    fn a_domain_in_two_files_names_both_and_errors_keep_file_lines() {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config");
        let one = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        write(&config, "a.yaml", one);
        write(&config, "b.yaml", one);
        let e = crate::config::load(root.path()).unwrap_err().to_string();
        let (a, b) = (config.join("a.yaml"), config.join("b.yaml"));
        assert_eq!(
            e,
            format!(
                "{}: domain \"edge\": defined twice: in {} and in {}",
                b.display(),
                a.display(),
                b.display()
            )
        );
        std::fs::remove_file(&b).unwrap();
        write(&config, "c.yaml", "domain: x\n---\ndomain: y\nbogus: 1\n");
        let e = crate::config::load(root.path()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}:4:", config.join("c.yaml").display())),
            "{e}"
        );
    }
}
