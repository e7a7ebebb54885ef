//! A publisher for tests: an XPUB socket that sees subscriptions arrive.

/// A test publisher: an XPUB socket on an ephemeral loopback port, so a test
/// can wait until a shard's subscriptions have arrived before sending.
pub struct Publisher {
    sock: zmq::Socket,
    _ctx: zmq::Context,
    pub endpoint: String,
    subscriptions: Vec<Vec<u8>>,
    payload: String,
}

impl Publisher {
    /// A publisher with no send limit (not `Default`: it binds a socket).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Publisher {
        Publisher::with_sndhwm(0)
    }

    /// A publisher whose queue per subscriber holds `hwm` messages (0: no
    /// limit); beyond it PUB/SUB drops, as a real publisher does.
    pub fn with_sndhwm(hwm: i32) -> Publisher {
        let ctx = zmq::Context::new();
        let sock = ctx.socket(zmq::XPUB).unwrap();
        sock.set_sndhwm(hwm).unwrap();
        sock.set_rcvtimeo(100).unwrap();
        // Pass every subscription up, duplicates too: two sockets subscribe to `tick`.
        sock.set_xpub_verbose(true).unwrap();
        sock.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = sock.get_last_endpoint().unwrap().unwrap();
        Publisher {
            sock,
            _ctx: ctx,
            endpoint,
            subscriptions: Vec::new(),
            payload: String::new(),
        }
    }

    /// Waits until `n` subscriptions to `topic` have arrived (each shard subscribes to `tick` twice).
    pub fn wait_subscribed(&mut self, topic: &str, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let have = self
                .subscriptions
                .iter()
                .filter(|s| s.as_slice() == topic.as_bytes())
                .count();
            if have >= n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no subscription to {topic:?} after 20s"
            );
            if let Ok(m) = self.sock.recv_bytes(0) {
                if m.first() == Some(&1) {
                    self.subscriptions.push(m[1..].to_vec());
                }
            }
        }
    }

    pub fn raw(&self, frames: &[&[u8]]) {
        self.sock.send_multipart(frames, 0).unwrap();
    }

    /// Sends an event; `extra` is `"key":value` pairs (may be empty).
    pub fn event(&mut self, type_name: &str, txid: &tidemark_wire::Txid, ts: i64, extra: &str) {
        tidemark_wire::event_payload(&mut self.payload, type_name, txid, ts, extra);
        let topic = tidemark_wire::topic(type_name, txid);
        self.sock
            .send_multipart([topic.as_bytes(), self.payload.as_bytes()], 0)
            .unwrap();
    }

    pub fn tick(&self, ts: i64) {
        self.tick_sent(ts, &[]);
    }

    /// Ticks from `from` to `to` a minute of event time at a time, as a
    /// publisher steps through a quiet stretch (SPEC 3).
    pub fn tick_steps(&self, from: i64, to: i64) {
        let mut t = from;
        while t < to {
            t = (t + 60_000).min(to);
            self.tick(t);
        }
    }

    /// A tick carrying `sent` counts (`<type>-<digit>`, messages sent so far).
    pub fn tick_sent(&self, ts: i64, sent: &[(String, u64)]) {
        let p = tidemark_wire::tick_payload("test", ts, sent);
        self.sock
            .send_multipart([b"tick".as_slice(), p.as_bytes()], 0)
            .unwrap();
    }
}
