//! The one run loop of a subscribing process: take chunks from intake while
//! there is room, do what is due, back off on errors a retry can fix, and
//! on a stop write what is held within `shutdown_timeout`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::Backoff;

/// How often the loop asks its step for a report.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// How a step failed.
#[derive(Debug)]
pub enum Failure<E> {
    /// A retry may succeed (the database is away, a lock is held): the loop
    /// backs off and calls again, holding everything.
    Retry(E),
    /// Retrying cannot help: the process stops with this error.
    Fatal(E),
}

/// Why a process stopped after a stop was asked for or intake ended,
/// other than cleanly; every process's error wraps it.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    /// At a stop, the step could not write what it holds within the time given.
    #[error("stopped without writing {unwritten} accepted events: the database stayed away for the whole shutdown_timeout ({waited:?}); last error: {error}")]
    ShutdownTimeout {
        /// Accepted events not written.
        unwritten: usize,
        /// How long it tried.
        waited: Duration,
        /// The last error.
        error: String,
    },
    /// The intake thread panicked: a broken invariant, so the process must
    /// not exit as if it stopped cleanly.
    #[error("the intake thread panicked (what it had handed over was written): {0}")]
    IntakePanicked(String),
}

/// What a process does with what intake hands over. The loop calls it from
/// one task; none of it runs concurrently.
// The loop only ever awaits these futures on the caller's task (the
// processes run on `block_on`), so they need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Step {
    /// What intake hands over.
    type Chunk;
    /// What can go wrong; a [`Stopped`] is one of them.
    type Error: std::fmt::Display + From<Stopped>;
    /// Takes a chunk received at `now`.
    fn take(&mut self, chunk: Self::Chunk, now: Instant);
    /// Whether another chunk fits (the process's memory bound); while not,
    /// chunks wait in the channel and intake stops reading.
    fn room(&self) -> bool;
    /// When work is next due.
    fn due(&self, now: Instant) -> Instant;
    /// What is due even while backing off (publishing figures), if anything.
    fn due_while_waiting(&self) -> Option<Instant> {
        None
    }
    /// Called while backing off once `due_while_waiting` has come.
    fn wait(&mut self, _now: Instant) {}
    /// Does what is due at `now`.
    async fn work(&mut self, now: Instant) -> Result<(), Failure<Self::Error>>;
    /// Events accepted and not yet written.
    fn held(&self) -> usize;
    /// Logs progress; `queued`: chunks waiting in the channel.
    fn report(&mut self, queued: usize);
    /// One attempt, at a clean stop, to write everything held.
    async fn finish(&mut self) -> Result<(), Failure<Self::Error>>;
}

/// Runs `step` over what `intake` (its thread, fed by `rx`, stopped through
/// `stop`) hands over until `shutdown` completes or intake ends; then stops
/// reading, takes what intake still holds, and calls [`Step::finish`] until
/// it succeeds or `shutdown_timeout` runs out.
pub async fn drive<S: Step>(
    step: &mut S,
    intake: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    mut rx: mpsc::Receiver<S::Chunk>,
    shutdown: impl Future<Output = ()>,
    shutdown_timeout: Duration,
) -> Result<(), S::Error> {
    serve(step, &stop, &mut rx, shutdown).await?;
    finish(step, intake, stop, rx, shutdown_timeout).await
}

/// Turns the loop until `shutdown` completes or intake ends: takes chunks
/// while the step has room, works when due, backs off on a retryable
/// failure; a fatal one stops intake and is returned.
async fn serve<S: Step>(
    step: &mut S,
    stop: &AtomicBool,
    rx: &mut mpsc::Receiver<S::Chunk>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), S::Error> {
    tokio::pin!(shutdown);
    let mut next_report = Instant::now() + REPORT_EVERY;
    let mut backoff = Backoff::new();
    let mut retry_at: Option<Instant> = None;
    tidemark_metrics::alive::ready();
    loop {
        let now = Instant::now();
        tidemark_metrics::alive::beat();
        // Backing off, only the retry (and what is due while waiting) wakes
        // the loop: work already due would otherwise wake it at once. It
        // wakes at least every second, so its beat shows it turning.
        let wake = match retry_at {
            Some(t) => step.due_while_waiting().map_or(t, |w| w.min(t)),
            None => step.due(now),
        }
        .min(now + Duration::from_secs(1));
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            chunk = rx.recv(), if step.room() => match chunk {
                Some(c) => {
                    step.take(c, now);
                    // Everything already waiting too, while there is room:
                    // work then forms whole batches of what arrived during
                    // the last one, not one chunk's worth.
                    while step.room() {
                        match rx.try_recv() {
                            Ok(c) => step.take(c, now),
                            Err(_) => break,
                        }
                    }
                }
                None => break,
            },
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if retry_at.is_some_and(|t| now < t) {
            if step.due_while_waiting().is_some_and(|w| now >= w) {
                step.wait(now);
            }
            continue;
        }
        match step.work(now).await {
            Ok(()) => {
                if let Some(since) = backoff.since {
                    tracing::info!(
                        "database is back after {:.1}s",
                        since.elapsed().as_secs_f64()
                    );
                }
                backoff.reset();
                retry_at = None;
            }
            Err(Failure::Retry(e)) => {
                let wait = backoff.fail();
                tracing::warn!(
                    "database error, holding {} events and retrying in {:.1}s: {e}",
                    step.held(),
                    wait.as_secs_f64()
                );
                retry_at = Some(Instant::now() + wait);
                continue;
            }
            Err(Failure::Fatal(e)) => {
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        if now >= next_report {
            step.report(rx.len());
            next_report = now + REPORT_EVERY;
        }
    }
    Ok(())
}

/// The clean stop: no more reading; takes what intake holds, then writes
/// it, trying for at most `shutdown_timeout`; an intake panic is reported
/// after what was accepted is written.
async fn finish<S: Step>(
    step: &mut S,
    intake: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    mut rx: mpsc::Receiver<S::Chunk>,
    shutdown_timeout: Duration,
) -> Result<(), S::Error> {
    stop.store(true, Ordering::Relaxed);
    let joined = tokio::task::spawn_blocking(move || intake.join());
    while let Some(c) = rx.recv().await {
        step.take(c, Instant::now());
    }
    // A panic is reported after what was accepted is written.
    let panicked = match joined.await {
        Ok(Err(panic)) => Some(
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default(),
        ),
        _ => None,
    };
    let deadline = Instant::now() + shutdown_timeout;
    let mut backoff = Backoff::new();
    loop {
        let error = match step.finish().await {
            Ok(()) => break,
            Err(Failure::Fatal(e)) => return Err(e),
            Err(Failure::Retry(e)) => e.to_string(),
        };
        let wait = backoff.fail();
        if Instant::now() + wait >= deadline {
            return Err(Stopped::ShutdownTimeout {
                unwritten: step.held(),
                waited: shutdown_timeout,
                error,
            }
            .into());
        }
        tracing::warn!(
            "stopping: cannot write {} events yet, retrying in {:.1}s: {error}",
            step.held(),
            wait.as_secs_f64()
        );
        tokio::time::sleep(wait).await;
    }
    step.report(0);
    match panicked {
        Some(what) => Err(Stopped::IntakePanicked(what).into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step that holds what it takes and writes it only when `finish`
    /// is allowed to succeed.
    #[derive(Default)]
    struct Holding {
        held: Vec<u32>,
        written: Vec<u32>,
        finish_ok: bool,
        finishes: usize,
    }

    #[derive(Debug)]
    enum Error {
        Away,
        Stopped(Stopped),
    }

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl From<Stopped> for Error {
        fn from(s: Stopped) -> Error {
            Error::Stopped(s)
        }
    }

    impl Step for Holding {
        type Chunk = Vec<u32>;
        type Error = Error;
        fn take(&mut self, chunk: Vec<u32>, _: Instant) {
            self.held.extend(chunk);
        }
        fn room(&self) -> bool {
            true
        }
        fn due(&self, now: Instant) -> Instant {
            now + Duration::from_secs(3600)
        }
        async fn work(&mut self, _: Instant) -> Result<(), Failure<Error>> {
            Ok(())
        }
        fn held(&self) -> usize {
            self.held.len()
        }
        fn report(&mut self, _: usize) {}
        async fn finish(&mut self) -> Result<(), Failure<Error>> {
            self.finishes += 1;
            if self.finish_ok {
                self.written.append(&mut self.held);
                Ok(())
            } else {
                Err(Failure::Retry(Error::Away))
            }
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_panic_in_intake_is_an_error_after_what_it_handed_over_is_written() {
        let (tx, rx) = mpsc::channel(4);
        let stop = Arc::new(AtomicBool::new(false));
        let intake = std::thread::spawn(move || {
            tx.blocking_send(vec![1, 2]).unwrap();
            tx.blocking_send(vec![3]).unwrap();
            panic!("broken invariant");
        });
        let mut step = Holding {
            finish_ok: true,
            ..Holding::default()
        };
        let never = std::future::pending::<()>();
        let r = rt().block_on(drive(
            &mut step,
            intake,
            stop,
            rx,
            never,
            Duration::from_secs(5),
        ));
        match r {
            Err(Error::Stopped(Stopped::IntakePanicked(what))) => {
                assert_eq!(what, "broken invariant")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(step.written, [1, 2, 3]);
    }

    #[test]
    fn a_stop_writes_what_is_held_or_says_how_much_it_could_not() {
        for finish_ok in [true, false] {
            let (tx, rx) = mpsc::channel(4);
            let stop = Arc::new(AtomicBool::new(false));
            let seen = stop.clone();
            let intake = std::thread::spawn(move || {
                tx.blocking_send(vec![7, 8]).unwrap();
                // Intake reads until the loop asks it to stop.
                while !seen.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                tx.blocking_send(vec![9]).unwrap();
            });
            let mut step = Holding {
                finish_ok,
                ..Holding::default()
            };
            let shutdown = async { tokio::time::sleep(Duration::from_millis(50)).await };
            let r = rt().block_on(drive(
                &mut step,
                intake,
                stop,
                rx,
                shutdown,
                Duration::from_millis(400),
            ));
            if finish_ok {
                assert!(r.is_ok(), "{r:?}");
                assert_eq!(step.written, [7, 8, 9], "what intake held at the stop too");
            } else {
                match r {
                    Err(Error::Stopped(Stopped::ShutdownTimeout { unwritten, .. })) => {
                        assert_eq!(unwritten, 3)
                    }
                    other => panic!("{other:?}"),
                }
                assert!(step.finishes > 1, "retried within the time given");
            }
        }
    }
}
