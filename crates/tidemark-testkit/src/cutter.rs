//! Connections cut at random, as a network blip or a pooler would.

use crate::now_ms;

/// Terminates, at random intervals, the sessions of the connected database
/// whose `application_name` is LIKE `pattern`: a connection cut by a network blip,
/// an operator or a pooler. With `mid_query`, each cut waits (up to 60 ms)
/// for a moment when one of them is running a statement, so cuts fall inside
/// a process's work rather than between it.
pub struct Cutter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Cutter {
    /// Starts cutting every `min_ms..max_ms` (uniform).
    pub fn start(url: &str, pattern: &str, min_ms: u64, max_ms: u64, mid_query: bool) -> Cutter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sql = crate::store::cut_statement(pattern, mid_query);
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (url, flag, counted) = (url.to_owned(), stop.clone(), cut.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let c = tidemark_store::connect(&url).await.unwrap();
                let mut x = now_ms() as u64 | 1;
                let mut cuts = 0;
                while !flag.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let wait = min_ms + x % (max_ms - min_ms).max(1);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(60);
                    while std::time::Instant::now() < until {
                        let n: i64 = c.query_one(sql.as_str(), &[]).await.unwrap().get(0);
                        cuts += n as u64;
                        counted.store(cuts, Ordering::Relaxed);
                        if n > 0 || !mid_query {
                            break;
                        }
                    }
                }
                cuts
            })
        });
        Cutter {
            stop,
            cuts: cut,
            thread: Some(thread),
        }
    }

    /// Sessions terminated so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops cutting; the number of sessions terminated.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("running").join().unwrap()
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
