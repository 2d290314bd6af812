//! What the server's two config targets share.

use std::net::SocketAddr;
use std::path::Path;

use floodgate_engine::config::ConfigError;
use floodgate_server::ConfigFileError;
use floodgate_server::config::Config;
use floodgate_server::file::FileConfig;

use super::{Lines, check_located};

/// Whether checking the file would resolve a host name (a listen address that is neither
/// `off` nor an `ip:port`).
pub fn resolves_a_name(file: Result<FileConfig, ConfigError>) -> bool {
    let Ok(file) = file else {
        return false;
    };
    let l = &file.listen;
    [&l.grpc, &l.http, &l.resp].into_iter().flatten().any(|a| {
        let a = a.trim();
        !a.eq_ignore_ascii_case("off") && a.parse::<SocketAddr>().is_err()
    })
}

/// An error names the file: located when it is the format's or a shared section's,
/// with a place and a message when a value is wrong.
pub fn check_error(parsed: &Result<Config, ConfigFileError>, path: &Path, src: &str, lines: Lines) {
    match parsed {
        Ok(_) => {}
        Err(ConfigFileError::Parse(e)) => check_located(e, path, src, lines),
        Err(
            e @ ConfigFileError::Invalid {
                path: p,
                at,
                message,
            },
        ) => {
            assert_eq!(p, path, "{e}");
            assert!(!at.is_empty() && !message.is_empty(), "{e}");
        }
        Err(e) => panic!("parsing text of a known format gave {e}"),
    }
}

/// The same config from both texts, or an error from both.
pub fn same(
    a: &Result<Config, ConfigFileError>,
    b: &Result<Config, ConfigFileError>,
    src: &str,
    again: &str,
) {
    match (a, b) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{src}\n---\n{again}"),
        (Err(_), Err(_)) => {}
        _ => panic!("the two texts read differently: {a:?} / {b:?}\n{src}\n---\n{again}"),
    }
}
