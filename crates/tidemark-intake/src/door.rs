//! The door every event and tick passes (SPEC 1, 6): how far ahead of the
//! reference they may be, and the event clock the accepted ticks drive.

use std::time::Instant;

use crate::clock::{EventClock, Socket};
use crate::config::{ClockKind, Subscription};
use crate::wall_ms;

/// The `max_future` reference and the event clock of one process.
#[derive(Debug, Clone)]
pub struct Door {
    kind: ClockKind,
    clock: EventClock,
    max_future: i64,
    /// The newest tick heard in this run, from any publisher on either socket.
    newest_tick: Option<i64>,
    /// The newest tick the previous run heard.
    saved_reference: i64,
}

/// What became of a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickVerdict {
    /// More than `max_future` ahead of the reference: counted `future_tick`.
    Refused,
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
        self.reference_at(wall).saturating_add(self.max_future)
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
        if ts > self.reference_at(wall).saturating_add(self.max_future) {
            return TickVerdict::Refused;
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
            TickVerdict::Refused
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
            TickVerdict::Refused
        );
        d.tick(Socket::High, "p", 500, now, 1_000);
        d.tick(Socket::Low, "p", 500, now, 1_000);
        assert_eq!(d.advance(now), None);
    }
}
