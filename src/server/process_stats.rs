//! podprobe's own resource use, read from `/proc/self` on every scrape and
//! exposed under the names `client_golang`'s process collector gives them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`), so dashboards and alerts written for any
//! Go component of a node work unchanged.
//!
//! Besides them, what glibc's malloc holds (`podprobe_heap_in_use_bytes`,
//! `podprobe_heap_free_bytes`, from `mallinfo2`), the way Go components
//! report `go_memstats_heap_inuse_bytes` and `..._heap_idle_bytes`: RSS
//! that grows while the heap in use does not is memory the allocator keeps,
//! not state podprobe keeps (#27).
//!
//! Linux only (the heap figures: glibc only): elsewhere, or when a file
//! cannot be read, the series that depend on it are left out of the scrape
//! rather than reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Clock ticks per second of the times in `/proc/<pid>/stat`: `USER_HZ`,
/// which the kernel fixes at 100 for user space on every architecture
/// (procfs, which client_golang uses, assumes the same).
const USER_HZ: f64 = 100.0;

/// What one scrape reports; a `None` field is left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<i64>,
    pub virtual_bytes: Option<i64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
    pub start_time_seconds: Option<f64>,
    /// Bytes handed out by malloc and not freed (mmapped chunks included).
    pub heap_in_use_bytes: Option<i64>,
    /// Bytes malloc holds free in its arenas, not returned to the system.
    pub heap_free_bytes: Option<i64>,
}

impl ProcessStats {
    /// Reads this process's figures from `/proc`.
    pub fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let status = read("/proc/self/status");
        let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
        let boot_time = read("/proc/stat").and_then(|s| parse_boot_time(&s));
        ProcessStats {
            cpu_seconds: stat.map(|s| s.cpu_ticks as f64 / USER_HZ),
            resident_bytes: status.as_deref().and_then(|s| status_kib(s, "VmRSS:")),
            virtual_bytes: status.as_deref().and_then(|s| status_kib(s, "VmSize:")),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| i64::try_from(dir.count()).unwrap_or(i64::MAX)),
            max_fds: read("/proc/self/limits").and_then(|s| parse_max_open_files(&s)),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
            ..heap_stats()
        }
    }
}

/// The heap figures of [`ProcessStats`], from glibc's `mallinfo2`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn heap_stats() -> ProcessStats {
    // SAFETY: mallinfo2 takes no argument and returns a plain struct; it
    // locks each arena while it reads it.
    let info = unsafe { libc::mallinfo2() };
    let bytes = |n: usize| Some(i64::try_from(n).unwrap_or(i64::MAX));
    ProcessStats {
        heap_in_use_bytes: bytes(info.uordblks.saturating_add(info.hblkhd)),
        heap_free_bytes: bytes(info.fordblks),
        ..ProcessStats::default()
    }
}

/// No heap figures without glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn heap_stats() -> ProcessStats {
    ProcessStats::default()
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// `utime + stime`.
    cpu_ticks: u64,
    /// `starttime`: ticks after boot.
    start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself hold spaces and parentheses, so fields are counted from
/// the last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so field N is N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// A `kB` line of `/proc/<pid>/status`, in bytes.
fn status_kib(status: &str, key: &str) -> Option<i64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<i64>()
        .ok()?
        .checked_mul(1024)
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`
/// (`unlimited` is reported as `i64::MAX`).
fn parse_max_open_files(limits: &str) -> Option<i64> {
    let soft = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(i64::MAX);
    }
    soft.parse().ok()
}

/// The [`Collector`] that reads [`ProcessStats`] on every scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl ProcessCollector {
    /// Reports the process's figures in `registry` on every scrape.
    pub fn register(registry: &mut Registry) {
        registry.register_collector(Box::new(ProcessCollector));
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let counter = ConstCounter::new(seconds);
            // The encoder appends `_total` to counters.
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges: [(&str, &str, Option<i64>); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stats.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stats.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                stats.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                stats.max_fds,
            ),
            (
                "podprobe_heap_in_use_bytes",
                "Bytes allocated by malloc and not freed (glibc mallinfo2: uordblks + hblkhd)",
                stats.heap_in_use_bytes,
            ),
            (
                "podprobe_heap_free_bytes",
                "Bytes malloc holds free in its arenas, not returned to the system (glibc mallinfo2: fordblks)",
                stats.heap_free_bytes,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        if let Some(seconds) = stats.start_time_seconds {
            let gauge = ConstGauge::new(seconds);
            gauge.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Held by the tests that read or move the whole process's heap: with
/// another such test allocating at the same time, their figures would not
/// add up.
#[cfg(test)]
pub(crate) static HEAP_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use std::sync::PoisonError;

    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        // A command name with spaces and parentheses, as a tenant cannot
        // choose podprobe's but a renamed thread could.
        let stat = "42 (pod (probe) x) S 1 42 42 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 9 0 12345 104857600 2000 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 12345
            })
        );
        assert_eq!(parse_stat("42 (short) S 1"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn boot_time_limits_and_status_lines_parse() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1764000000\nprocesses 9\n"),
            Some(1_764_000_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n";
        assert_eq!(parse_max_open_files(limits), Some(1_048_576));
        assert_eq!(
            parse_max_open_files("Max open files   unlimited  unlimited  files\n"),
            Some(i64::MAX)
        );
        assert_eq!(
            status_kib(
                "Name:\tpodprobe\nVmSize:\t  2048 kB\nVmRSS:\t 512 kB\n",
                "VmRSS:"
            ),
            Some(512 * 1024)
        );
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn heap_in_use_follows_an_allocation_and_its_free() {
        let _alone = HEAP_TESTS.lock().unwrap_or_else(PoisonError::into_inner);
        const SIZE: usize = 64 << 20;
        let in_use = || ProcessStats::read().heap_in_use_bytes.expect("glibc");
        // The figure is the whole process's: other tests' threads allocate
        // and free beside this one, by up to a few MiB between two reads.
        // A round in which they moved it by more than 1/16 of the block is
        // measured again; a heap figure that does not follow the block
        // fails every round.
        let mut seen = Vec::new();
        for _ in 0..5 {
            let before = in_use();
            let block = vec![1u8; SIZE];
            let during = in_use();
            assert_eq!(std::hint::black_box(&block)[SIZE - 1], 1);
            drop(block);
            let after = in_use();
            let margin = (SIZE as i64) * 15 / 16;
            if during >= before + margin && after <= during - margin {
                assert!(ProcessStats::read().heap_free_bytes.is_some());
                return;
            }
            seen.push((before, during, after));
        }
        panic!("the heap in use did not follow a {SIZE}-byte block: {seen:?}");
    }

    #[test]
    fn this_process_reads_every_figure() {
        let stats = ProcessStats::read();
        assert!(stats.cpu_seconds.is_some_and(|s| s >= 0.0), "{stats:?}");
        assert!(stats.resident_bytes.is_some_and(|b| b > 0), "{stats:?}");
        assert!(
            stats.virtual_bytes >= stats.resident_bytes,
            "virtual covers resident: {stats:?}"
        );
        assert!(stats.open_fds.is_some_and(|n| n >= 3), "{stats:?}");
        assert!(stats.max_fds >= stats.open_fds, "{stats:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after the epoch")
            .as_secs_f64();
        let start = stats.start_time_seconds.expect("start time");
        assert!(
            start <= now + 1.0 && start > now - 24.0 * 3600.0,
            "started within the last day: {start} vs {now}"
        );
    }
}
