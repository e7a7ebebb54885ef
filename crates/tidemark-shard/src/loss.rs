//! Estimating what PUB/SUB lost on the way (SPEC 3): publishers' ticks carry
//! how many messages of each `<type>-<first txid digit>` they have sent; the
//! shard counts what arrived. ZeroMQ keeps each publisher's messages in order
//! on a socket, so when a tick arrives every message sent before it on that
//! socket has arrived or is lost. Pure: no IO.
//!
//! Counting starts at each publisher's first tick on each socket. The
//! estimate is exact with one publisher and digits the shard takes whole; with
//! several publishers it can only undercount. A publisher silent past
//! `publisher_timeout` is let go, its estimate kept in the total, so the
//! state is bounded by the publishers the door lets in (`max_publishers`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tidemark_wire::{EventType, Types};

use crate::counters::Counters;
use tidemark_intake::Socket;

/// Arrivals per event-type slot and first digit.
type Arrived = Vec<[u64; 16]>;

struct Baseline {
    sent: HashMap<String, u64>,
    arrived: Arrived,
    /// The latest loss estimate from this publisher on this socket.
    lost: u64,
    heard: Instant,
}

/// Estimates messages PUB/SUB lost, from the `sent` counts in publishers' ticks.
pub struct LossEstimator {
    types: Types,
    /// First digits the shard takes whole.
    digits: [bool; 16],
    arrived: Arrived,
    baselines: HashMap<(Socket, String), Baseline>,
    /// What publishers let go had been estimated to lose.
    retired: u64,
    timeout: Duration,
}

impl LossEstimator {
    /// `prefixes` as configured (empty = every transaction); a publisher
    /// silent for `timeout` is let go.
    pub fn new(types: Types, prefixes: &[String], timeout: Duration) -> LossEstimator {
        let mut digits = [prefixes.is_empty(); 16];
        for p in prefixes.iter().filter(|p| p.len() == 1) {
            if let Some(d) = p.chars().next().and_then(|c| c.to_digit(16)) {
                digits[d as usize] = true;
            }
        }
        let slots = 5 + types.custom().count();
        LossEstimator {
            types,
            digits,
            arrived: vec![[0; 16]; slots],
            baselines: HashMap::new(),
            retired: 0,
            timeout,
        }
    }

    /// Counts an arrived event.
    pub fn arrived(&mut self, kind: EventType, first_digit: char) {
        if let Some(d) = first_digit.to_digit(16) {
            self.arrived[Counters::type_slot(kind)][d as usize] += 1;
        }
    }

    /// Takes a tick's `sent` counts, heard at `now`; returns the estimate of
    /// messages lost so far, over every publisher and socket.
    pub fn tick(
        &mut self,
        socket: Socket,
        publisher: &str,
        sent: &[(String, u64)],
        now: Instant,
    ) -> u64 {
        let (timeout, mut retired) = (self.timeout, 0);
        self.baselines.retain(|_, b| {
            let keep = now.saturating_duration_since(b.heard) <= timeout;
            if !keep {
                retired += b.lost;
            }
            keep
        });
        self.retired += retired;
        let key = (socket, publisher.to_owned());
        let Some(base) = self.baselines.get_mut(&key) else {
            // Only keys naming a type and a digit: at most one per slot.
            let known = |k: &String| {
                k.rsplit_once('-')
                    .is_some_and(|(t, d)| self.types.lookup(t).is_some() && d.len() == 1)
            };
            let baseline = Baseline {
                sent: sent.iter().filter(|(k, _)| known(k)).cloned().collect(),
                arrived: self.arrived.clone(),
                lost: 0,
                heard: now,
            };
            self.baselines.insert(key, baseline);
            return self.total();
        };
        base.heard = now;
        let base = &self.baselines[&key];
        let mut lost = 0u64;
        for (k, n) in sent {
            let Some((type_name, digit)) = k.rsplit_once('-') else {
                continue;
            };
            let Some(kind) = self.types.lookup(type_name) else {
                continue;
            };
            let Some(d) = digit.parse::<char>().ok().and_then(|c| c.to_digit(16)) else {
                continue;
            };
            let on_socket = if kind.is_high_frequency() {
                Socket::High
            } else {
                Socket::Low
            };
            if on_socket != socket || !self.digits[d as usize] {
                continue;
            }
            let slot = Counters::type_slot(kind);
            let sent_since = n.saturating_sub(base.sent.get(k).copied().unwrap_or(0));
            let arrived_since = self.arrived[slot][d as usize] - base.arrived[slot][d as usize];
            lost += sent_since.saturating_sub(arrived_since);
        }
        if let Some(b) = self.baselines.get_mut(&key) {
            b.lost = lost;
        }
        self.total()
    }

    fn total(&self) -> u64 {
        self.retired + self.baselines.values().map(|b| b.lost).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_the_first_tick_on_whole_digits() {
        let mut e = LossEstimator::new(
            Types::default(),
            &["0".into(), "1a".into()],
            Duration::from_secs(30),
        );
        let t = Instant::now();
        // Sent before the shard listened: not loss.
        assert_eq!(e.tick(Socket::High, "p", &[("bid-0".into(), 100)], t), 0);
        for _ in 0..7 {
            e.arrived(EventType::Bid, '0');
        }
        e.arrived(EventType::Bid, '1');
        let sent = [
            ("bid-0".into(), 110),
            ("bid-1".into(), 50),
            ("click-0".into(), 9),
        ];
        // 10 sent, 7 arrived on digit 0; digit 1 is only partly ours; clicks are the low socket's.
        assert_eq!(e.tick(Socket::High, "p", &sent, t), 3);
        assert_eq!(
            e.tick(Socket::Low, "p", &sent, t),
            3,
            "the low socket starts its own count"
        );
        assert_eq!(
            e.tick(Socket::Low, "p", &[("click-0".into(), 12)], t),
            3 + 3
        );
        // Publishers silent past the timeout are let go; what they lost stays counted.
        let later = t + Duration::from_secs(31);
        for n in 0..100 {
            e.tick(
                Socket::High,
                &format!("invented{n}"),
                &[("bid-0".into(), 1)],
                later,
            );
        }
        assert_eq!(e.baselines.len(), 100);
        assert_eq!(e.tick(Socket::High, "q", &[], later), 6);
        let much_later = later + Duration::from_secs(31);
        assert_eq!(e.tick(Socket::High, "q", &[], much_later), 6);
        assert_eq!(e.baselines.len(), 1, "only q's baseline is left");
    }
}
