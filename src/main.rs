//! `floodgate`: the command-line edge of floodgate. Library crates return typed errors;
//! this binary turns them into messages with `anyhow`.

// the clap arguments' doc comments are `--help` text (`[user:password@]`, `[:port]`),
// not rustdoc links
#![allow(rustdoc::broken_intra_doc_links)]

mod completions_cmd;
mod convert_cmd;
mod demo_cmd;
mod exit;
mod load_cmd;
mod log_setup;
mod man_cmd;
mod proxy_cmd;
mod server_cmd;
mod simulate_cmd;
mod simulate_dist;
mod throttle_cmd;
mod top_cmd;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: the proxy's hot path allocates per request
/// (hyper's header maps, boxed futures), and glibc malloc/free were ~14% of its user-space
/// instructions (callgrind: `scripts/proxy-instructions.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `floodgate --help`'s examples and exit statuses.
const ROOT_AFTER_HELP: &str = "\
Examples:
  floodgate demo                                   # every algorithm behind floodgate proxy, no setup
  floodgate proxy --config /etc/floodgate/proxy.toml
  floodgate server --config /etc/floodgate/server.yaml
  floodgate top http://127.0.0.1:9090
  floodgate completions bash > /etc/bash_completion.d/floodgate
  floodgate SUBCOMMAND --help                      # each subcommand's flags and examples

Exit status:
  0  success
  1  runtime failure: Redis or an upstream unreachable, an address in use, a file not written
  2  usage error: bad flags or arguments, a config file unreadable or invalid (nothing started)";

/// Rate limiting that names its guarantee at the window boundary.
#[derive(Parser)]
#[command(name = "floodgate", version, about, long_about = None, after_help = ROOT_AFTER_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every algorithm behind floodgate proxy, the same traffic across a window boundary,
    /// and what the backend received: the fixed window lets 2x the limit through.
    #[command(long_about = demo_cmd::ABOUT)]
    Demo(demo_cmd::DemoArgs),
    /// Run traffic scenarios on a simulated clock through every algorithm and compare what
    /// each admits across a window boundary.
    Simulate(simulate_cmd::SimulateArgs),
    /// redis-cell's CL.THROTTLE on any Redis (no module): prints the same five integers.
    Throttle(throttle_cmd::ThrottleCmdArgs),
    /// Rate-limiting reverse proxy: `--config floodgate.toml`, or
    /// `--listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 --rate 10/s --burst 20 [--nodelay | --delay N]`.
    Proxy(proxy_cmd::ProxyArgs),
    /// A central rate limit service: Envoy's RLS v3 over gRPC, CL.THROTTLE over RESP, and
    /// HTTP/JSON, configured by a YAML or TOML file and hot-reloaded.
    Server(server_cmd::ServerArgs),
    /// Send HTTP load (open loop by default, hey/oha style) and show what the rate limiter
    /// did: statuses, latency by status, a timeline with window boundaries, a verdict.
    #[command(long_about = load_cmd::ABOUT)]
    Load(load_cmd::LoadArgs),
    /// The keys limited most, per policy, from a proxy's admin listener or a server's
    /// HTTP listener, refreshed every second: `floodgate top http://127.0.0.1:9090`.
    Top(top_cmd::TopArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(completions_cmd::CompletionsArgs),
    /// Write the man pages (floodgate.1, floodgate-SUBCOMMAND.1) into a directory.
    #[command(hide = true)]
    Man(man_cmd::ManArgs),
    /// Another system's rate-limit configuration as floodgate's, printed to stdout:
    /// `floodgate convert nginx nginx.conf > floodgate.toml`.
    Convert(convert_cmd::ConvertArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo_cmd::run(args),
        // --nodes prices the fleet strategies; otherwise the algorithms
        Command::Simulate(args) if args.nodes.is_some() => simulate_dist::run(&args),
        Command::Simulate(args) => simulate_cmd::run(args),
        Command::Throttle(args) => throttle_cmd::run(args),
        Command::Proxy(args) => proxy_cmd::run(args),
        Command::Server(args) => server_cmd::run(args),
        Command::Load(args) => load_cmd::run(args),
        Command::Top(args) => top_cmd::run(args),
        Command::Completions(args) => completions_cmd::run(&args),
        Command::Man(args) => man_cmd::run(&args),
        Command::Convert(args) => convert_cmd::run(args),
    };
    if let Err(e) = result {
        eprintln!("floodgate: error: {}", render(&e));
        std::process::exit(exit::status_of(&e));
    }
}

/// Raise the open-descriptor limit to its hard limit (every client connection is a
/// descriptor) and log the figure; a limit that cannot be raised is logged and kept.
/// Called by `floodgate proxy` and `floodgate server` once logging is set up.
fn raise_descriptor_limit() {
    match floodgate_net::raise_nofile() {
        Ok(n) if n.soft > n.before => tracing::info!(
            before = n.before,
            now = n.soft,
            "open-descriptor limit (RLIMIT_NOFILE) raised to the hard limit"
        ),
        Ok(n) => tracing::info!(
            limit = n.soft,
            "open-descriptor limit (RLIMIT_NOFILE) at its hard limit"
        ),
        Err(e) => tracing::warn!(error = %e, "open-descriptor limit kept"),
    }
}

/// The error and its causes on one line, like `{:#}`, but a cause whose text the message
/// already quotes (the library errors name their source in their own text) is not
/// repeated.
fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Cli, render};
    use clap::CommandFactory;

    #[test]
    fn the_exit_statuses_in_help_are_the_man_pages() {
        assert!(super::ROOT_AFTER_HELP.ends_with(super::exit::EXIT_STATUS));
        Cli::command().debug_assert();
    }

    use anyhow::Context;

    #[test]
    fn causes_already_quoted_are_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let quoted = anyhow::Error::new(io).context("cannot connect to 127.0.0.1:1: refused");
        assert_eq!(render(&quoted), "cannot connect to 127.0.0.1:1: refused");
        let plain: anyhow::Result<()> = Err(anyhow::anyhow!("disk full")).context("writing x.svg");
        assert_eq!(render(&plain.unwrap_err()), "writing x.svg: disk full");
    }
}
