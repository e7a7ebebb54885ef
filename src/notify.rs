//! systemd's notify protocol, for the units' `Type=notify` and
//! `WatchdogSec=`: `READY=1` once the process has started, then
//! `WATCHDOG=1` while its main loop turns (`tidemark_metrics::alive`), so a
//! wedged loop is restarted by systemd. Without `NOTIFY_SOCKET` (not under
//! systemd) nothing happens.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tidemark_metrics::alive;

/// Starts the notifying thread if systemd asked for notifications.
pub fn start() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let watchdog = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|us| *us > 0)
        .map(Duration::from_micros);
    let _ = std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || {
            let Ok(sock) = UnixDatagram::unbound() else {
                return;
            };
            let send = |msg: &str| {
                let bytes = path.as_encoded_bytes();
                let sent = match bytes.strip_prefix(b"@") {
                    // An abstract socket (systemd's usual choice).
                    Some(name) => {
                        use std::os::linux::net::SocketAddrExt;
                        std::os::unix::net::SocketAddr::from_abstract_name(name)
                            .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
                    }
                    None => sock.send_to(msg.as_bytes(), &path),
                };
                if let Err(e) = sent {
                    tracing::warn!("NOTIFY_SOCKET: {e}");
                }
            };
            while alive::check(Duration::from_secs(3600)).is_err() {
                std::thread::sleep(Duration::from_millis(100));
            }
            send("READY=1");
            let Some(every) = watchdog else { return };
            let mut said = false;
            loop {
                std::thread::sleep(every / 2);
                match alive::check(every) {
                    Ok(()) => {
                        send("WATCHDOG=1");
                        said = false;
                    }
                    Err(why) if !said => {
                        tracing::error!("watchdog: {why}; systemd will restart this process");
                        said = true;
                    }
                    Err(_) => {}
                }
            }
        });
}
