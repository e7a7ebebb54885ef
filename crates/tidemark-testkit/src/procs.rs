//! Tidemark processes of the built binary, configured against a test
//! database, started, restarted, stopped and killed.

use std::fmt::Display;
use std::path::PathBuf;

use crate::{bin, TestDb};

/// A `tidemark shard` or `tidemark profiles` process of the built binary
/// against a test database.
pub struct Proc {
    pub child: std::process::Child,
    pub config: PathBuf,
    pub name: String,
    log: PathBuf,
    /// `shard` or `profiles`.
    command: &'static str,
    /// More environment variables (a `TIDEMARK_FAULT` to inject).
    env: Vec<(String, String)>,
}

impl Proc {
    /// Starts `tidemark shard` with `name`, connecting to `endpoint`; `extra` is more TOML.
    pub fn shard(db: &TestDb, name: &str, endpoint: &str, extra: impl Display) -> Proc {
        Proc::shard_multi(db, name, &[endpoint], extra)
    }

    /// Starts a shard connecting to several endpoints.
    pub fn shard_multi(db: &TestDb, name: &str, endpoints: &[&str], extra: impl Display) -> Proc {
        Proc::start_command("shard", db, name, endpoints, &extra.to_string())
    }

    /// Starts `tidemark profiles` (SPEC 11) against `db`; `extra` is more TOML.
    pub fn profiles(db: &TestDb, name: &str, endpoint: &str, extra: impl Display) -> Proc {
        Proc::start_command("profiles", db, name, &[endpoint], &extra.to_string())
    }

    /// Starts `tidemark profiles` connecting to several endpoints.
    pub fn profiles_multi(
        db: &TestDb,
        name: &str,
        endpoints: &[&str],
        extra: impl Display,
    ) -> Proc {
        Proc::start_command("profiles", db, name, endpoints, &extra.to_string())
    }

    /// Starts `tidemark <command>` (`shard` or `profiles`) with more
    /// environment variables.
    pub fn start_env(
        command: &'static str,
        db: &TestDb,
        name: &str,
        endpoint: &str,
        extra: impl Display,
        env: &[(&str, &str)],
    ) -> Proc {
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let extra = extra.to_string();
        Proc::start_command_env(command, db, name, &[endpoint], &extra, env)
    }

    fn start_command(
        command: &'static str,
        db: &TestDb,
        name: &str,
        endpoints: &[&str],
        extra: &str,
    ) -> Proc {
        Proc::start_command_env(command, db, name, endpoints, extra, Vec::new())
    }

    /// Writes a configuration (name, endpoints, the test database, `extra`)
    /// under `target/tmp/<command>` and starts `tidemark <command> --config`.
    fn start_command_env(
        command: &'static str,
        db: &TestDb,
        name: &str,
        endpoints: &[&str],
        extra: &str,
        env: Vec<(String, String)>,
    ) -> Proc {
        let endpoint = endpoints.join("\", \"");
        let dir = crate::tmp_dir().join(command);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join(format!("{}_{name}.toml", db.name));
        let toml = format!(
            "name = \"{name}\"\nendpoints = [\"{endpoint}\"]\ndatabase_url = \"{}\"\n{extra}\n",
            db.url
        );
        std::fs::write(&config, toml).unwrap();
        // A log of an earlier run would answer this run's assertions; a
        // restart appends.
        let _ = std::fs::remove_file(config.with_extension("log"));
        Proc::spawn(config, name, command, env)
    }

    fn spawn(
        config: PathBuf,
        name: &str,
        command: &'static str,
        env: Vec<(String, String)>,
    ) -> Proc {
        let log = config.with_extension("log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = bin()
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args([command, "--config", config.to_str().unwrap()])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Proc {
            child,
            config,
            name: name.to_owned(),
            log,
            command,
            env,
        }
    }

    /// Starts the same configuration again (after a stop or a kill).
    pub fn restart(&mut self) {
        let _ = self.child.try_wait();
        let env = std::mem::take(&mut self.env);
        *self = Proc::spawn(self.config.clone(), &self.name, self.command, env);
    }

    /// SIGTERM, then waits; asserts a clean exit.
    pub fn stop(&mut self) {
        signal(self.child.id(), "TERM");
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "shard exited with {status}; log:\n{}",
            self.log()
        );
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM to a child, then waits for it (its status is the caller's
/// business: a bench reads the log, a test asserts).
pub fn terminate(child: &mut std::process::Child) {
    signal(child.id(), "TERM");
    let _ = child.wait();
}

/// Sends the signal named as `kill -s` takes it (`TERM`, `INT`, `STOP`,
/// `CONT`, `KILL`, ...) to a process; returns whether it was delivered (a
/// process already gone is not an error here). Panics on an unknown name.
pub fn signal(pid: u32, name: &str) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), named(name)).is_ok()
}

/// [`signal`] to every process of a process group; `None` only asks
/// whether the group still has a process (`kill -0`).
pub fn signal_group(pgid: u32, name: Option<&str>) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid as i32), name.map(named)).is_ok()
}

fn named(name: &str) -> nix::sys::signal::Signal {
    use std::str::FromStr;
    nix::sys::signal::Signal::from_str(&format!("SIG{name}"))
        .unwrap_or_else(|_| panic!("no signal named {name}"))
}

/// A child process killed when the guard drops, so a failing test leaves no
/// process behind (holding its port, or the test's output pipe).
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
