//! A deployment's configuration files, whatever process each is for: what
//! `tidemark validate` checks and `tidemark status` looks at.

use std::path::{Path, PathBuf};

/// One validated configuration.
pub enum Part {
    Shard(Box<tidemark_shard::Config>),
    Profiles(Box<tidemark_profiles::Config>),
    Learner(Box<tidemark_learner::Config>),
}

impl Part {
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Shard(_) => "shard",
            Part::Profiles(_) => "profiles",
            Part::Learner(_) => "learner",
        }
    }

    /// The name it goes by: the shard's or profile process's, the learner's consumer name.
    pub fn name(&self) -> &str {
        match self {
            Part::Shard(c) => &c.name,
            Part::Profiles(c) => &c.name,
            Part::Learner(c) => &c.consumer,
        }
    }

    /// Whether every database it uses is named, by the file or by
    /// `TIDEMARK_DATABASE_URL` (else the process would start the embedded one).
    fn names_its_databases(&self) -> bool {
        let env = std::env::var_os("TIDEMARK_DATABASE_URL").is_some_and(|v| !v.is_empty());
        env || match self {
            Part::Shard(c) => c.database_url.is_some(),
            Part::Profiles(c) => c.database_url.is_some(),
            Part::Learner(c) => c.sources.iter().all(|s| s.database_url.is_some()),
        }
    }

    pub fn metrics_addr(&self) -> Option<&str> {
        match self {
            Part::Shard(c) => c.metrics_addr.as_deref(),
            Part::Profiles(c) => c.metrics_addr.as_deref(),
            Part::Learner(c) => c.metrics_addr.as_deref(),
        }
    }
}

/// Which process a file configures, from the keys only that one takes.
fn kind_of(path: &Path) -> &'static str {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let keys = tidemark_wire::parse_toml::<serde_json::Map<String, serde_json::Value>>(&text)
        .unwrap_or_default();
    let has = |k: &[&str]| k.iter().any(|k| keys.contains_key(*k));
    if has(&["checkpoint_dir", "sources", "checkpoint_interval", "bits"]) {
        "learner"
    } else if has(&[
        "counters",
        "trail",
        "dedup",
        "max_ids",
        "blocklist_after",
        "types",
    ]) {
        "profiles"
    } else {
        "shard"
    }
}

/// Reads and validates `path` as the configuration its keys say it is,
/// exactly as that process would at start (key files included).
pub fn load(path: &Path) -> Result<Part, String> {
    let named = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    match kind_of(path) {
        "learner" => tidemark_learner::Config::from_file(path)
            .map(|c| Part::Learner(Box::new(c)))
            .map_err(|e| named(&e)),
        "profiles" => tidemark_profiles::Config::from_file(path)
            .map(|c| Part::Profiles(Box::new(c)))
            .map_err(|e| named(&e)),
        _ => tidemark_shard::Config::from_file(path)
            .map(|c| Part::Shard(Box::new(c)))
            .map_err(|e| named(&e)),
    }
}

#[derive(clap::Args)]
pub struct ValidateArgs {
    /// Configuration files of shards, profile processes and learners (the
    /// kind is told from the keys), e.g. in a unit's ExecStartPre=
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Refuse a file whose process would fall back to the embedded
    /// PostgreSQL: no `database_url` in it and no TIDEMARK_DATABASE_URL (the
    /// shipped units run this before starting, so a missing tidemark.env
    /// stops them instead of starting a private cluster)
    #[arg(long)]
    require_database_url: bool,
}

/// `tidemark validate FILE...`: each file read as its process reads it at
/// start; exits 78 (a configuration error) if any cannot be used.
pub fn validate(args: ValidateArgs) -> anyhow::Result<()> {
    let mut bad = 0;
    for f in &args.files {
        match load(f) {
            Ok(p) if args.require_database_url && !p.names_its_databases() => {
                eprintln!(
                    "{}: no database_url, and TIDEMARK_DATABASE_URL is not set (is /etc/tidemark/tidemark.env there?)",
                    f.display()
                );
                bad += 1;
            }
            Ok(p) => println!("ok: {} ({} {})", f.display(), p.kind(), p.name()),
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
            }
        }
    }
    if bad > 0 {
        return Err(crate::Misconfigured(format!(
            "{bad} of {} files cannot be used",
            args.files.len()
        ))
        .into());
    }
    Ok(())
}
