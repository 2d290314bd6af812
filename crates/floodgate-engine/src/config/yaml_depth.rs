//! A bound on YAML flow-collection nesting, checked before the parser runs: the YAML
//! parser's cost grows with the square of the nesting of flow collections (`[`, `{`), so
//! a 200 KB file of `[` took about half a minute to refuse, at start, in `--check` and in
//! each reload. Block nesting (by indentation, `- - -`) costs the parser linear time and
//! is left to it.

/// The deepest nesting of YAML flow collections (`[...]`, `{...}`) a config file may
/// have; one level deeper is refused before parsing. A real config nests two or three.
pub const MAX_YAML_FLOW_NESTING: usize = 64;

/// The byte offset of the first `[` or `{` that opens a flow collection nested deeper
/// than `max` in `src`, or `None`. One pass, linear in `src`. Quoted scalars and
/// comments are skipped; in block context a `[` or `{` counts only where a node starts
/// (the start of a line, or after `:`, `-` or `?` and spaces), so a plain scalar such as
/// `a[1]` is not counted; in a flow collection every one counts. Conservative: it may count a bracket the
/// parser reads as text (in a block scalar's lines), never misses one that opens a
/// collection.
pub fn too_deep(src: &str, max: usize) -> Option<usize> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
        Comment,
    }
    let b = src.as_bytes();
    let mut state = State::Plain;
    let mut depth = 0usize;
    // the last byte other than a space or tab, outside quotes and comments (b'\n' at the
    // start of a line)
    let mut prev = b'\n';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match state {
            State::Comment => {
                if c == b'\n' || c == b'\r' {
                    state = State::Plain;
                    prev = b'\n';
                }
            }
            State::Single => {
                if c == b'\'' {
                    if b.get(i + 1) == Some(&b'\'') {
                        i += 1; // '' is a quote inside the scalar
                    } else {
                        state = State::Plain;
                        prev = b'\'';
                    }
                }
            }
            State::Double => {
                if c == b'\\' {
                    i += 1; // the escaped byte
                } else if c == b'"' {
                    state = State::Plain;
                    prev = b'"';
                }
            }
            State::Plain => {
                // in block context, where a node may start; in flow context a quote may
                // also follow `,`, `[` and `{`, and every bracket opens a collection
                let block_start = matches!(prev, b'\n' | b':' | b'-' | b'?');
                let quote_starts = block_start || matches!(prev, b',' | b'[' | b'{');
                match c {
                    b' ' | b'\t' => {}
                    b'\n' | b'\r' => prev = b'\n',
                    b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                        state = State::Comment;
                    }
                    b'\'' if quote_starts => state = State::Single,
                    b'"' if quote_starts => state = State::Double,
                    b'[' | b'{' if depth > 0 || block_start => {
                        depth += 1;
                        if depth > max {
                            return Some(i);
                        }
                        prev = c;
                    }
                    b']' | b'}' if depth > 0 => {
                        depth -= 1;
                        prev = c;
                    }
                    // inside a plain scalar of block context: text
                    b'[' | b'{' => prev = b'x',
                    b',' if depth == 0 => prev = b'x',
                    _ => prev = c,
                }
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_nesting_is_counted() {
        assert_eq!(too_deep("a: [[1]]\n", 2), None);
        assert_eq!(too_deep("a: [[[1]]]\n", 2), Some(5));
        assert_eq!(too_deep("a: {b: {c: [1]}}\n", 2), Some(11));
        // closed collections do not add up
        assert_eq!(too_deep("a: [[1], [2], [3]]\nb: [[4]]\n", 2), None);
        // a sequence item and a line start open a value
        assert_eq!(too_deep("- [[[x]]]\n", 2), Some(4));
        assert_eq!(too_deep("[[[x]]]\n", 2), Some(2));
        // spread over lines
        assert_eq!(too_deep("a: [\n  [\n    [1]]]\n", 2), Some(13));
    }

    #[test]
    fn brackets_in_text_are_not_counted() {
        for src in [
            "a: x[[[1]]]\n",
            "a: '[[[['\n",
            "a: \"[[[[\"\n",
            "a: \"\\\"[[[[\"\n",
            "a: 'it''s [[[['\n",
            "a: b # [[[[\n",
            "# [[[[\n",
            "a: [\"[[[[\", '{{{{']\n",
            "rate: 5/s[[[[\n",
        ] {
            assert_eq!(too_deep(src, 2), None, "{src}");
        }
        // an apostrophe inside a plain scalar does not open a quote
        assert_eq!(too_deep("a: it's\nb: [[[1]]]\n", 2), Some(13));
    }

    #[test]
    fn linear_on_a_large_file() {
        let src = "a: ".to_string() + &"[".repeat(200_000);
        let t = std::time::Instant::now();
        assert_eq!(too_deep(&src, MAX_YAML_FLOW_NESTING), Some(3 + 64));
        let deep_but_closed = "a: ".to_string() + &"[1, ".repeat(60) + &"]".repeat(60);
        assert_eq!(too_deep(&deep_but_closed, MAX_YAML_FLOW_NESTING), None);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
