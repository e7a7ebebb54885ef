//! The `tidemark` binary: command-line parsing, logging set-up, and one
//! function per subcommand (SPEC 8). Each subcommand is a thin shell over a
//! library crate; the logic lives there.

mod checkpoint;
mod completions;
mod db;
mod demo;
mod deployment;
mod export;
mod health;
mod keys;
mod learn;
mod logging;
mod market;
mod notify;
mod offline;
mod plan;
mod profiles;
mod proxy;
mod publish;
mod reads;
mod score;
mod shard;
mod signals;
mod status;
mod trail;

use signals::{exit_on_panic, shutdown_signal, stop_on_signal, Misconfigured};

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Samples RTB events into training observations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text (coloured only on a terminal) or as JSON objects, one per line
    #[arg(
        long,
        global = true,
        value_enum,
        env = "TIDEMARK_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: logging::LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline on the embedded default and print a report
    Demo(demo::Args),
    /// Print disjoint txid prefix sets sampling a rate (SPEC 4)
    Plan(plan::Args),
    /// Run one shard: subscribe, buffer, sweep, emit observations
    Shard(shard::Args),
    /// Publish the synthetic market, or replay a recorded event file
    Publish(Box<publish::Args>),
    /// Learn FTRL-Proximal models: offline over TSV files, or online over shard databases
    Learn(Box<learn::Args>),
    /// Score bids (JSON lines on stdin) with a checkpoint
    Score(score::Args),
    /// Show or verify a checkpoint file (before shipping it to bidders)
    Checkpoint {
        #[command(subcommand)]
        action: checkpoint::Action,
    },
    /// A deployment at a glance from its configuration files; exits 1 when a part is unhealthy
    Status(status::Args),
    /// Check configuration files as their processes would at start; exits 78 if any is unusable
    Validate(deployment::ValidateArgs),
    /// Write a target's observations as TSV for `learn --input --header`
    Export(export::Args),
    /// Forward publishers to shards through one address (XSUB/XPUB)
    Proxy(proxy::Args),
    /// Run a profile process: per-person counters from the event stream (SPEC 11)
    Profiles(profiles::ProcessArgs),
    /// Read profiles by identifier (SPEC 11)
    Profile {
        #[command(subcommand)]
        action: profiles::ProfileAction,
    },
    /// A person's events in a time range, oldest first (SPEC 11)
    Trail(trail::TrailArgs),
    /// CURVE keys for publishers and the fleet (SPEC 2, 7)
    Keys {
        #[command(subcommand)]
        action: keys::Action,
    },
    /// A shell completion script on stdout (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// Man pages for every command, written into a directory
    Man(completions::ManArgs),
    /// Manage the embedded PostgreSQL cluster under $TIDEMARK_HOME
    Db {
        #[command(subcommand)]
        action: db::Action,
        /// Defaults to $TIDEMARK_HOME, else ./.tidemark
        #[arg(long, global = true)]
        home: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(cli.log_format, logging::LogFormat::Json);
    logging::init(cli.log_format);
    notify::start();
    exit_on_panic();
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Shard(args) => shard::run(args),
        Command::Publish(args) => publish::run(*args),
        Command::Learn(args) => learn::run(*args),
        Command::Score(args) => score::run(args),
        Command::Checkpoint { action } => checkpoint::run(action),
        Command::Status(args) => status::run(args),
        Command::Validate(args) => deployment::validate(args),
        Command::Export(args) => export::run(args),
        Command::Profiles(args) => profiles::run_process(args),
        Command::Profile { action } => profiles::run_profile(action),
        Command::Trail(args) => trail::run_trail(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Keys { action } => keys::run(action),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
        Command::Db { action, home } => db::run(action, home),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<signals::Answer>().is_some() => {
            ExitCode::from(e.downcast_ref::<signals::Answer>().map_or(1, |a| a.0))
        }
        Err(e) => {
            let status = match e.downcast_ref::<Misconfigured>() {
                Some(_) => signals::EX_CONFIG,
                None => 1,
            };
            signals::fatal(json, &e, status);
            ExitCode::from(status)
        }
    }
}

/// A current-thread runtime for subcommands that talk to PostgreSQL briefly.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
