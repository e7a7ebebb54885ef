//! `tidemark db up | down | status | url`: the embedded cluster (SPEC 9).

use std::path::PathBuf;

use tidemark_store::{Cluster, Status};

#[derive(clap::Subcommand)]
pub enum Action {
    /// Initialise (first time) and start the cluster, create the database, migrate
    Up {
        /// Also listen on 127.0.0.1 at this port
        #[arg(long)]
        port: Option<u16>,
        /// Serve TLS with this certificate (PEM; with --tls-key); kept for later starts
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM)
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Also start a hot standby of it (pg_basebackup -R; read-only, streaming)
        #[arg(long)]
        standby: bool,
    },
    /// Stop the cluster
    Down {
        /// Stop its hot standby instead
        #[arg(long)]
        standby: bool,
    },
    /// Say whether the cluster runs, and where (exit status 0 running, 3 stopped, 4 not initialised)
    Status {
        /// Its hot standby's
        #[arg(long)]
        standby: bool,
    },
    /// Print the connection string (starts nothing)
    Url {
        /// Another database of the cluster, e.g. tidemark_demo (the demo's)
        #[arg(long)]
        database: Option<String>,
        /// Its hot standby's (unix socket)
        #[arg(long)]
        standby: bool,
    },
}

pub fn run(action: Action, home: Option<PathBuf>) -> anyhow::Result<()> {
    let home = home.unwrap_or_else(Cluster::default_home);
    let cluster = Cluster::new(&home)?;
    match action {
        Action::Up {
            port,
            tls_cert,
            tls_key,
            standby,
        } => {
            if let (Some(cert), Some(key)) = (tls_cert, tls_key) {
                cluster.use_tls(&cert, &key)?;
            }
            let applied = up(&cluster, port)?;
            eprintln!(
                "tidemark db: running ({}), schema version {}{}",
                cluster.home().display(),
                tidemark_store::latest_version(),
                if applied.is_empty() {
                    String::new()
                } else {
                    format!(", applied {applied:?}")
                }
            );
            // No secret in a job's log: `db url` prints the TCP URL and its password.
            println!("{}", cluster.url());
            if standby {
                cluster.start_standby()?;
                eprintln!("tidemark db: standby running (read-only, streaming from the primary)");
                println!("{}", cluster.standby().url());
            }
        }
        Action::Down { standby } => {
            let cluster = cluster.or_standby(standby);
            let was = cluster.down()?;
            eprintln!(
                "tidemark db: {}",
                if was { "stopped" } else { "was not running" }
            );
        }
        Action::Status { standby } => match cluster.or_standby(standby).status()? {
            Status::Running { url } => println!("running {url}"),
            Status::Stopped => {
                println!("stopped");
                return Err(crate::signals::Answer(3).into());
            }
            Status::NotInitialised => {
                println!("not initialised");
                return Err(crate::signals::Answer(4).into());
            }
        },
        Action::Url { database, standby } => match (database, standby) {
            (None, false) => println!("{}", url(&cluster)?),
            (None, true) => println!("{}", cluster.standby().url()),
            (Some(d), s) => println!("{}", cluster.or_standby(s).url_for(&d)),
        },
    }
    Ok(())
}

/// What `db url` prints: over TCP, password included, when a port is open;
/// else the unix socket's.
fn url(cluster: &Cluster) -> anyhow::Result<String> {
    Ok(cluster.tcp_url()?.unwrap_or_else(|| cluster.url()))
}

/// Starts the cluster if needed, creates the database and applies migrations.
/// Returns the migrations applied now.
pub fn up(cluster: &Cluster, port: Option<u16>) -> anyhow::Result<Vec<i32>> {
    Ok(crate::runtime()?.block_on(tidemark_store::up(cluster, port))?)
}

/// The database to use: the configured URL, else the embedded cluster under
/// `$TIDEMARK_HOME`, started (and migrated) if needed.
pub fn resolve(url: Option<&str>) -> anyhow::Result<String> {
    if let Some(u) = url {
        return Ok(u.to_owned());
    }
    let cluster = Cluster::new(&Cluster::default_home())?;
    up(&cluster, None)?;
    Ok(cluster.url())
}

/// For readers of observations: the configured URL; else the embedded
/// database, unless it has no observations of `target` and the demo's
/// database has some (right after `tidemark demo`), which is then used and
/// named on stderr.
pub fn resolve_observations(url: Option<&str>, target: &str) -> anyhow::Result<String> {
    let default = resolve(url)?;
    if url.is_some() {
        return Ok(default);
    }
    let cluster = Cluster::new(&Cluster::default_home())?;
    let demo = cluster.url_for(tidemark_demo::DATABASE);
    let count = |u: String| async move {
        let c = tidemark_store::connect(&u).await.ok()?;
        tidemark_store::observations::count_target(&c, target)
            .await
            .ok()
    };
    let rt = crate::runtime()?;
    if rt.block_on(count(default.clone())).unwrap_or(0) > 0 {
        return Ok(default);
    }
    if rt.block_on(count(demo.clone())).unwrap_or(0) > 0 {
        eprintln!(
            "tidemark: no {target} observations in the embedded database; reading the demo's ({})",
            tidemark_demo::DATABASE
        );
        return Ok(demo);
    }
    Ok(default)
}
