//! A batch judged, split and routed (SPEC 11 "Events", "Persons and links"):
//! later copies within it and stale copies dropped, the events that may
//! link given to the link stage with their riders, the rest routed by
//! person to the workers.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use super::Event;
use super::{Counts, Entry, Work};

/// Where each stored identifier a split looks at sits before the batch:
/// identifier -> (person, first ts, blocklisted).
pub type Placed = HashMap<String, (i64, i64, bool)>;

/// Drops later copies within the batch and stale copies: a txid created
/// more than its type's `dedup` (ms, indexed by `type_index`) before the
/// clock the event was accepted at ([`Event::accepted`]: judged once, as it
/// stood then, SPEC 11 v1.3); the rest stays in arrival order. The counts
/// (`duplicate`, `stale`, both present even at 0) commit with worker 0's
/// share.
/// `counts` are those judged before and not committed yet (a batch judged
/// again: [`reassemble`]), added to.
pub fn judge(events: Vec<Event>, dedup: &[i64], mut counts: Counts) -> (Vec<Event>, Counts) {
    let mut seen = HashSet::with_capacity(events.len());
    let (mut duplicate, mut stale) = (0, 0);
    let mut rest = Vec::with_capacity(events.len());
    for e in events {
        if e.accepted
            .is_some_and(|c| e.created < c.saturating_sub(dedup[e.type_index]))
        {
            stale += 1;
            continue;
        }
        if !seen.insert((e.type_index, e.txid)) {
            duplicate += 1;
            continue;
        }
        rest.push(e);
    }
    *counts.entry("duplicate").or_default() += duplicate;
    *counts.entry("stale").or_default() += stale;
    (rest, counts)
}

/// Whether any event of the batch carries several identifiers: only then
/// can it link, and does [`split`] need to know where they sit.
pub fn has_links(events: &[Event]) -> bool {
    events.iter().any(|e| e.ids.ids.len() >= 2)
}

/// The identifiers the batch carries, each once, sorted: what [`split`]
/// needs placed.
pub fn carried(events: &[Event]) -> Vec<&str> {
    // One unstable sort of a flat vector: a `BTreeSet` sorted stably and
    // built nodes, 7% of the process's CPU under linked ingest.
    let mut ids: Vec<&str> = events
        .iter()
        .flat_map(|e| e.ids.ids.iter().map(|i| i.as_str()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Splits a batch (arrival order) between the link stage and the workers;
/// returns the link stage's entries (arrival order) and the workers'
/// events (arrival order). An event carrying several identifiers that all
/// sit in one stored person already links nothing wherever it falls (links
/// are never undone), so the workers count it in parallel with the rest;
/// the link stage keeps only events that may create identifiers or
/// merge (a person's devices seen again, the common case, never reach it).
///
/// Riders: an event left to the workers that arrived before the batch's
/// last link and brings an identifier of a person that may merge an earlier
/// first ts (or creates an identifier a link will carry) is also given to
/// the link stage, which places it in order, so every merge sees the
/// masters as they stood in arrival order. It stays with the workers too:
/// they record and count it.
pub fn split(events: Vec<Event>, placed: &Placed) -> (Vec<Entry>, Vec<Event>) {
    let links: Vec<bool> = events
        .iter()
        .map(|e| {
            let mut of = e
                .ids
                .ids
                .iter()
                .map(|i| placed.get(i.as_str()).map(|p| p.0));
            let first = of.next().flatten();
            e.ids.ids.len() > 1 && !(first.is_some() && of.all(|p| p == first))
        })
        .collect();
    let linked: HashSet<String> = events
        .iter()
        .zip(&links)
        .filter(|(_, l)| **l)
        .flat_map(|(e, _)| e.ids.ids.iter().map(|i| i.as_str().to_owned()))
        .collect();
    let merging: HashSet<i64> = linked
        .iter()
        .filter_map(|id| placed.get(id).map(|p| p.0))
        .collect();
    let last = links.iter().rposition(|l| *l).unwrap_or(0);
    let (mut entries, mut rest) = (Vec::new(), Vec::new());
    for (i, (e, link)) in events.into_iter().zip(links).enumerate() {
        if link {
            entries.push(Entry {
                event: e,
                rider: false,
            });
            continue;
        }
        let rides = i < last
            && e.ids.ids.iter().any(|id| match placed.get(id.as_str()) {
                Some((person, first_ts, _)) => e.ts < *first_ts && merging.contains(person),
                None => linked.contains(id.as_str()),
            });
        if rides {
            entries.push(Entry {
                event: e.clone(),
                rider: true,
            });
        }
        rest.push(e);
    }
    (entries, rest)
}

/// Deals the link stage's entries (arrival order) into at most `n` groups
/// that share no identifier and no person an identifier sits in
/// (`placed`), each in arrival order, so the groups can be applied
/// concurrently, each on its own connection, and commit in any order:
/// what a link decides depends only on the persons of its identifiers,
/// and no two groups hold one. Whole sets of entries joined through an
/// identifier or a person are dealt, largest first, to the group with
/// fewest entries.
///
/// `placed` may be behind (looked up while the workers before ran,
/// `Ahead` in lib.rs) only for identifiers it lacks: those a worker stored
/// since, each as a person of its own that only it reaches, so it still
/// joins every entry that could touch that person.
pub fn groups(entries: Vec<Entry>, placed: &Placed, n: usize) -> Vec<Vec<Entry>> {
    let n = n.max(1);
    // Union-find over identifiers and persons; an entry joins its own.
    let mut node: HashMap<Node, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut firsts = Vec::with_capacity(entries.len());
    for e in &entries {
        let mut first = None;
        let primary = e.event.ids.primary().map(|i| i.as_str());
        for id in &e.event.ids.ids {
            let place = placed.get(id.as_str());
            // A blocklisted identifier links nothing (SPEC 11): unless the
            // entry counts for it or lowers its first ts, the entry writes
            // nothing of it or of its person (a refusal charged to it is
            // charged through another identifier of its person, which
            // joins). One shared by everyone, a zeroed IDFA, would
            // otherwise weld every group into one.
            if let Some(&(_, first_ts, true)) = place {
                if primary != Some(id.as_str()) && e.event.ts >= first_ts {
                    continue;
                }
            }
            let person = place.map(|p| Node::Person(p.0));
            for key in std::iter::once(Node::Id(id.as_str())).chain(person) {
                let next = parent.len();
                let i = *node.entry(key).or_insert(next);
                if i == next {
                    parent.push(i);
                }
                match first {
                    None => first = Some(i),
                    Some(f) => {
                        let (a, b) = (root(&mut parent, f), root(&mut parent, i));
                        parent[b] = a;
                    }
                }
            }
        }
        firsts.push(first);
    }
    let mut sets: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, first) in firsts.into_iter().enumerate() {
        // An entry without identifiers touches no person: a set of its own.
        let key = first.map_or(usize::MAX - i, |f| root(&mut parent, f));
        sets.entry(key).or_default().push(i);
    }
    let mut sets: Vec<Vec<usize>> = sets.into_values().collect();
    // Largest first (ties by first entry, so the deal is deterministic).
    sets.sort_by_key(|s| (std::cmp::Reverse(s.len()), s[0]));
    let mut dealt: Vec<Vec<usize>> = vec![Vec::new(); n];
    for set in sets {
        let least = (0..n).min_by_key(|&g| dealt[g].len()).expect("n >= 1");
        dealt[least].extend(set);
    }
    let mut group_of = vec![0; entries.len()];
    for (g, indices) in dealt.iter().enumerate() {
        for &i in indices {
            group_of[i] = g;
        }
    }
    let mut out: Vec<Vec<Entry>> = dealt.iter().map(|d| Vec::with_capacity(d.len())).collect();
    for (e, g) in entries.into_iter().zip(group_of) {
        out[g].push(e);
    }
    out
}

/// A node of [`groups`]' union-find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Node<'a> {
    Id(&'a str),
    Person(i64),
}

/// What the link stage may change of where identifiers sit: its entries'
/// identifiers and the persons they sat in (`placed`). Only the link stage
/// moves an identifier (a merge re-points the absorbed person's).
#[derive(Debug, Default)]
pub struct Touched {
    ids: HashSet<String>,
    persons: HashSet<i64>,
}

/// [`Touched`] of the link stage's `groups`.
pub fn touched(groups: &[Vec<Entry>], placed: &Placed) -> Touched {
    let mut t = Touched::default();
    for id in groups.iter().flatten().flat_map(|e| &e.event.ids.ids) {
        if let Some(p) = placed.get(id.as_str()) {
            t.persons.insert(p.0);
        }
        t.ids.insert(id.as_str().to_owned());
    }
    t
}

/// Routing's persons (see [`route`]) for `primaries`, as far as `placed`
/// (where they sat before the link stage) tells them: an identifier found
/// there whose identifier and person the link stage did not touch sits
/// where it sat. Returns those, and the rest to look up once the links
/// committed: not found (maybe stored since by a worker, or by the link
/// stage) or touched.
pub fn unmoved<'e>(
    primaries: Vec<&'e str>,
    placed: &Placed,
    touched: &Touched,
) -> (HashMap<String, i64>, Vec<&'e str>) {
    let (mut known, mut ask) = (HashMap::new(), Vec::new());
    for id in primaries {
        match placed.get(id) {
            Some((p, _, _)) if !touched.ids.contains(id) && !touched.persons.contains(p) => {
                known.insert(id.to_owned(), *p);
            }
            _ => ask.push(id),
        }
    }
    (known, ask)
}

/// The identifiers routing looks up once the links committed: each event's
/// primary (the one it counts for).
pub fn primaries(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| e.ids.primary().map(|i| i.as_str()))
        .collect()
}

/// Routes the workers' events by the person each counts for (`person`:
/// primary -> stored person), so two identifiers of one bridged person go
/// to one worker; an identifier without a person goes by itself, an event
/// without identifiers by its txid. Within a share, events are grouped by
/// that key (arrival order kept within each group), so a worker's paced
/// transactions hold most persons whole: a person active in every second
/// would otherwise be loaded and rewritten by every one of them. Order
/// across persons changes nothing a share writes but which numbers new
/// persons take. `judged` (the batch's
/// duplicates and stale copies) commits with share 0.
pub fn route(
    events: Vec<Event>,
    person: &HashMap<String, i64>,
    hasher: &impl BuildHasher,
    workers: usize,
    trail_from: Option<i64>,
    judged: Counts,
) -> Vec<Work> {
    let mut keyed: Vec<Vec<(u64, Event)>> = (0..workers).map(|_| Vec::new()).collect();
    for e in events {
        let h = match e.ids.primary().map(|i| i.as_str()) {
            Some(id) => match person.get(id) {
                Some(p) => hasher.hash_one(p),
                None => hasher.hash_one(id),
            },
            None => hasher.hash_one(e.txid.as_str()),
        };
        keyed[(h % workers as u64) as usize].push((h, e));
    }
    let mut works: Vec<Work> = keyed
        .into_iter()
        .map(|mut k| {
            // Stable: arrival order stays within a key.
            k.sort_by_key(|(h, _)| *h);
            Work {
                events: k.into_iter().map(|(_, e)| e).collect(),
                counts: Counts::new(),
                trail_from,
            }
        })
        .collect();
    works[0].counts = judged;
    works
}

/// A batch taken apart put back together: the events of the link stage's
/// entries not committed (a rider's event is the workers' too, so once),
/// of `rest` and of each part not committed, in arrival order
/// ([`Event::seq`]); and the judged counts not committed (`judged`, or
/// part 0's once routed).
pub fn reassemble(
    links: Vec<Vec<Entry>>,
    rest: Vec<Event>,
    parts: impl IntoIterator<Item = Work>,
    mut judged: Counts,
) -> (Vec<Event>, Counts) {
    let mut events: Vec<Event> = links
        .into_iter()
        .flatten()
        .filter(|e| !e.rider)
        .map(|e| e.event)
        .chain(rest)
        .collect();
    for work in parts {
        events.extend(work.events);
        for (k, v) in work.counts {
            *judged.entry(k).or_default() += v;
        }
    }
    events.sort_unstable_by_key(|e| e.seq);
    (events, judged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Entry;
    use std::hash::Hash;

    /// The worker of a key (a person, or an identifier or txid without one).
    fn bucket(hasher: &impl BuildHasher, workers: usize, key: impl Hash) -> usize {
        (hasher.hash_one(key) % workers as u64) as usize
    }
    use std::collections::hash_map::DefaultHasher;
    use std::hash::BuildHasherDefault;

    use crate::sim::{created, ev, T0};

    #[test]
    fn judging_drops_later_copies_in_the_batch_and_stale_ones() {
        let events = vec![
            ev(1, 1, T0, Some("u"), &[]),
            ev(1, 1, T0 + 5, Some("v"), &[]),
            ev(2, 1, T0, Some("u"), &[]),
            created(ev(1, 2, T0, Some("u"), &[]), T0 - 10),
        ];
        let dedup = [9, 9, 9];
        let (rest, counts) = judge(events.clone(), &dedup, Counts::new());
        assert_eq!(rest.len(), 3, "accepted before the clock had a value");
        assert_eq!(counts, Counts::from([("duplicate", 1), ("stale", 0)]));
        let at = |mut e: Event, clock: i64| {
            e.accepted = Some(clock);
            e
        };
        let events: Vec<Event> = events.into_iter().map(|e| at(e, T0)).collect();
        let (rest, counts) = judge(events.clone(), &dedup, Counts::from([("stale", 2)]));
        let kept: Vec<(usize, i64)> = rest.iter().map(|e| (e.type_index, e.ts)).collect();
        assert_eq!(kept, [(1, T0), (2, T0)], "the first copy wins");
        assert_eq!(counts, Counts::from([("duplicate", 1), ("stale", 3)]));
        // Judged by the clock each was accepted at, whatever it is now: the
        // old copy accepted while still in time is kept.
        let mut early = events;
        early[3].accepted = Some(T0 - 5);
        let (rest, counts) = judge(early, &dedup, Counts::new());
        assert_eq!(rest.len(), 3);
        assert_eq!(counts, Counts::from([("duplicate", 1), ("stale", 0)]));
    }

    #[test]
    fn links_go_to_the_link_stage_and_known_persons_stay_with_the_workers() {
        let events = vec![
            ev(1, 1, T0, Some("a"), &[("d", "1")]),
            ev(1, 2, T0, Some("b"), &[("d", "2")]),
            ev(1, 3, T0, Some("c"), &[]),
            ev(1, 4, T0, None, &[("d", "3"), ("e", "3")]),
        ];
        assert!(has_links(&events));
        assert!(!has_links(&events[2..3]));
        assert_eq!(
            carried(&events),
            ["d:1", "d:2", "d:3", "e:3", "user:a", "user:b", "user:c"]
        );
        // user:a and d:1 already one person; user:b and d:2 two; d:3 new.
        let placed = placed(&[
            ("user:a", (1, T0)),
            ("d:1", (1, T0)),
            ("user:b", (2, T0)),
            ("d:2", (3, T0)),
            ("e:3", (4, T0)),
        ]);
        let (entries, rest) = split(events, &placed);
        let txids = |v: Vec<&Event>| -> Vec<u128> { v.iter().map(|e| num(e)).collect() };
        assert_eq!(txids(entries.iter().map(|e| &e.event).collect()), [2, 4]);
        assert!(
            entries.iter().all(|e| !e.rider),
            "nothing before a link lowers"
        );
        assert_eq!(txids(rest.iter().collect()), [1, 3]);
    }

    /// Placements from `(identifier, (person, first ts))`.
    fn placed(rows: &[(&str, (i64, i64))]) -> Placed {
        rows.iter()
            .map(|(k, (p, ts))| (k.to_string(), (*p, *ts, false)))
            .collect()
    }

    fn num(e: &Event) -> u128 {
        u128::from_str_radix(&e.txid.as_str()[..20], 16).unwrap()
    }

    #[test]
    fn riders_are_events_before_the_last_link_that_lower_a_merging_first_ts() {
        let placed = placed(&[
            ("user:a", (1, T0 + 100)),
            ("user:b", (2, T0 + 50)),
            ("user:c", (3, T0 + 100)),
        ]);
        let events = vec![
            // Lowers user:a, whose person merges below: rides.
            ev(1, 1, T0 + 10, Some("a"), &[]),
            // Does not lower: stays with the workers only.
            ev(1, 2, T0 + 100, Some("a"), &[]),
            // Lowers user:c, whose person merges with nobody.
            ev(1, 3, T0 + 10, Some("c"), &[]),
            // Creates an identifier a link carries: rides.
            ev(1, 4, T0 + 10, None, &[("d", "new")]),
            ev(1, 5, T0 + 200, Some("a"), &[("d", "new")]),
            ev(1, 6, T0 + 200, Some("b"), &[("d", "new")]),
            // After the last link: nothing left to see it.
            ev(1, 7, T0 + 1, Some("b"), &[]),
        ];
        let (entries, rest) = split(events, &placed);
        let got: Vec<(u128, bool)> = entries.iter().map(|e| (num(&e.event), e.rider)).collect();
        assert_eq!(got, [(1, true), (4, true), (5, false), (6, false)]);
        let rest: Vec<u128> = rest.iter().map(num).collect();
        assert_eq!(rest, [1, 2, 3, 4, 7], "riders are counted by the workers");
    }

    #[test]
    fn groups_share_no_identifier_and_no_person() {
        let placed = placed(&[("user:a", (1, T0)), ("d:1", (1, T0)), ("user:c", (3, T0))]);
        let entry = |e: Event| Entry {
            event: e,
            rider: false,
        };
        let entries = vec![
            // Joined through person 1 (user:a and d:1 sit in it).
            entry(ev(1, 1, T0, Some("a"), &[("d", "9")])),
            entry(ev(1, 2, T0, Some("b"), &[("d", "1")])),
            // Joined to the first through d:9, a new identifier.
            entry(ev(1, 3, T0, Some("x"), &[("d", "9")])),
            // On their own.
            entry(ev(1, 4, T0, Some("c"), &[("d", "4")])),
            entry(ev(1, 5, T0, Some("e"), &[("d", "5")])),
        ];
        let got = groups(entries.clone(), &placed, 3);
        let nums: Vec<Vec<u128>> = got
            .iter()
            .map(|g| g.iter().map(|e| num(&e.event)).collect())
            .collect();
        assert_eq!(nums, [vec![1, 2, 3], vec![4], vec![5]]);
        // Two groups: the largest set alone, the others dealt after it.
        let got = groups(entries.clone(), &placed, 2);
        let nums: Vec<Vec<u128>> = got
            .iter()
            .map(|g| g.iter().map(|e| num(&e.event)).collect())
            .collect();
        assert_eq!(nums, [vec![1, 2, 3], vec![4, 5]]);
        // Without placements, persons join nothing: 2 goes alone.
        let got = groups(entries, &Placed::new(), 4);
        let nums: Vec<Vec<u128>> = got
            .iter()
            .map(|g| g.iter().map(|e| num(&e.event)).collect())
            .collect();
        assert_eq!(nums, [vec![1, 3], vec![2], vec![4], vec![5]]);
    }

    #[test]
    fn a_blocklisted_identifier_joins_no_groups_unless_it_is_counted_or_lowered() {
        let mut placed = placed(&[("user:a", (1, T0)), ("user:b", (2, T0))]);
        placed.insert("idfa:0".into(), (9, T0, true));
        let entry = |e: Event| Entry {
            event: e,
            rider: false,
        };
        let zero = [("idfa", "0")];
        let entries = vec![
            // The zeroed IDFA beside each user: links nothing, joins nothing.
            entry(ev(1, 1, T0 + 5, Some("a"), &zero)),
            entry(ev(1, 2, T0 + 5, Some("b"), &zero)),
            entry(ev(1, 3, T0 + 5, Some("c"), &zero)),
            // Counted for its person (its only identifier): joins person 9.
            entry(ev(1, 4, T0 + 5, None, &zero)),
            // Older than its first ts, so lowers it: joins person 9 too.
            entry(ev(1, 5, T0 - 5, Some("d"), &zero)),
        ];
        let got = groups(entries.clone(), &placed, 4);
        let nums: Vec<Vec<u128>> = got
            .iter()
            .map(|g| g.iter().map(|e| num(&e.event)).collect())
            .collect();
        assert_eq!(nums, [vec![4, 5], vec![1], vec![2], vec![3]]);
        // Not blocklisted, it joins them all.
        placed.insert("idfa:0".into(), (9, T0, false));
        let got = groups(entries, &placed, 4);
        assert_eq!(got.iter().filter(|g| !g.is_empty()).count(), 1);
    }

    #[test]
    fn routing_looks_up_only_what_the_link_stage_may_have_moved() {
        let placed = placed(&[
            ("user:a", (1, T0)),
            ("d:1", (1, T0)),
            ("user:b", (2, T0)),
            ("user:c", (3, T0)),
            ("d:3", (3, T0)),
        ]);
        // Links d:1 (person 1) to user:z (new).
        let links = vec![vec![Entry {
            event: ev(1, 1, T0, Some("z"), &[("d", "1")]),
            rider: false,
        }]];
        let t = touched(&links, &placed);
        let primaries = vec!["user:a", "user:b", "user:c", "user:z", "user:new"];
        let (known, ask) = unmoved(primaries, &placed, &t);
        let want: HashMap<String, i64> =
            [("user:b".to_owned(), 2), ("user:c".to_owned(), 3)].into();
        assert_eq!(known, want);
        // user:a shares person 1 with d:1; user:z is the link's own; user:new unknown.
        assert_eq!(ask, ["user:a", "user:z", "user:new"]);
    }

    #[test]
    fn a_batch_taken_apart_comes_back_in_arrival_order_without_what_committed() {
        let hasher = BuildHasherDefault::<DefaultHasher>::default();
        let mut events = vec![
            ev(1, 1, T0, Some("a"), &[("d", "1")]),
            ev(1, 2, T0 - 5, Some("b"), &[]),
            ev(1, 3, T0, Some("c"), &[("d", "3")]),
            ev(2, 4, T0, Some("b"), &[]),
            ev(1, 5, T0, Some("e"), &[]),
            ev(1, 6, T0, Some("f"), &[]),
        ];
        for (i, e) in events.iter_mut().enumerate() {
            e.seq = 100 + i as u64;
        }
        let seqs = |v: &[Event]| -> Vec<u64> { v.iter().map(|e| e.seq).collect() };
        // user:b is person 2 and seen after event 2 says: event 2 rides.
        let placed = placed(&[("user:b", (2, T0)), ("d:1", (2, T0))]);
        let (entries, rest) = split(events, &placed);
        assert!(entries.iter().any(|e| e.rider), "{entries:?}");
        let all_rest = seqs(&rest);

        // The link stage committed one link (not a rider: its event is the
        // workers' too); the rest waits to be routed.
        let mut links = groups(entries, &placed, 2);
        let (g, i) = (0..links.len())
            .find_map(|g| links[g].iter().position(|e| !e.rider).map(|i| (g, i)))
            .unwrap();
        let committed = links[g].remove(i).event.seq;
        let judged = Counts::from([("duplicate", 1)]);
        let (back, counts) = reassemble(links, rest.clone(), Vec::new(), judged.clone());
        let want: Vec<u64> = (100..106).filter(|s| *s != committed).collect();
        assert_eq!(
            seqs(&back),
            want,
            "each uncommitted event once, in arrival order"
        );
        assert_eq!(counts, judged);

        // Routed, nothing committed: part 0's judged counts come back.
        let works = route(
            rest.clone(),
            &HashMap::new(),
            &hasher,
            2,
            None,
            judged.clone(),
        );
        let (back, counts) = reassemble(Vec::new(), Vec::new(), works, Counts::new());
        assert_eq!((seqs(&back), counts), (all_rest.clone(), judged.clone()));

        // Part 0 (with the judged counts) committed its first event.
        let mut works = route(rest, &HashMap::new(), &hasher, 2, None, judged.clone());
        // Grouped by person, not in arrival order.
        let first = works[0].events.remove(0).seq;
        works[0].counts.clear();
        let (back, counts) = reassemble(Vec::new(), Vec::new(), works, Counts::new());
        let want: Vec<u64> = all_rest.into_iter().filter(|s| *s != first).collect();
        assert_eq!(seqs(&back), want, "the parts' events, in arrival order");
        assert!(counts.is_empty(), "part 0's counts went with its commit");
    }

    #[test]
    fn routing_keeps_a_person_on_one_worker() {
        let hasher = BuildHasherDefault::<DefaultHasher>::default();
        let person: HashMap<String, i64> = [("user:a", 7), ("d:1", 7)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let events = vec![
            ev(1, 1, T0, Some("a"), &[]),
            ev(1, 2, T0, None, &[("d", "1")]),
            ev(1, 3, T0, Some("z"), &[]),
            ev(1, 4, T0, None, &[]),
        ];
        let no_ids = events[3].txid;
        assert_eq!(primaries(&events), ["user:a", "d:1", "user:z"]);
        let judged = Counts::from([("duplicate", 2)]);
        let works = route(events, &person, &hasher, 4, Some(T0), judged.clone());
        assert_eq!(works.len(), 4);
        let share = |n: u128| {
            works
                .iter()
                .position(|w| w.events.iter().any(|e| num(e) == n))
                .unwrap()
        };
        assert_eq!(share(1), bucket(&hasher, 4, 7i64), "by person");
        assert_eq!(share(2), share(1), "one person, one worker");
        assert_eq!(share(3), bucket(&hasher, 4, "user:z"), "no person yet");
        assert_eq!(
            share(4),
            bucket(&hasher, 4, no_ids.as_str()),
            "no identifier"
        );
        let order: Vec<u128> = works[share(1)].events.iter().map(num).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "arrival order");
        assert!(works.iter().all(|w| w.trail_from == Some(T0)));
        assert_eq!(works[0].counts, judged);
        assert!(works[1..].iter().all(|w| w.counts.is_empty()));
    }
}
