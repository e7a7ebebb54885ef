//! The liveness gate (off unless `liveness_silence` is set): the design's
//! weak spot is a tracker that dies. Its clicks and installs stop, bids go on,
//! and every window that closes then labels its transactions 0: a burst of
//! false negatives the learner cannot tell from a real drop.
//!
//! When the low-frequency socket has carried no event for `silence` of wall
//! time while the high-frequency one still carries them, the gate holds the
//! sweep clock where it stood (no phase advances: nothing is emitted, the
//! buffer keeps what arrives) and the shard warns and counts. Events on the
//! low socket reopen it, and the held windows are swept with what came in
//! meanwhile. After `max_hold` it gives up holding, sweeps and says so, and
//! stays open until the low socket is heard again. Transactions swept in the
//! `silence` before the gate closes are labelled as they stood.

use std::time::{Duration, Instant};

/// What a check decided, when it changed something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The gate closed: the low socket fell silent while the high one flows.
    Held,
    /// Events came back; the gate reopened after this long.
    Resumed(Duration),
    /// It held for `max_hold` and now sweeps anyway.
    GaveUp,
}

/// The gate's state.
#[derive(Debug, Clone)]
pub struct Gate {
    silence: Duration,
    max_hold: Duration,
    /// Since when, and at which clock, it holds.
    held: Option<(Instant, i64)>,
    /// It gave up holding in this silence.
    gave_up: bool,
}

impl Gate {
    /// A gate that closes after `silence` and holds at most `max_hold`.
    pub fn new(silence: Duration, max_hold: Duration) -> Gate {
        Gate {
            silence,
            max_hold,
            held: None,
            gave_up: false,
        }
    }

    /// The clock to sweep to, given the clock the shard would sweep to and
    /// how long ago each socket last carried an event (`None`: not in this
    /// run, and a socket never heard is not a silence).
    pub fn check(
        &mut self,
        now: Instant,
        clock: i64,
        since_low: Option<Duration>,
        since_high: Option<Duration>,
    ) -> (i64, Option<Change>) {
        let silent = since_low.is_some_and(|d| d >= self.silence)
            && since_high.is_some_and(|d| d < self.silence);
        if !silent {
            self.gave_up = false;
            return match self.held.take() {
                Some((since, _)) => (clock, Some(Change::Resumed(now - since))),
                None => (clock, None),
            };
        }
        if self.gave_up {
            return (clock, None);
        }
        match self.held {
            None => {
                self.held = Some((now, clock));
                (clock, Some(Change::Held))
            }
            Some((since, _)) if now - since >= self.max_hold => {
                self.held = None;
                self.gave_up = true;
                (clock, Some(Change::GaveUp))
            }
            Some((_, at)) => (at.min(clock), None),
        }
    }

    /// Whether it holds now.
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn holds_while_the_low_socket_is_silent_and_bids_flow_then_reopens() {
        let t0 = Instant::now();
        let mut g = Gate::new(10 * S, 60 * S);
        // Quiet on both sides is not a tracker's death; a socket never heard is not silent.
        assert_eq!(g.check(t0, 100, Some(20 * S), Some(20 * S)), (100, None));
        assert_eq!(g.check(t0, 100, None, Some(S)), (100, None));
        assert_eq!(g.check(t0, 100, Some(5 * S), Some(S)), (100, None));
        // Silent for 10 s while bids flow: held at 200.
        assert_eq!(
            g.check(t0, 200, Some(10 * S), Some(S)),
            (200, Some(Change::Held))
        );
        assert!(g.holding());
        assert_eq!(g.check(t0 + 5 * S, 260, Some(15 * S), Some(S)), (200, None));
        // A click arrives: the gate reopens and the clock goes on.
        assert_eq!(
            g.check(t0 + 8 * S, 300, Some(S), Some(S)),
            (300, Some(Change::Resumed(8 * S)))
        );
        assert!(!g.holding());
    }

    #[test]
    fn gives_up_after_the_bound_and_stays_open_until_heard_again() {
        let t0 = Instant::now();
        let mut g = Gate::new(10 * S, 30 * S);
        assert_eq!(
            g.check(t0, 100, Some(10 * S), Some(S)).1,
            Some(Change::Held)
        );
        assert_eq!(
            g.check(t0 + 29 * S, 150, Some(39 * S), Some(S)),
            (100, None)
        );
        assert_eq!(
            g.check(t0 + 30 * S, 160, Some(40 * S), Some(S)),
            (160, Some(Change::GaveUp))
        );
        assert_eq!(
            g.check(t0 + 40 * S, 170, Some(50 * S), Some(S)),
            (170, None)
        );
        // Heard again, then silent again: a new hold.
        assert_eq!(g.check(t0 + 41 * S, 180, Some(S), Some(S)), (180, None));
        assert_eq!(
            g.check(t0 + 60 * S, 190, Some(11 * S), Some(S)),
            (190, Some(Change::Held))
        );
    }
}
