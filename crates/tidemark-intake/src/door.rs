//! The door every event and tick passes (SPEC 1, 6): how far ahead of the
//! reference they may be, and the event clock the accepted ticks drive.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::clock::{EventClock, Socket};
use crate::config::{ClockKind, Subscription};
use crate::wall_ms;

/// The latest time any event or tick may carry, whatever the reference:
/// 9999-12-31T23:59:59.999Z, so every key and partition name made from a
/// time keeps its shape (a year of four digits, a 12-hex-digit millisecond
/// prefix) however far publishers' ticks ratchet the reference.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// The `max_future` reference and the event clock of one process.
#[derive(Debug, Clone)]
pub struct Door {
    kind: ClockKind,
    clock: EventClock,
    max_future: i64,
    /// Publisher names whose ticks count, and when each was last heard;
    /// at most `max_publishers`, each let go after `publisher_timeout`.
    names: HashMap<String, Instant>,
    max_publishers: usize,
    publisher_timeout: Duration,
    /// With `[curve]`: the listed names whose ticks may carry any name
    /// (forwarders); `None`: names are not checked against keys.
    forwarders: Option<HashSet<String>>,
    /// The newest tick heard in this run, from any publisher on either socket.
    newest_tick: Option<i64>,
    /// The newest tick the previous run heard.
    saved_reference: i64,
}

/// Why a tick was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickRefusal {
    /// More than `max_future` ahead of the reference (or past
    /// [`MAX_TIME_MS`]): counted `future_tick`.
    Future,
    /// Under a new name while `max_publishers` names count: counted
    /// `too_many_publishers` (SPEC 6).
    TooManyPublishers,
    /// Under a name other than the one listed with the key that sent it
    /// (SPEC 2): counted `foreign_tick`.
    Foreign,
}

impl TickRefusal {
    /// Its counter's name.
    pub fn reason(self) -> &'static str {
        match self {
            TickRefusal::Future => "future_tick",
            TickRefusal::TooManyPublishers => "too_many_publishers",
            TickRefusal::Foreign => "foreign_tick",
        }
    }
}

/// What became of a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickVerdict {
    /// Refused, and why.
    Refused(TickRefusal),
    /// Taken: the reference and the event clock, each when it moved.
    Accepted {
        /// The newest tick, when this one is it.
        reference: Option<i64>,
        /// The event clock, when it moved (never under the wall clock).
        clock: Option<i64>,
    },
}

impl Door {
    /// `saved_clock`: the clock a previous run reached (it never moves back);
    /// `saved_reference`: the newest tick it heard.
    pub fn new(sub: &Subscription, saved_clock: Option<i64>, saved_reference: Option<i64>) -> Door {
        Door {
            kind: sub.clock,
            clock: EventClock::new(sub.lateness, sub.publisher_timeout, saved_clock),
            max_future: sub.max_future.as_millis() as i64,
            names: HashMap::new(),
            max_publishers: sub.max_publishers,
            publisher_timeout: sub.publisher_timeout,
            forwarders: sub.curve.as_ref().map(|c| {
                c.publishers
                    .iter()
                    .filter(|p| p.forwarder)
                    .map(|p| p.name.clone())
                    .collect()
            }),
            newest_tick: None,
            saved_reference: saved_reference.unwrap_or(i64::MIN),
        }
    }

    /// What `max_future` is measured from at wall time `wall` (SPEC 1): wall
    /// time under the wall clock; under the event clock the newest tick heard
    /// from any publisher on either socket, never the (oldest-tick) sweeping
    /// clock; before the first tick, the larger of wall time and the previous
    /// run's reference.
    pub fn reference_at(&self, wall: i64) -> i64 {
        match (self.kind, self.newest_tick) {
            (ClockKind::Event, Some(t)) => t,
            (ClockKind::Event, None) => wall.max(self.saved_reference),
            (ClockKind::Wall, _) => wall,
        }
    }

    /// The latest time an event's txid or `ts` may carry now.
    pub fn limit(&self) -> i64 {
        let wall = match (self.kind, self.newest_tick) {
            (ClockKind::Event, Some(_)) => 0,
            _ => wall_ms(),
        };
        self.reference_at(wall)
            .saturating_add(self.max_future)
            .min(MAX_TIME_MS)
    }

    /// Whether ticks are checked against the key that sent them
    /// ([`Door::tick_from`]): `[curve]` is configured.
    pub fn checks_senders(&self) -> bool {
        self.forwarders.is_some()
    }

    /// Judges a tick sent by `sender` (under `[curve]`, the name its key is
    /// listed with): refused as `Foreign` unless it carries that name or
    /// the key is a forwarder's (SPEC 2); then as [`Door::tick`] does.
    pub fn tick_from(
        &mut self,
        sender: Option<&str>,
        which: Socket,
        publisher: &str,
        ts: i64,
        now: Instant,
        wall: i64,
    ) -> TickVerdict {
        if let Some(forwarders) = &self.forwarders {
            let own = sender.is_some_and(|s| s == publisher || forwarders.contains(s));
            if !own {
                return TickVerdict::Refused(TickRefusal::Foreign);
            }
        }
        self.tick(which, publisher, ts, now, wall)
    }

    /// Judges a tick heard on `which` at `now` (wall time `wall`, ms).
    pub fn tick(
        &mut self,
        which: Socket,
        publisher: &str,
        ts: i64,
        now: Instant,
        wall: i64,
    ) -> TickVerdict {
        // A mis-stamped tick could open the door to far-future txids and
        // sweep every window: refuse it like a future event.
        let limit = self
            .reference_at(wall)
            .saturating_add(self.max_future)
            .min(MAX_TIME_MS);
        if ts > limit {
            return TickVerdict::Refused(TickRefusal::Future);
        }
        if !self.admit(publisher, now) {
            return TickVerdict::Refused(TickRefusal::TooManyPublishers);
        }
        let reference = if self.newest_tick.is_none_or(|n| ts > n) {
            self.newest_tick = Some(ts);
            Some(ts)
        } else {
            None
        };
        let clock = match self.kind {
            ClockKind::Event => self.clock.tick(which, publisher, ts, now),
            ClockKind::Wall => None,
        };
        TickVerdict::Accepted { reference, clock }
    }

    /// Whether `publisher`'s ticks count: a name heard before, or room for
    /// a new one once names silent past `publisher_timeout` are let go.
    fn admit(&mut self, publisher: &str, now: Instant) -> bool {
        if let Some(heard) = self.names.get_mut(publisher) {
            *heard = now;
            return true;
        }
        if self.names.len() >= self.max_publishers {
            let timeout = self.publisher_timeout;
            self.names
                .retain(|_, heard| now.saturating_duration_since(*heard) <= timeout);
            if self.names.len() >= self.max_publishers {
                return false;
            }
        }
        self.names.insert(publisher.to_owned(), now);
        true
    }

    /// Lets publishers silent past `publisher_timeout` go; the event clock
    /// when it moved (never under the wall clock).
    pub fn advance(&mut self, now: Instant) -> Option<i64> {
        match self.kind {
            ClockKind::Event => self.clock.advance(now),
            ClockKind::Wall => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sub(clock: ClockKind) -> Subscription {
        Subscription {
            endpoints: vec![],
            prefixes: vec![],
            clock,
            lateness: Duration::from_secs(5),
            publisher_timeout: Duration::from_secs(30),
            max_future: Duration::from_secs(600),
            rcvhwm: 1,
            max_publishers: 3,
            curve: None,
        }
    }

    #[test]
    fn the_event_reference_is_the_newest_tick_not_the_clock() {
        let now = Instant::now();
        let mut d = Door::new(&sub(ClockKind::Event), None, Some(5_000_000));
        assert_eq!(
            d.reference_at(1_000),
            5_000_000,
            "the saved one before a tick"
        );
        assert_eq!(
            d.reference_at(9_000_000),
            9_000_000,
            "or wall time if later"
        );
        let v = d.tick(Socket::High, "p", 2_000_000, now, 1_000);
        assert_eq!(
            v,
            TickVerdict::Accepted {
                reference: Some(2_000_000),
                clock: None
            },
            "heard on one socket only: no clock yet"
        );
        assert_eq!(
            d.reference_at(9_000_000),
            2_000_000,
            "ticks rule once heard"
        );
        let v = d.tick(Socket::Low, "p", 1_000_000, now, 0);
        assert_eq!(
            v,
            TickVerdict::Accepted {
                reference: None,
                clock: Some(995_000)
            }
        );
        assert_eq!(
            d.tick(Socket::Low, "p", 2_600_001, now, 0),
            TickVerdict::Refused(TickRefusal::Future)
        );
        assert!(matches!(
            d.tick(Socket::Low, "p", 2_600_000, now, 0),
            TickVerdict::Accepted { .. }
        ));
    }

    #[test]
    fn the_wall_reference_is_wall_time_and_ticks_move_no_clock() {
        let now = Instant::now();
        let mut d = Door::new(&sub(ClockKind::Wall), None, Some(i64::MAX - 1));
        assert_eq!(d.reference_at(1_000), 1_000);
        assert_eq!(
            d.tick(Socket::High, "p", 700_000, now, 1_000),
            TickVerdict::Refused(TickRefusal::Future)
        );
        d.tick(Socket::High, "p", 500, now, 1_000);
        d.tick(Socket::Low, "p", 500, now, 1_000);
        assert_eq!(d.advance(now), None);
    }

    #[test]
    fn at_most_max_publishers_names_count_until_one_falls_silent() {
        let t0 = Instant::now();
        let mut d = Door::new(&sub(ClockKind::Event), None, None);
        let wall = 1_000_000;
        for p in ["a", "b", "c"] {
            assert!(matches!(
                d.tick(Socket::High, p, wall, t0, wall),
                TickVerdict::Accepted { .. }
            ));
        }
        let later = t0 + Duration::from_secs(20);
        assert_eq!(
            d.tick(Socket::High, "invented", wall, later, wall),
            TickVerdict::Refused(TickRefusal::TooManyPublishers)
        );
        // Known names keep counting; "a" speaks again, "b" and "c" do not.
        assert!(matches!(
            d.tick(Socket::Low, "a", wall, later, wall),
            TickVerdict::Accepted { .. }
        ));
        let after_timeout = t0 + Duration::from_secs(31);
        assert!(matches!(
            d.tick(Socket::High, "new", wall, after_timeout, wall),
            TickVerdict::Accepted { .. }
        ));
        assert_eq!(d.names.len(), 2, "b and c let go: {:?}", d.names.keys());
    }

    #[test]
    fn with_keys_a_tick_counts_only_under_its_key_s_name_or_a_forwarder_s() {
        let now = Instant::now();
        let listed = |name: &str, forwarder| crate::curve::Listed {
            name: name.into(),
            public: [name.len() as u8; 32],
            forwarder,
        };
        let keyed = Subscription {
            curve: Some(crate::curve::Curve {
                secret: [0; 32],
                publishers: vec![listed("alice", false), listed("proxy", true)],
            }),
            ..sub(ClockKind::Wall)
        };
        let mut d = Door::new(&keyed, None, None);
        assert!(d.checks_senders());
        let from =
            |d: &mut Door, sender, name| d.tick_from(sender, Socket::High, name, 500, now, 1_000);
        assert!(matches!(
            from(&mut d, Some("alice"), "alice"),
            TickVerdict::Accepted { .. }
        ));
        assert!(matches!(
            from(&mut d, Some("proxy"), "bob"),
            TickVerdict::Accepted { .. }
        ));
        for (sender, name) in [(Some("alice"), "bob"), (Some(""), "alice"), (None, "alice")] {
            assert_eq!(
                from(&mut d, sender, name),
                TickVerdict::Refused(TickRefusal::Foreign),
                "{sender:?} as {name}"
            );
        }
        let mut plain = Door::new(&sub(ClockKind::Wall), None, None);
        assert!(!plain.checks_senders());
        assert!(matches!(
            from(&mut plain, None, "anyone"),
            TickVerdict::Accepted { .. }
        ));
    }

    #[test]
    fn no_tick_or_event_passes_the_year_9999() {
        let now = Instant::now();
        let mut d = Door::new(&sub(ClockKind::Event), None, None);
        // A reference ratcheted to the last representable day by the
        // publisher's own ticks: the door stays shut past it.
        let near = MAX_TIME_MS - 1_000;
        d.newest_tick = Some(near);
        assert_eq!(d.limit(), MAX_TIME_MS);
        assert_eq!(
            d.tick(Socket::High, "p", MAX_TIME_MS + 1, now, 0),
            TickVerdict::Refused(TickRefusal::Future)
        );
        assert!(matches!(
            d.tick(Socket::High, "p", MAX_TIME_MS, now, 0),
            TickVerdict::Accepted { .. }
        ));
    }
}
