//! `floodgate convert nginx FILE`: another system's rate-limit configuration as a
//! floodgate configuration, printed to stdout; warnings go to stderr.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::exit::{UsageContext, usage};

const EXAMPLES: &str = "\
Examples:
  floodgate convert nginx /etc/nginx/nginx.conf > floodgate.toml
  nginx -T > all.conf && floodgate convert nginx all.conf > floodgate.toml";

/// Flags of `floodgate convert`.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ConvertArgs {
    #[command(subcommand)]
    from: From,
}

#[derive(Subcommand, Debug)]
enum From {
    /// An nginx configuration's limit_req, limit_conn, real_ip, listen and proxy_pass as a
    /// `floodgate proxy --config` TOML file (docs/from-nginx.md).
    Nginx {
        /// The nginx configuration file (one file: `include` is not followed; `nginx -T`
        /// prints one with every include inlined).
        file: PathBuf,
    },
}

/// Run `floodgate convert`.
pub fn run(args: ConvertArgs) -> Result<()> {
    match args.from {
        From::Nginx { file } => {
            let text =
                std::fs::read_to_string(&file).usage(&format!("reading {}", file.display()))?;
            let out = floodgate_proxy::nginx::convert(&text)
                .map_err(|e| usage(anyhow::anyhow!("{}:{e}", file.display())))?;
            for w in &out.warnings {
                eprintln!("floodgate: warning: {}:{w}", file.display());
            }
            print!(
                "# floodgate proxy configuration converted from {} by `floodgate convert nginx`\n{}",
                file.display(),
                out.toml
            );
            Ok(())
        }
    }
}
