//! Machine-wide CPU times from /proc/stat (the first, aggregate `cpu` line).

/// The aggregate CPU times since boot, in ns (the kernel counts in ticks of 1/USER_HZ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal (guest time is already in user).
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub iowait_ns: u64,
    /// busy + idle + iowait.
    pub total_ns: u64,
}

/// The length of one accounting tick in ns.
pub fn tick_ns() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    1_000_000_000 / hz
}

/// Parses the text of /proc/stat; `None` when its first line is not an aggregate cpu line
/// with at least the five fields every kernel since 2.6 writes.
pub fn parse_cpu_times(text: &str, tick_ns: u64) -> Option<CpuTimes> {
    let line = text.lines().next()?;
    let mut words = line.split_whitespace();
    if words.next()? != "cpu" {
        return None;
    }
    let fields: Vec<u64> = words.map_while(|f| f.parse().ok()).take(8).collect();
    if fields.len() < 5 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let (idle, iowait) = (fields[3], fields[4]);
    Some(CpuTimes {
        busy_ns: (total - idle - iowait) * tick_ns,
        idle_ns: idle * tick_ns,
        iowait_ns: iowait * tick_ns,
        total_ns: total * tick_ns,
    })
}

/// Reads /proc/stat now.
pub fn cpu_times() -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").ok()?, tick_ns())
}

/// utime and stime of a process in ns (tick resolution), from /proc/PID/stat.
pub fn process_cpu_ns(pid: libc::pid_t) -> Option<(u64, u64)> {
    parse_process_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?, tick_ns())
}

fn parse_process_cpu(text: &str, tick_ns: u64) -> Option<(u64, u64)> {
    // The command name is in parentheses and may hold spaces: split after the last ')'.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ... utime is field 14 of the line, index 11 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime * tick_ns, stime * tick_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregate_line_is_split_into_busy_idle_and_iowait() {
        let text = "cpu  10 1 5 100 4 2 3 1 7 0\ncpu0 5 0 2 50 2 1 1 0 3 0\n";
        let t = parse_cpu_times(text, 10).unwrap();
        // user nice system idle iowait irq softirq steal; guest (7) is not added again.
        assert_eq!(t, CpuTimes { busy_ns: 220, idle_ns: 1000, iowait_ns: 40, total_ns: 1260 });
        assert_eq!(parse_cpu_times("cpu0 1 2 3 4 5\n", 10), None);
        assert_eq!(parse_cpu_times("cpu 1 2 3\n", 10), None);
        assert_eq!(parse_cpu_times("", 10), None);
        assert!(cpu_times().is_some_and(|t| t.total_ns > 0));
    }

    #[test]
    fn a_process_line_with_spaces_and_parentheses_in_its_name() {
        let line = "42 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 11 17 23 0 0";
        assert_eq!(parse_process_cpu(line, 10), Some((110, 170)));
        assert_eq!(parse_process_cpu("42 (x) R 1", 10), None);
        assert_eq!(parse_process_cpu("42 (x", 10), None);
        // SAFETY: getpid has no preconditions.
        assert!(process_cpu_ns(unsafe { libc::getpid() }).is_some());
    }
}
