//! The process's own figures for `/metrics` (the `process_*` names every
//! Prometheus client library exports): CPU seconds, resident and virtual
//! memory, open and allowed file descriptors, start time. Read from
//! `/proc/self` at each scrape, a few small files; on other systems there
//! are none.

/// One reading of the process's figures; a field is None where it could
/// not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    /// Unix time, seconds.
    pub start_time_seconds: Option<f64>,
}

/// Read them now.
pub fn read() -> ProcessFigures {
    #[cfg(target_os = "linux")]
    {
        linux::read()
    }
    #[cfg(not(target_os = "linux"))]
    {
        ProcessFigures::default()
    }
}

/// The fields of `/proc/<pid>/stat` this needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// User and system time, clock ticks.
    utime: u64,
    stime: u64,
    /// Since boot, clock ticks.
    starttime: u64,
    vsize: u64,
    /// Pages.
    rss: u64,
}

/// Parse `/proc/<pid>/stat`: the command name (field 2) is in parentheses
/// and may hold spaces and parentheses itself, so fields are counted from
/// its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat { utime: field(14)?, stime: field(15)?, starttime: field(22)?, vsize: field(23)?, rss: field(24)? })
}

/// `btime` of `/proc/stat`: boot time, Unix seconds.
fn parse_btime(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{parse_btime, parse_stat, ProcessFigures};

    pub fn read() -> ProcessFigures {
        let (ticks, page) = (rustix::param::clock_ticks_per_second(), rustix::param::page_size() as u64);
        let stat = std::fs::read_to_string("/proc/self/stat").ok().and_then(|t| parse_stat(&t));
        let btime = std::fs::read_to_string("/proc/stat").ok().and_then(|t| parse_btime(&t));
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let ticks = (ticks > 0).then_some(ticks as f64);
        let page = Some(page).filter(|&p| p > 0);
        ProcessFigures {
            cpu_seconds: stat.zip(ticks).map(|(s, t)| (s.utime + s.stime) as f64 / t),
            resident_bytes: stat.zip(page).map(|(s, p)| s.rss.saturating_mul(p)),
            virtual_bytes: stat.map(|s| s.vsize),
            open_fds,
            max_fds,
            start_time_seconds: stat.zip(ticks).zip(btime).map(|((s, t), b)| b as f64 + s.starttime as f64 / t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis in it.
        let line = "4242 (we ir) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0 98765 123456789 2048 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, Stat { utime: 250, stime: 50, starttime: 98765, vsize: 123456789, rss: 2048 });
        assert_eq!(parse_stat("4242 (weir) S 1 2"), None, "a short line is no reading");
        assert_eq!(parse_btime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_figures() {
        let f = read();
        assert!(f.resident_bytes.is_some_and(|b| b > 1 << 20), "{f:?}");
        assert!(f.open_fds.is_some_and(|n| n >= 3), "{f:?}");
        assert!(f.cpu_seconds.is_some(), "{f:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let started = f.start_time_seconds.unwrap();
        assert!(started <= now + 1.0 && started > now - 86_400.0 * 365.0, "{started} vs {now}");
    }
}
