//! The standard `process_*` metrics (as the Prometheus client libraries
//! name them), read from Linux's `/proc/self` at scrape time; on a system
//! without `/proc` there are none.

use crate::{counter, gauge, Sample};

/// Clock ticks per second in `/proc`'s times: `USER_HZ`, 100 on every
/// architecture Linux exports it for.
const USER_HZ: f64 = 100.0;

/// This process's samples, full names (no `tidemark_` prefix).
pub fn samples() -> Vec<Sample> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut v = Vec::new();
    if let Some(rss) = read("/proc/self/status").and_then(|s| status_kib(&s, "VmRSS:")) {
        v.push(gauge(
            "process_resident_memory_bytes",
            "resident memory size in bytes",
            &[],
            rss as f64 * 1024.0,
        ));
    }
    if let Some(stat) = read("/proc/self/stat").and_then(|s| parse_stat(&s)) {
        v.push(counter(
            "process_cpu_seconds",
            "user and system CPU time spent in seconds",
            &[],
            stat.cpu_ticks as f64 / USER_HZ,
        ));
        if let Some(boot) = read("/proc/stat").and_then(|s| boot_time(&s)) {
            v.push(gauge(
                "process_start_time_seconds",
                "start time of the process since the unix epoch in seconds",
                &[],
                boot as f64 + stat.start_ticks as f64 / USER_HZ,
            ));
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        v.push(gauge(
            "process_open_fds",
            "number of open file descriptors",
            &[],
            fds.count() as f64,
        ));
    }
    v
}

/// A `Vm…:` line of `/proc/self/status`, in KiB.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[derive(Debug, PartialEq)]
struct Stat {
    /// utime + stime.
    cpu_ticks: u64,
    /// Ticks after boot at which the process started.
    start_ticks: u64,
}

/// `/proc/self/stat`: the command (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts at field 3 (state): field n is rest's (n - 3)th.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: boot, seconds since the epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_even_with_a_command_holding_parentheses() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 12345 1000 200";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 12345
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        let status = "Name:\ttidemark\nVmHWM:\t  9000 kB\nVmRSS:\t  8192 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(8192));
        assert_eq!(status_kib(status, "VmHWM:"), Some(9000));
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }
}
