//! What ANALYZE does to the profile tables (V0016): payload arrays carry no
//! statistics, in the tables and in partitions made later, and every
//! profile table and partition is analyzed after a fifth of its rows
//! changed. Under ingest, ANALYZE was a fifth of PostgreSQL's CPU, mostly
//! the arrays.

use tidemark_profiles::days::Part;
use tidemark_profiles::store::{self, Daily};
use tidemark_testkit::{block_on, query_rows, TestDb};

const DAY: i64 = 86_400_000;

#[test]
fn payload_arrays_are_not_analyzed_in_tables_or_in_partitions_made_later() {
    let db = TestDb::new("payload_statistics");
    let url = db.url.clone();
    block_on(async move {
        let mut c = tidemark_store::connect(&url).await.unwrap();
        let day = 20_000 * DAY;
        store::create_partition(&c, Daily::Trail, Part::Span(day, day + DAY))
            .await
            .unwrap();
        store::create_partition(&c, Daily::Seen(1), Part::Span(day, day + DAY))
            .await
            .unwrap();
        c.batch_execute(&format!(
            "INSERT INTO tidemark.profile_types VALUES (1, 'impression');
             INSERT INTO tidemark.profiles VALUES
                 (1, 'user:a', 1, '{{1.5}}', '{{7}}', '{{1}}', '{{7}}', '{{7}}'),
                 (2, 'user:b', 1, '{{2.5}}', '{{8}}', '{{2}}', '{{8}}', '{{8}}');
             INSERT INTO tidemark.profile_trail_chunks VALUES
                 ('user:a', {day}, NULL, '{{1, 2}}', '{{1, 1}}',
                  '{{00000000-0000-0000-0000-000000000001, 00000000-0000-0000-0000-000000000002}}'),
                 ('user:b', {day}, '{{user:b, device:c}}', '{{3}}', '{{1}}',
                  '{{00000000-0000-0000-0000-000000000003}}');"
        ))
        .await
        .unwrap();
        // Packing makes the day's packed partition and moves `user:a` there.
        store::pack_trail(&mut c, Part::Span(day, day + DAY))
            .await
            .unwrap();
        c.batch_execute("ANALYZE tidemark.profiles, tidemark.profile_trail_chunks, tidemark.profile_trail_packed")
            .await
            .unwrap();
    });
    // Partitions are named by day: leave the day out of the names.
    let column = |sql: &str| -> Vec<String> {
        query_rows(&db.url, sql)
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect()
    };
    let analyzed = column(
        "SELECT regexp_replace(tablename, '_[0-9]+$', '_<day>') || '.' || attname
         FROM pg_stats WHERE schemaname = 'tidemark'
           AND tablename ~ '^profile(s|_trail_chunks_[0-9]+|_trail_packed_[0-9]+)$'
         ORDER BY 1",
    );
    let options = column(
        "SELECT regexp_replace(c.relname, '_[0-9_]+$', '_<day>') || ' ' ||
                coalesce(c.reloptions @> '{autovacuum_analyze_scale_factor=0.2}', false)
         FROM pg_class c
         WHERE c.relnamespace = 'tidemark'::regnamespace AND c.relkind = 'r'
           AND c.relname ~ '^profile(s|_ids|_merges|_seen_1_[0-9_]+|_trail_[0-9]+|_trail_(chunks|packed)_[0-9]+)$'
         ORDER BY 1",
    );
    assert_eq!(
        analyzed,
        [
            "profile_trail_chunks_<day>.base",
            "profile_trail_chunks_<day>.id",
            "profile_trail_packed_<day>.base",
            "profile_trail_packed_<day>.id",
            "profiles.master",
            "profiles.person",
            "profiles.size",
        ]
    );
    // Analyzed after a fifth changed: tables and partitions made later.
    assert_eq!(
        options,
        [
            "profile_ids true",
            "profile_merges true",
            "profile_seen_<day> true",
            "profile_trail_<day> true",
            "profile_trail_chunks_<day> true",
            "profile_trail_packed_<day> true",
            "profiles true",
        ]
    );
}
