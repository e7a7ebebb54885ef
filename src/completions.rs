//! Shell completions and man pages, generated from the command-line
//! definitions themselves, so they never drift from `--help`.

use std::path::PathBuf;

use anyhow::Context;
use clap::CommandFactory;

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell
    shell: clap_complete::Shell,
}

/// `tidemark completions SHELL`: the completion script on stdout, e.g.
/// `tidemark completions bash > /etc/bash_completion.d/tidemark`.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "tidemark", &mut std::io::stdout());
    Ok(())
}

#[derive(clap::Args)]
pub struct ManArgs {
    /// Directory to write tidemark.1 and a page per subcommand (tidemark-shard.1, …) into
    dir: PathBuf,
}

/// `tidemark man DIR`: troff man pages, e.g. into /usr/local/share/man/man1.
pub fn man(args: ManArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| args.dir.display().to_string())?;
    let cmd = crate::Cli::command();
    clap_mangen::generate_to(cmd, &args.dir).with_context(|| args.dir.display().to_string())?;
    let pages = std::fs::read_dir(&args.dir)?.count();
    eprintln!("wrote {pages} pages into {}", args.dir.display());
    Ok(())
}
