//! The processes the demo starts (shards, the profile process, the learner),
//! each a `tidemark` child logging to its own file, stopped in order and
//! never left behind: dropping one stops it, and `stop_children_now` (for a
//! second Ctrl-C, just before exiting) signals every one still running.
//!
//! Children run in process groups of their own, so a Ctrl-C at the terminal
//! reaches only the demo, which then stops them in order (shards first, so
//! the learner sees their last observations), each with a single SIGTERM:
//! a clean stop, never the "second signal" that gives up what it holds.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use anyhow::Context;

/// Pids of the children still running.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Sends SIGTERM to every child still running (each stops cleanly on it).
pub fn stop_children_now() {
    let pids = RUNNING.lock().map(|v| v.clone()).unwrap_or_default();
    for pid in pids {
        term(pid);
    }
}

fn term(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
}

/// One running child.
pub struct Proc {
    /// Its name in the demo (`demo0`, `learner`, …).
    pub name: String,
    /// Where its stderr goes.
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    /// Starts `exe args…`, logging to `dir/name.log`.
    pub fn start(exe: &Path, dir: &Path, name: &str, args: &[&str]) -> anyhow::Result<Proc> {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(exe)
            .args(args)
            .env("RUST_LOG", "warn")
            // The demo's configurations name its own database.
            .env_remove("TIDEMARK_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        if let Ok(mut r) = RUNNING.lock() {
            r.push(child.id());
        }
        Ok(Proc {
            name: name.to_owned(),
            log,
            child,
        })
    }

    /// Stops it with SIGTERM and waits; errs if it had failed.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_none() {
            term(self.child.id());
        }
        let status = self.child.wait()?;
        self.forget();
        if !status.success() {
            anyhow::bail!(
                "{} exited with {status}; see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }

    fn forget(&self) {
        if let Ok(mut r) = RUNNING.lock() {
            r.retain(|p| *p != self.child.id());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            term(self.child.id());
            let _ = self.child.wait();
        }
        self.forget();
    }
}
