//! Errors as the proxy's log lines show them.

/// `e` and its sources, joined by ": " (hyper-util's error names only its kind; the
/// reason, a refused certificate say, is in its sources).
pub(crate) fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
