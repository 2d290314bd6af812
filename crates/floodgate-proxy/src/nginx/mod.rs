//! `floodgate convert nginx`: an nginx configuration's rate limits (`limit_req_zone`,
//! `limit_req`, `limit_conn`, `real_ip_header`, `listen`, `proxy_pass`) as a
//! `floodgate proxy` TOML file. What has no floodgate equivalent is an error or a
//! warning naming the directive and its line (docs/from-nginx.md has the table).

mod args;
mod convert;
mod emit;
mod keys;
mod model;
mod parse;
mod report;
mod site;

pub use convert::convert;
pub use parse::{Directive, SyntaxError, parse};
pub use report::{ConvertError, Converted, Note};
