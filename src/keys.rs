//! `tidemark keys new FILE`: a CURVE key pair for `[curve]` (SPEC 2, 7).

use std::path::PathBuf;

use anyhow::Context;

#[derive(clap::Subcommand)]
pub enum Action {
    /// Write a new key pair: the secret key to FILE (mode 0600), the public key to FILE.pub
    New {
        /// Where the secret key goes; an existing file is never overwritten
        file: PathBuf,
    },
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::New { file } => {
            let public = tidemark_intake::curve::new_key_pair(&file)
                .with_context(|| format!("writing {}", file.display()))?;
            eprintln!(
                "tidemark keys: secret key in {} (mode 0600), public key in {}.pub",
                file.display(),
                file.display()
            );
            println!("{public}");
        }
    }
    Ok(())
}
