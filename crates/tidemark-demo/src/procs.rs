//! The processes the demo starts (shards, the profile process, the learner),
//! each a `tidemark` child logging to its own file, stopped in order and
//! never left behind: dropping the set stops whatever still runs.
//!
//! Children stay in the demo's process group, so a Ctrl-C at the terminal
//! reaches them too and each stops cleanly on its own; the demo then only
//! waits for them. A second signal would make a child give up what it holds,
//! so after a signal the demo waits before it sends one of its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

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
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            name: name.to_owned(),
            log,
            child,
        })
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stops it: after a signal to the demo, first waits `grace` for it to
    /// stop on its own; then SIGTERM and wait. Errs if it failed.
    pub fn stop(&mut self, signalled: bool, grace: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + grace;
        while signalled && self.exited().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.exited().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
        let status = self.child.wait()?;
        // 130: a child that took the terminal's second Ctrl-C.
        let gave_up = signalled && status.code() == Some(130);
        if !(status.success() || gave_up) {
            anyhow::bail!(
                "{} exited with {status}; see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
    }
}
