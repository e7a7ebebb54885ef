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

/// Reads a key file (`tidemark keys new` writes them).
pub fn read_key_file(path: &Path) -> Result<[u8; 32], String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_key(&text).map_err(|e| format!("{}: {e}", path.display()))
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

/// The ZAP handler of one process's context; stopped and joined on drop
/// (before the context ends, which waits for its socket).
pub struct Zap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
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
        let thread = std::thread::Builder::new()
            .name("zap".into())
            .spawn(move || {
                while !seen.load(Ordering::Relaxed) {
                    let mut items = [rep.as_poll_item(zmq::POLLIN)];
                    zmq::poll(&mut items, 100).expect("ZAP handler: poll");
                    if !items[0].is_readable() {
                        continue;
                    }
                    let request = rep.recv_multipart(0).expect("ZAP handler: receive");
                    let reply = answer(&request, &keys);
                    rep.send_multipart(reply, 0).expect("ZAP handler: reply");
                }
            })
            .map_err(|_| zmq::Error::EMFILE)?;
        Ok(Zap {
            stop,
            thread: Some(thread),
        })
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
