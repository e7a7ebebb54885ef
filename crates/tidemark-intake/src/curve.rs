//! CURVE (SPEC 2, 7): who may publish to a subscribing process. The
//! subscribers of a deployment share the *fleet* key pair and are CURVE
//! servers (whether they bind or connect); each publisher has a key pair of
//! its own and the fleet's public key. A ZAP handler, bound before any
//! socket connects (with no handler libzmq lets every key in), completes
//! the handshake only with listed keys and names each connection by its
//! key's entry; every message then carries that name as its `User-Id`,
//! which the door checks ticks against (`foreign_tick`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// One listed publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The only `publisher` name its ticks may carry (any, for a forwarder).
    pub name: String,
    /// Its public key.
    pub public: [u8; 32],
    /// A `tidemark proxy` that checks names itself.
    pub forwarder: bool,
}

/// A process's CURVE settings: the fleet's secret key and who may publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Curve {
    /// The fleet's secret key.
    pub secret: [u8; 32],
    /// The publishers let in.
    pub publishers: Vec<Listed>,
}

/// A key as written in a file or a configuration: 40 characters of Z85.
pub fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let t = text.trim();
    if t.len() != 40 {
        return Err(format!(
            "a key is 40 characters of Z85, this one has {}",
            t.len()
        ));
    }
    // libzmq's decoder does not check its alphabet.
    const Z85: &str =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if let Some(c) = t.chars().find(|c| !Z85.contains(*c)) {
        return Err(format!("not Z85: {c:?} is not in its alphabet"));
    }
    let bytes = zmq::z85_decode(t).map_err(|e| format!("not Z85: {e}"))?;
    bytes.try_into().map_err(|_| "not a 32-byte key".to_owned())
}

/// Reads a secret key file, refusing one that its group or others may read
/// or write (SPEC 2: whoever reads the fleet's secret reads every stream).
pub fn read_secret_key_file(path: &Path) -> Result<[u8; 32], String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "{}: a secret key its group or others can access (mode {:o}) is refused; \
             make it private with: chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        ));
    }
    read_key_file(path)
}

/// Reads a key file (`tidemark keys new` writes them).
pub fn read_key_file(path: &Path) -> Result<[u8; 32], String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_key(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A publisher's side of CURVE (`tidemark publish`, and `tidemark proxy`
/// towards the fleet): its own key pair and the public key of the
/// subscribers it sends to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Its public key, derived from the secret one.
    pub public: [u8; 32],
    /// Its secret key.
    pub secret: [u8; 32],
    /// The subscribers' (the fleet's, or a proxy's) public key.
    pub server: [u8; 32],
}

impl Client {
    /// Reads a secret key file and a server's public key file.
    pub fn from_files(secret_key: &Path, server_key: &Path) -> Result<Client, String> {
        let secret = read_secret_key_file(secret_key)?;
        let server = read_key_file(server_key)?;
        let public = public_of(&secret)?;
        if public == server {
            return Err(format!(
                "{} is the public key of {} itself: a publisher's key pair is its own, \
                 the server key is the fleet's (or the proxy's)",
                server_key.display(),
                secret_key.display()
            ));
        }
        Ok(Client {
            public,
            secret,
            server,
        })
    }

    /// Makes `s` a CURVE client with these keys (before it binds or connects).
    pub fn apply(&self, s: &zmq::Socket) -> zmq::Result<()> {
        s.set_curve_serverkey(&self.server)?;
        s.set_curve_publickey(&self.public)?;
        s.set_curve_secretkey(&self.secret)
    }
}

/// The public key of a secret key.
#[allow(unsafe_code)]
pub fn public_of(secret: &[u8; 32]) -> Result<[u8; 32], String> {
    let secret = zmq::z85_encode(secret).map_err(|e| e.to_string())?;
    let secret = std::ffi::CString::new(secret).map_err(|e| e.to_string())?;
    let mut public = [0 as std::os::raw::c_char; 41];
    // SAFETY: both buffers are 41 bytes (40 characters of Z85 and a NUL),
    // as zmq_curve_public asks, and live for the whole call.
    let rc = unsafe { zmq_sys::zmq_curve_public(public.as_mut_ptr(), secret.as_ptr()) };
    if rc != 0 {
        return Err("libzmq cannot derive a public key (built without CURVE?)".into());
    }
    // SAFETY: on success libzmq wrote a NUL-terminated string into `public`.
    let text = unsafe { std::ffi::CStr::from_ptr(public.as_ptr()) };
    parse_key(&text.to_string_lossy())
}

/// Whether an endpoint stays on this host (loopback, ipc, inproc): outside
/// it, a process without keys says so at start (SPEC 2).
pub fn is_local(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return true;
    };
    let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
    matches!(host, "localhost" | "[::1]" | "::1") || host.starts_with("127.")
}

/// Writes a new key pair: the secret key to `path` (mode 0600, never over
/// an existing file) and the public key to `path.pub`; returns the public
/// key, Z85.
pub fn new_key_pair(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pair = zmq::CurveKeyPair::new().map_err(std::io::Error::other)?;
    let z85 = |k: &[u8]| zmq::z85_encode(k).map_err(std::io::Error::other);
    let (public, secret) = (z85(&pair.public_key)?, z85(&pair.secret_key)?);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{secret}")?;
    let mut public_path = path.as_os_str().to_owned();
    public_path.push(".pub");
    std::fs::write(&public_path, format!("{public}\n"))?;
    Ok(public)
}

/// A socket that connects as a CURVE server, or its ZAP handler: with keys
/// it is never closed but left to the process's exit. libzmq 4.3.4 aborts
/// the process when such a socket is closed while a handshake arrives: its
/// session reuses a ZAP pipe that is already terminating, and the request
/// cannot be written (`zap_client.cpp:78`). A key that is not listed knocks
/// every 100 ms, so any close would meet one sooner or later. Without keys
/// it closes as usual. A process opens its sockets once.
pub struct Kept<T> {
    value: Option<T>,
    keyed: bool,
}

impl<T> Kept<T> {
    /// Holds `value`, left open on drop when `keyed`.
    pub fn new(value: T, keyed: bool) -> Kept<T> {
        Kept {
            value: Some(value),
            keyed,
        }
    }
}

impl<T> std::ops::Deref for Kept<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("held until dropped")
    }
}

impl<T> Drop for Kept<T> {
    fn drop(&mut self) {
        if self.keyed {
            std::mem::forget(self.value.take());
        }
    }
}

/// The ZAP handler of one process's context; stopped and joined on drop
/// (before the context ends, which waits for its socket).
pub struct Zap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl Zap {
    /// Binds the handler in `ctx` and answers on a thread of its own. A
    /// handler that fails panics, which ends the process (a process whose
    /// handler died would otherwise refuse everyone, or after a rebind let
    /// everyone in).
    pub fn start(ctx: &zmq::Context, curve: &Curve) -> zmq::Result<Zap> {
        let rep = ctx.socket(zmq::REP)?;
        rep.set_linger(0)?;
        rep.bind("inproc://zeromq.zap.01")?;
        let keys: HashMap<[u8; 32], String> = curve
            .publishers
            .iter()
            .map(|p| (p.public, p.name.clone()))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = stop.clone();
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = refused.clone();
        let thread = std::thread::Builder::new()
            .name("zap".into())
            .spawn(move || {
                let mut logged: Option<std::time::Instant> = None;
                while !seen.load(Ordering::Relaxed) {
                    let mut items = [rep.as_poll_item(zmq::POLLIN)];
                    zmq::poll(&mut items, 100).expect("ZAP handler: poll");
                    if !items[0].is_readable() {
                        continue;
                    }
                    let request = rep.recv_multipart(0).expect("ZAP handler: receive");
                    let reply = answer(&request, &keys);
                    if reply[2] != b"200" {
                        let n = count.fetch_add(1, Ordering::Relaxed) + 1;
                        // Once a minute at most: a scanner must not flood the log.
                        if logged.is_none_or(|t| t.elapsed().as_secs() >= 60) {
                            logged = Some(std::time::Instant::now());
                            let from = request
                                .get(3)
                                .map(|a| String::from_utf8_lossy(a).into_owned());
                            tracing::warn!(
                                refused = n,
                                from = from.as_deref().unwrap_or("?"),
                                "a CURVE handshake from a key that is not listed was refused"
                            );
                        }
                    }
                    rep.send_multipart(reply, 0).expect("ZAP handler: reply");
                }
            })
            .map_err(|_| zmq::Error::EMFILE)?;
        Ok(Zap {
            stop,
            thread: Some(thread),
            refused,
        })
    }

    /// Handshakes refused so far (keys not listed, or not CURVE).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Drop for Zap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reply to one ZAP request (RFC 27): `200` with the key's name as the
/// user id for a listed key over CURVE, `400` for anything else.
fn answer(request: &[Vec<u8>], keys: &HashMap<[u8; 32], String>) -> Vec<Vec<u8>> {
    let version = request.first().cloned().unwrap_or_default();
    let id = request.get(1).cloned().unwrap_or_default();
    let listed = (request.get(5).map(Vec::as_slice) == Some(b"CURVE"))
        .then(|| request.get(6))
        .flatten()
        .and_then(|k| <[u8; 32]>::try_from(k.as_slice()).ok())
        .and_then(|k| keys.get(&k));
    let (code, text, user): (&[u8], &[u8], Vec<u8>) = match listed {
        Some(name) => (b"200", b"OK", name.clone().into_bytes()),
        None => (b"400", b"not a listed publisher", Vec::new()),
    };
    vec![version, id, code.to_vec(), text.to_vec(), user, Vec::new()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_z85_and_bad_ones_are_named() {
        let pair = zmq::CurveKeyPair::new().unwrap();
        let z = zmq::z85_encode(&pair.public_key).unwrap();
        assert_eq!(parse_key(&format!("{z}\n")), Ok(pair.public_key));
        assert!(parse_key("short").unwrap_err().contains("40 characters"));
        assert!(parse_key(&"\"".repeat(40)).unwrap_err().contains("Z85"));
    }

    #[test]
    fn a_public_key_is_derived_from_its_secret_key() {
        let pair = zmq::CurveKeyPair::new().unwrap();
        assert_eq!(public_of(&pair.secret_key), Ok(pair.public_key));
    }

    #[test]
    fn loopback_ipc_and_inproc_are_local_and_anything_else_is_not() {
        for ep in [
            "tcp://127.0.0.1:5556",
            "tcp://localhost:1",
            "tcp://[::1]:2",
            "ipc:///x",
            "inproc://y",
        ] {
            assert!(is_local(ep), "{ep}");
        }
        for ep in [
            "tcp://0.0.0.0:5556",
            "tcp://10.1.2.3:5556",
            "tcp://*:5556",
            "tcp://eth0:1",
        ] {
            assert!(!is_local(ep), "{ep}");
        }
    }

    #[test]
    fn only_listed_keys_over_curve_get_a_name() {
        let key = [7u8; 32];
        let keys = HashMap::from([(key, "bidder".to_owned())]);
        let request = |mechanism: &[u8], k: &[u8]| -> Vec<Vec<u8>> {
            [
                b"1.0".as_slice(),
                b"42",
                b"",
                b"127.0.0.1",
                b"",
                mechanism,
                k,
            ]
            .iter()
            .map(|f| f.to_vec())
            .collect()
        };
        let ok = answer(&request(b"CURVE", &key), &keys);
        assert_eq!(
            (ok[1].as_slice(), ok[2].as_slice(), ok[4].as_slice()),
            (b"42".as_slice(), b"200".as_slice(), b"bidder".as_slice())
        );
        for bad in [
            request(b"CURVE", &[8u8; 32]),
            request(b"NULL", &key),
            vec![],
        ] {
            assert_eq!(answer(&bad, &keys)[2], b"400");
        }
    }
}
