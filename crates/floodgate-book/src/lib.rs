#![doc = include_str!("../README.md")]

use std::path::{Path, PathBuf};

/// The book's source directory (`docs/` at the root of the repository).
pub fn book_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// A fenced code block of one page of the book.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The page's file name, relative to [`book_dir`] (`proxy.md`).
    pub page: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The info string split on commas: `["toml", "proxy-config"]`; empty for a bare fence.
    pub info: Vec<String>,
    /// The lines between the fences, each ending in `\n`.
    pub body: String,
}

impl Block {
    /// The block's language: the first word of its info string (`""` for a bare fence).
    pub fn lang(&self) -> &str {
        self.info.first().map(String::as_str).unwrap_or("")
    }

    /// Whether the info string carries `attr` after the language.
    pub fn has(&self, attr: &str) -> bool {
        self.info.iter().skip(1).any(|a| a == attr)
    }

    /// The value of a `name=value` attribute of the info string.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.info
            .iter()
            .skip(1)
            .find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
    }

    /// Where the block is, for messages: `proxy.md:138`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

/// What can go wrong reading the book.
#[derive(Debug, thiserror::Error)]
pub enum BookError {
    /// A page could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A fence opened at `line` is never closed.
    #[error("{page}:{line}: a code block is never closed")]
    Unclosed { page: String, line: usize },
}

/// The fenced code blocks of one page's text, in order. Fences are lines starting with
/// three backticks; what follows the backticks on the opening line is the info string.
pub fn parse_blocks(page: &str, text: &str) -> Result<Vec<Block>, BookError> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<String>, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                let info = info
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                open = Some((i + 1, info, String::new()));
            }
            (Some(_), Some(_)) => {
                let (line, info, body) = open.take().expect("a block is open");
                blocks.push(Block {
                    page: page.to_string(),
                    line,
                    info,
                    body,
                });
            }
            (Some((_, _, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    match open {
        Some((line, ..)) => Err(BookError::Unclosed {
            page: page.to_string(),
            line,
        }),
        None => Ok(blocks),
    }
}

/// Every page of the book (`docs/*.md`), sorted by name.
pub fn pages() -> Result<Vec<(String, String)>, BookError> {
    let dir = book_dir();
    let entries = std::fs::read_dir(&dir).map_err(|source| BookError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut pages = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| BookError::Read {
                path: dir.clone(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).map_err(|source| BookError::Read {
                path: path.clone(),
                source,
            })?;
            let name = path
                .file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned();
            pages.push((name, text));
        }
    }
    pages.sort();
    Ok(pages)
}

/// Every fenced code block of every page of the book.
pub fn blocks() -> Result<Vec<Block>, BookError> {
    let mut all = Vec::new();
    for (name, text) in pages()? {
        all.extend(parse_blocks(&name, &text)?);
    }
    Ok(all)
}

/// The pages as doc tests: each page is the documentation of one item, so rustdoc runs
/// its `rust` blocks.
#[cfg(doctest)]
pub mod pages {
    #[doc = include_str!("../../../docs/core.md")]
    pub struct Core;
    #[doc = include_str!("../../../docs/tower.md")]
    pub struct Tower;
    #[doc = include_str!("../../../docs/redis.md")]
    pub struct Redis;
    #[doc = include_str!("../../../docs/client.md")]
    pub struct Client;
    #[doc = include_str!("../../../docs/decision.md")]
    pub struct Decision;
    #[doc = include_str!("../../../docs/settle.md")]
    pub struct Settle;
    #[doc = include_str!("../../../docs/in-flight.md")]
    pub struct InFlight;
    #[doc = include_str!("../../../docs/adaptive.md")]
    pub struct Adaptive;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_read_with_their_info_and_lines() {
        let text = "# t\n\n```toml,proxy-config,file=a.toml\nx = 1\n```\n\ntext\n```\nplain\n```\n";
        let b = parse_blocks("p.md", text).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].lang(), "toml");
        assert!(b[0].has("proxy-config"));
        assert_eq!(b[0].attr("file"), Some("a.toml"));
        assert_eq!(b[0].body, "x = 1\n");
        assert_eq!(b[0].place(), "p.md:3");
        assert_eq!(b[1].lang(), "");
        assert_eq!(b[1].body, "plain\n");
    }

    #[test]
    fn an_unclosed_block_is_an_error_naming_its_line() {
        let err = parse_blocks("p.md", "a\n```rust\nlet x = 1;\n").unwrap_err();
        assert_eq!(err.to_string(), "p.md:2: a code block is never closed");
    }

    /// A page with a `rust` block is one of the doc-tested pages above, so no example
    /// escapes compilation.
    #[test]
    fn every_page_with_rust_is_doc_tested() {
        let lib = include_str!("lib.rs");
        for b in blocks().unwrap().iter().filter(|b| b.lang() == "rust") {
            let include = format!("include_str!(\"../../../docs/{}\")", b.page);
            assert!(
                lib.contains(&include),
                "{}: add the page to `pages`",
                b.place()
            );
        }
    }

    /// mdBook's id for a heading: lower case, letters, digits, `-` and `_` kept, spaces
    /// made `-`, everything else dropped.
    fn heading_id(heading: &str) -> String {
        heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The ids of a page's headings (outside code blocks).
    fn heading_ids(text: &str) -> Vec<String> {
        let mut in_code = false;
        let mut ids = Vec::new();
        for line in text.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            } else if !in_code && line.starts_with('#') {
                ids.push(heading_id(line.trim_start_matches('#').trim()));
            }
        }
        ids
    }

    #[test]
    fn heading_ids_are_mdbooks() {
        assert_eq!(
            heading_id("Naive vs polite (`--polite`)"),
            "naive-vs-polite---polite"
        );
        assert_eq!(
            heading_id("CL.THROTTLE against redis-cell"),
            "clthrottle-against-redis-cell"
        );
    }

    /// Links between pages and to images point at files that exist, and a `#fragment` at
    /// a heading of the page it names.
    #[test]
    fn relative_links_resolve() {
        let pages = pages().unwrap();
        for (name, text) in &pages {
            for part in text.split("](").skip(1) {
                let link = part.split([')', ' ']).next().unwrap_or("");
                if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
                let file = if file.is_empty() { name.as_str() } else { file };
                assert!(
                    book_dir().join(file).exists(),
                    "{name}: the link to {link} leads nowhere"
                );
                if !fragment.is_empty() {
                    let target = &pages.iter().find(|(n, _)| n == file).expect("a page").1;
                    assert!(
                        heading_ids(target).iter().any(|id| id == fragment),
                        "{name}: {link}: {file} has no heading #{fragment}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_book_has_pages_with_blocks() {
        let all = blocks().unwrap();
        assert!(all.iter().any(|b| b.page == "proxy.md"), "{all:?}");
        // every page listed in SUMMARY.md exists, and every page is listed
        let summary = std::fs::read_to_string(book_dir().join("SUMMARY.md")).unwrap();
        for (name, _) in pages().unwrap() {
            if name != "SUMMARY.md" {
                assert!(
                    summary.contains(&format!("({name})")),
                    "{name} is not in SUMMARY.md"
                );
            }
        }
    }
}
