//! nginx's configuration syntax: directives of words ending in `;`, blocks in `{ }`,
//! `#` comments, single- or double-quoted words with `\` escapes. Each directive keeps
//! the line and column of its name (1-based, columns in characters) for messages.

/// One directive: `name arg ... ;` or `name arg ... { block }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The directive's name (`limit_req`).
    pub name: String,
    /// Its arguments, unquoted.
    pub args: Vec<String>,
    /// Line of the name, 1-based.
    pub line: usize,
    /// Column of the name, 1-based, in characters.
    pub column: usize,
    /// The directives inside its `{ }`, for a block directive.
    pub block: Option<Vec<Directive>>,
}

/// A syntax error, at a line and column (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct SyntaxError {
    /// Line, 1-based.
    pub line: usize,
    /// Column, 1-based, in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    Semi,
    Open,
    Close,
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

impl Lexer<'_> {
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn err(&self, message: impl Into<String>) -> SyntaxError {
        SyntaxError {
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }

    /// The next token and the place it starts, or `None` at the end.
    fn next(&mut self) -> Result<Option<(Tok, usize, usize)>, SyntaxError> {
        loop {
            match self.chars.peek() {
                None => return Ok(None),
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('#') => {
                    while self.chars.peek().is_some_and(|c| *c != '\n') {
                        self.bump();
                    }
                }
                Some(_) => break,
            }
        }
        let (line, column) = (self.line, self.column);
        let tok = match self.bump() {
            Some(';') => Tok::Semi,
            Some('{') => Tok::Open,
            Some('}') => Tok::Close,
            Some(q @ ('"' | '\'')) => {
                let mut w = String::new();
                loop {
                    match self.bump() {
                        None => {
                            return Err(SyntaxError {
                                line,
                                column,
                                message: format!("unterminated {q}quoted{q} string"),
                            });
                        }
                        Some('\\') => match self.bump() {
                            Some(c) if c == q || c == '\\' => w.push(c),
                            Some('n') => w.push('\n'),
                            Some('t') => w.push('\t'),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err(self.err("a file ending in \\")),
                        },
                        Some(c) if c == q => break,
                        Some(c) => w.push(c),
                    }
                }
                Tok::Word(w)
            }
            Some(first) => {
                let mut w = String::from(first);
                if first == '$' && self.chars.peek() == Some(&'{') {
                    while let Some(c) = self.bump() {
                        w.push(c);
                        if c == '}' {
                            break;
                        }
                    }
                }
                while let Some(&c) = self.chars.peek() {
                    if c.is_whitespace() || matches!(c, ';' | '{' | '}') {
                        break;
                    }
                    // `${var}` keeps its braces inside the word
                    if c == '$' {
                        w.push(c);
                        self.bump();
                        if self.chars.peek() == Some(&'{') {
                            while let Some(c) = self.bump() {
                                w.push(c);
                                if c == '}' {
                                    break;
                                }
                            }
                        }
                        continue;
                    }
                    w.push(c);
                    self.bump();
                }
                Tok::Word(w)
            }
            None => return Ok(None),
        };
        Ok(Some((tok, line, column)))
    }
}

/// Parse a whole configuration file into its top-level directives.
pub fn parse(text: &str) -> Result<Vec<Directive>, SyntaxError> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        line: 1,
        column: 1,
    };
    let (list, end) = parse_block(&mut lx, None)?;
    debug_assert!(end.is_none());
    Ok(list)
}

/// The directives up to the `}` closing the block opened at `opened` (or the file's
/// end at the top level).
fn parse_block(
    lx: &mut Lexer<'_>,
    opened: Option<(usize, usize)>,
) -> Result<(Vec<Directive>, Option<()>), SyntaxError> {
    let mut out = Vec::new();
    let mut current: Option<Directive> = None;
    loop {
        let Some((tok, line, column)) = lx.next()? else {
            if let Some(d) = current {
                return Err(SyntaxError {
                    line: d.line,
                    column: d.column,
                    message: format!("\"{}\" is not ended by \";\" or \"{{\"", d.name),
                });
            }
            if let Some((line, column)) = opened {
                return Err(SyntaxError {
                    line,
                    column,
                    message: "this \"{\" is never closed".into(),
                });
            }
            return Ok((out, None));
        };
        match tok {
            Tok::Word(w) => match &mut current {
                Some(d) => d.args.push(w),
                None => {
                    current = Some(Directive {
                        name: w,
                        args: Vec::new(),
                        line,
                        column,
                        block: None,
                    })
                }
            },
            Tok::Semi => match current.take() {
                Some(d) => out.push(d),
                None => {
                    return Err(SyntaxError {
                        line,
                        column,
                        message: "unexpected \";\"".into(),
                    });
                }
            },
            Tok::Open => {
                let Some(mut d) = current.take() else {
                    return Err(SyntaxError {
                        line,
                        column,
                        message: "unexpected \"{\" (a block needs a directive name)".into(),
                    });
                };
                let (inner, _) = parse_block(lx, Some((line, column)))?;
                d.block = Some(inner);
                out.push(d);
            }
            Tok::Close => {
                if let Some(d) = current {
                    return Err(SyntaxError {
                        line: d.line,
                        column: d.column,
                        message: format!("\"{}\" is not ended by \";\"", d.name),
                    });
                }
                if opened.is_none() {
                    return Err(SyntaxError {
                        line,
                        column,
                        message: "unexpected \"}\"".into(),
                    });
                }
                return Ok((out, Some(())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_blocks_quotes_comments_and_places() {
        let t = "# top\nhttp {\n  limit_req_zone $binary_remote_addr zone=one:10m rate=1r/s; # c\n  server { location \"/a b\" { limit_req zone=one burst=5; } }\n}\n";
        let d = parse(t).unwrap();
        assert_eq!(d.len(), 1);
        let http = &d[0];
        assert_eq!((http.name.as_str(), http.line, http.column), ("http", 2, 1));
        let inner = http.block.as_ref().unwrap();
        assert_eq!(inner[0].name, "limit_req_zone");
        assert_eq!(
            inner[0].args,
            ["$binary_remote_addr", "zone=one:10m", "rate=1r/s"]
        );
        assert_eq!((inner[0].line, inner[0].column), (3, 3));
        let loc = &inner[1].block.as_ref().unwrap()[0];
        assert_eq!(loc.args, ["/a b"]);
        let lr = &loc.block.as_ref().unwrap()[0];
        assert_eq!((lr.line, lr.column), (4, 30));
    }

    #[test]
    fn syntax_errors_name_their_place() {
        assert_eq!(
            parse("http {\n limit_req zone=a\n}")
                .unwrap_err()
                .to_string(),
            "2:2: \"limit_req\" is not ended by \";\""
        );
        assert_eq!(
            parse("http {\n").unwrap_err().to_string(),
            "1:6: this \"{\" is never closed"
        );
        assert_eq!(parse("}").unwrap_err().to_string(), "1:1: unexpected \"}\"");
        assert_eq!(
            parse("a \"b").unwrap_err().to_string(),
            "1:3: unterminated \"quoted\" string"
        );
        assert_eq!(parse(";").unwrap_err().to_string(), "1:1: unexpected \";\"");
    }

    #[test]
    fn braced_variables_stay_in_their_word() {
        let d = parse("limit_req_zone ${binary_remote_addr}x zone=z:1m rate=1r/s;").unwrap();
        assert_eq!(d[0].args[0], "${binary_remote_addr}x");
    }
}
