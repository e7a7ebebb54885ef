//! Shard clocks (SPEC 6). Pure: wall time is passed in, never read here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Which socket a tick arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Socket {
    /// The high-frequency socket (bids, impressions).
    High,
    /// The low-frequency socket (clicks, installs, custom types).
    Low,
}

/// The event clock: driven by publishers' ticks, never by event timestamps.
///
/// Its value is the oldest latest-tick time over both sockets and every
/// publisher heard from within `publisher_timeout`, minus `lateness`; it never
/// moves back. Taking the oldest keeps a backlog on the low-frequency socket
/// from being swept before it is read.
#[derive(Debug, Clone)]
pub struct EventClock {
    lateness: i64,
    publisher_timeout: Duration,
    latest: HashMap<(Socket, String), (i64, Instant)>,
    value: Option<i64>,
}

impl EventClock {
    /// `floor`: a clock value saved earlier, below which it never goes.
    pub fn new(lateness: Duration, publisher_timeout: Duration, floor: Option<i64>) -> EventClock {
        EventClock {
            lateness: lateness.as_millis() as i64,
            publisher_timeout,
            latest: HashMap::new(),
            value: floor,
        }
    }

    /// Records a tick; returns the clock if it moved.
    pub fn tick(&mut self, socket: Socket, publisher: &str, ts: i64, now: Instant) -> Option<i64> {
        match self.latest.get_mut(&(socket, publisher.to_owned())) {
            Some(e) => {
                e.0 = e.0.max(ts);
                e.1 = now;
            }
            None => {
                self.latest
                    .insert((socket, publisher.to_owned()), (ts, now));
            }
        }
        self.advance(now)
    }

    /// Re-evaluates after publishers may have timed out; returns the clock if it moved.
    pub fn advance(&mut self, now: Instant) -> Option<i64> {
        let timeout = self.publisher_timeout;
        self.latest
            .retain(|_, (_, heard)| now.saturating_duration_since(*heard) <= timeout);
        // A publisher heard on one socket only holds the clock: its messages on
        // the other socket may still be queued unread (at start, a flooded
        // high-frequency socket yields its first tick long after the other).
        let heard_on_both = self.latest.keys().all(|(socket, publisher)| {
            let other = match socket {
                Socket::High => Socket::Low,
                Socket::Low => Socket::High,
            };
            self.latest.contains_key(&(other, publisher.clone()))
        });
        if !heard_on_both {
            return None;
        }
        let oldest = self.latest.values().map(|(ts, _)| *ts).min()?;
        let candidate = oldest - self.lateness;
        if self.value.is_none_or(|v| candidate > v) {
            self.value = Some(candidate);
            return Some(candidate);
        }
        None
    }

    /// `None` before the first tick (and no saved value): nothing is swept.
    pub fn value(&self) -> Option<i64> {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> EventClock {
        EventClock::new(Duration::from_secs(5), Duration::from_secs(30), None)
    }

    #[test]
    fn nothing_before_the_first_tick() {
        assert_eq!(clock().value(), None);
    }

    #[test]
    fn oldest_socket_and_publisher_wins() {
        let t0 = Instant::now();
        let mut c = clock();
        // Heard on one socket only: the other may hold unread messages.
        assert_eq!(c.tick(Socket::High, "p", 100_000, t0), None);
        assert_eq!(c.tick(Socket::Low, "p", 100_000, t0), Some(95_000));
        // The high socket runs ahead; the low one holds the clock back.
        c.tick(Socket::High, "p", 200_000, t0);
        c.tick(Socket::Low, "p", 90_000, t0);
        assert_eq!(c.value(), Some(95_000), "never moves back");
        c.tick(Socket::Low, "p", 150_000, t0);
        assert_eq!(c.value(), Some(145_000));
        // A second, slower publisher holds it too, until it times out.
        c.tick(Socket::High, "q", 160_000, t0);
        c.tick(Socket::Low, "p", 300_000, t0);
        assert_eq!(
            c.value(),
            Some(145_000),
            "q not yet heard on the low socket"
        );
        c.tick(Socket::Low, "q", 160_000, t0);
        assert_eq!(c.value(), Some(155_000));
        let later = t0 + Duration::from_secs(31);
        c.tick(Socket::High, "p", 300_000, later);
        c.tick(Socket::Low, "p", 300_000, later);
        assert_eq!(c.value(), Some(295_000));
    }

    #[test]
    fn a_saved_floor_is_kept() {
        let mut c = EventClock::new(Duration::ZERO, Duration::from_secs(30), Some(1_000));
        c.tick(Socket::High, "p", 500, Instant::now());
        assert_eq!(c.tick(Socket::Low, "p", 500, Instant::now()), None);
        assert_eq!(c.value(), Some(1_000));
    }
}
