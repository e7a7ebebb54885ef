//! First-copy marks (SPEC 11) taken plainly: a batch of new marks is one
//! plain insert; a copy, already marked or being marked by another
//! transaction, sends the batch back to be taken with `ON CONFLICT`.

use std::time::Duration;

use tidemark_profiles::store::{seen_key, take_marks, Marking, CAREFUL_BATCHES};
use tidemark_testkit::{block_on, TestDb};
use tokio_postgres::Client;

fn key(n: u64) -> (String, i16) {
    (seen_key(&format!("{n:020x}0193a0000000")), 1)
}

async fn connect(url: &str) -> Client {
    tidemark_store::connect(url).await.unwrap()
}

/// A connection to a database whose `profile_seen` takes type 1's marks.
async fn marks_db(url: &str) -> Client {
    let c = connect(url).await;
    c.batch_execute(
        "CREATE TABLE tidemark.profile_seen_1_test PARTITION OF tidemark.profile_seen
         FOR VALUES FROM (1, MINVALUE) TO (2, MINVALUE)",
    )
    .await
    .unwrap();
    c
}

/// Takes `pairs` in a transaction of its own, committed when taken; `None`
/// when the plain insert met a copy (rolled back).
async fn take(c: &mut Client, how: &mut Marking, pairs: &[(String, i16)]) -> Option<Vec<bool>> {
    let tx = c.transaction().await.unwrap();
    match take_marks(&tx, pairs, how).await.unwrap() {
        Some(first) => {
            tx.commit().await.unwrap();
            Some(first)
        }
        None => {
            tx.rollback().await.unwrap();
            None
        }
    }
}

#[test]
fn marks_are_taken_plainly_until_a_copy_then_carefully_for_a_while() {
    let db = TestDb::new("marks_plain");
    let url = db.url.clone();
    block_on(async move {
        let mut c = marks_db(&url).await;
        let mut how = Marking::default();
        let (a, b, c1) = (key(1), key(2), key(3));

        // New marks, one copy within the batch: every copy is a first copy.
        let got = take(&mut c, &mut how, &[a.clone(), b.clone(), a.clone()]).await;
        assert_eq!(got, Some(vec![true, true, true]));
        // A copy of a taken mark: the plain insert gives the batch back...
        assert_eq!(take(&mut c, &mut how, &[c1.clone(), a.clone()]).await, None);
        // ...and the next batches go to ON CONFLICT, which says which is first,
        let got = take(&mut c, &mut how, &[c1.clone(), a.clone()]).await;
        assert_eq!(got, Some(vec![true, false]));
        // until CAREFUL_BATCHES in a row have met no copy: a copy met
        // carefully starts the count again.
        let mut next = 100;
        let mut taken = vec![1, 2, 3];
        for (fresh, copy_after) in [(CAREFUL_BATCHES - 1, true), (CAREFUL_BATCHES, false)] {
            for _ in 0..fresh {
                next += 1;
                taken.push(next);
                let got = take(&mut c, &mut how, &[key(next)]).await;
                assert_eq!(got, Some(vec![true]), "a careful batch of new marks");
            }
            if copy_after {
                next += 1;
                taken.push(next);
                let got = take(&mut c, &mut how, &[key(next), b.clone()]).await;
                assert_eq!(
                    got,
                    Some(vec![true, false]),
                    "still careful: the copy is told"
                );
            }
        }
        // Then plainly again.
        assert_eq!(take(&mut c, &mut how, &[key(99), b.clone()]).await, None);

        let rows: Vec<String> = c
            .query(
                "SELECT key::text FROM tidemark.profile_seen ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut want: Vec<String> = taken.into_iter().map(|n| key(n).0).collect();
        want.sort();
        assert_eq!(rows, want, "each mark once, none from a batch given back");
    });
}

/// A plain insert of a mark another transaction is inserting waits for it,
/// as `ON CONFLICT` would, and gives the batch back once it commits.
#[test]
fn a_plain_mark_waits_for_a_concurrent_copy_and_then_yields() {
    let db = TestDb::new("marks_race");
    let url = db.url.clone();
    block_on(async move {
        let mut first = marks_db(&url).await;
        let e = key(7);
        let tx = first.transaction().await.unwrap();
        let got = take_marks(&tx, std::slice::from_ref(&e), &mut Marking::default()).await;
        assert_eq!(got.unwrap(), Some(vec![true]));

        let (url2, e2) = (url.clone(), e.clone());
        let second = tokio::spawn(async move {
            let mut c = connect(&url2).await;
            let mut how = Marking::default();
            let plain = take(&mut c, &mut how, std::slice::from_ref(&e2)).await;
            let careful = take(&mut c, &mut how, &[e2]).await;
            (plain, careful)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "the second insert waits for the first"
        );
        tx.commit().await.unwrap();
        let (plain, careful) = second.await.unwrap();
        assert_eq!(plain, None);
        assert_eq!(careful, Some(vec![false]));
    });
}
