//! Is the process ready, and is its main loop still turning? A process
//! calls [`ready`] once it has started (database reached, sockets set up)
//! and [`beat`] on every turn of its main loop, which turns at least every
//! second and goes on turning while it retries a database that is away.
//! `/readyz` and the systemd watchdog (`tidemark`'s `notify`) read
//! [`check`]: a loop wedged for longer than a bound, not a slow database,
//! is what they report.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

static READY: AtomicBool = AtomicBool::new(false);
static BEAT_MS: AtomicI64 = AtomicI64::new(0);

/// The process has started: it serves what it is for from now on.
pub fn ready() {
    beat();
    READY.store(true, Ordering::Relaxed);
}

/// One turn of the main loop.
pub fn beat() {
    BEAT_MS.store(crate::wall_ms(), Ordering::Relaxed);
}

/// `Ok` when the process is ready and its loop turned within `silence`;
/// else why not.
pub fn check(silence: Duration) -> Result<(), String> {
    if !READY.load(Ordering::Relaxed) {
        return Err("starting".into());
    }
    let quiet = crate::wall_ms() - BEAT_MS.load(Ordering::Relaxed);
    if quiet > silence.as_millis() as i64 {
        return Err(format!(
            "main loop silent for {:.1}s",
            quiet as f64 / 1000.0
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_then_ready_then_silent() {
        assert_eq!(check(Duration::from_secs(60)), Err("starting".into()));
        ready();
        assert_eq!(check(Duration::from_secs(60)), Ok(()));
        BEAT_MS.store(crate::wall_ms() - 5_000, Ordering::Relaxed);
        assert!(check(Duration::from_secs(2))
            .unwrap_err()
            .contains("silent for 5."));
        beat();
        assert_eq!(check(Duration::from_secs(2)), Ok(()));
    }
}
