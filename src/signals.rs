//! Stopping on SIGTERM or SIGINT (SPEC 7 semantics for every long-running
//! command), and on a panic; what a process's exit status says.

/// A configuration (file, key or flag) that cannot be used: the process
/// exits with [`EX_CONFIG`], which the shipped units do not restart on
/// (`RestartPreventExitStatus`): starting again would fail the same way.
#[derive(Debug)]
pub struct Misconfigured(pub String);

impl std::fmt::Display for Misconfigured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Misconfigured {}

/// The exit status of a configuration error (sysexits.h's `EX_CONFIG`).
pub const EX_CONFIG: u8 = 78;

/// An answer given as an exit status, with nothing more to say (`db status`:
/// 3 stopped, 4 not initialised, as LSB init scripts answer `status`).
#[derive(Debug)]
pub struct Answer(pub u8);

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Answer {}

/// Says why the process ends, in the log format chosen: a plain line for
/// a person at a terminal, one JSON log line (level ERROR, with the exit
/// status) for a log pipeline.
pub fn fatal(json: bool, e: &anyhow::Error, status: u8) {
    if json {
        tracing::error!(exit_status = status, error = format!("{e:#}"), "fatal");
    } else {
        eprintln!("tidemark: {e:#}");
    }
}

/// Run on a second signal, just before exiting (the demo stops its children).
pub static BEFORE_EXIT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Completes on SIGTERM or SIGINT. The handlers are installed at the call
/// (inside a runtime), not at the first poll, so a signal that arrives while a
/// command is still starting up is not lost to the default action.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    // SIGHUP (a closed terminal, a reflexive `kill -HUP`) would end the
    // process by default: nothing is reloaded, so it is only logged.
    let mut hup = signal(SignalKind::hangup()).expect("install SIGHUP handler");
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::warn!(
                "SIGHUP ignored: configuration and keys are read at start; restart to apply changes"
            );
        }
    });
    async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping (a second signal ends at once)"),
            _ = int.recv() => tracing::info!("SIGINT: stopping (a second signal ends at once)"),
        }
        // A second signal means "now": whatever is still held is given up.
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("tidemark: second signal, exiting at once");
            if let Some(last_words) = BEFORE_EXIT.get() {
                last_words();
            }
            std::process::exit(130);
        });
    }
}

/// Sets `flag` on SIGTERM or SIGINT, for commands that run without a runtime.
pub fn stop_on_signal(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            shutdown_signal().await;
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            std::future::pending::<()>().await
        });
    });
}

/// Threads whose panic their owner joins and reports, after writing what
/// they handed over (`tidemark_intake::drive`); the main thread's panic
/// ends the process with status 101 by itself.
const SUPERVISED: [&str; 3] = ["main", "intake", "profile-intake"];

/// A panic on any other thread (metrics, a proxy's counter, a tokio worker)
/// ends the process at once with status 101, so a supervisor restarts it
/// rather than leaving it running without the part that died; nothing
/// accepted is lost that a `kill -9` would not lose either.
pub fn exit_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        tracing::error!(thread = name, "panicked: {info}");
        if !SUPERVISED.contains(&name) {
            std::process::exit(101);
        }
    }));
}
