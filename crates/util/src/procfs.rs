//! Machine-wide CPU times from /proc/stat (the first, aggregate `cpu` line), and one
//! process's state and start time from /proc/PID/stat: the one reader of that file the
//! records and cleanups share (a pid with its start time tells a live owner from a new
//! process that got the same pid). The preload library keeps its own allocation-free
//! reader (it runs inside interposed calls, where allocating is not allowed).

/// The aggregate CPU times since boot, in ns (the kernel counts in ticks of 1/USER_HZ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal (guest time is already in user).
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub iowait_ns: u64,
    /// busy + idle + iowait.
    pub total_ns: u64,
    /// The part of `busy_ns` a hypervisor ran something else while this machine's CPUs
    /// wanted to run (the 8th field; 0 on bare metal and on kernels without it).
    pub steal_ns: u64,
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
        steal_ns: fields.get(7).copied().unwrap_or(0) * tick_ns,
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

/// What /proc/PID/stat says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// The state letter (field 3): `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    pub state: u8,
    /// Start time in clock ticks since boot (field 22).
    pub start_ticks: u64,
}

impl ProcessStat {
    /// Running or able to run: neither a zombie nor dead.
    pub fn is_alive(&self) -> bool {
        !matches!(self.state, b'Z' | b'X')
    }
}

/// Parses the text of /proc/PID/stat. The command name (field 2) is in parentheses and may
/// hold spaces and parentheses itself, so the fields are counted from the last `)`.
pub fn parse_process_stat(text: &str) -> Option<ProcessStat> {
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Fields 4 to 21 come between the state and the start time.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcessStat { state, start_ticks })
}

/// /proc/PID/stat of process `pid`, if it exists.
pub fn process_stat(pid: u32) -> Option<ProcessStat> {
    parse_process_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    process_stat(pid).is_some_and(|s| s.is_alive())
}

/// Whether the run of process `pid`, started at `start_ticks` where that is known (an owner
/// mark's start time; 0 or `None` when not), is over: no live process has the pid (a zombie
/// is over), or the one that has it started at another time (a later process got the pid).
pub fn run_gone(pid: u32, start_ticks: Option<u64>) -> bool {
    match process_stat(pid) {
        Some(s) if s.is_alive() => start_ticks.is_some_and(|t| t != 0 && t != s.start_ticks),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stat_fields_count_from_the_last_parenthesis() {
        let text = "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 50";
        assert_eq!(parse_process_stat(text), Some(ProcessStat { state: b'S', start_ticks: 987_654 }));
        let zombie = parse_process_stat("7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0").unwrap();
        assert!(!zombie.is_alive());
        assert_eq!(parse_process_stat("7 (x) R 1 2"), None);
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
        assert!(process_stat(std::process::id()).is_some_and(|s| s.start_ticks > 0));
        // This run, with its own start time or none, is not over; with another start time,
        // it is a later process's pid, and the run that wrote it is.
        let me = process_stat(std::process::id()).unwrap().start_ticks;
        assert!(!run_gone(std::process::id(), Some(me)) && !run_gone(std::process::id(), None));
        assert!(!run_gone(std::process::id(), Some(0)));
        assert!(run_gone(std::process::id(), Some(me + 1)));
        assert!(run_gone(u32::MAX - 1, None));
    }

    #[test]
    fn the_aggregate_line_is_split_into_busy_idle_and_iowait() {
        let text = "cpu  10 1 5 100 4 2 3 1 7 0\ncpu0 5 0 2 50 2 1 1 0 3 0\n";
        let t = parse_cpu_times(text, 10).unwrap();
        // user nice system idle iowait irq softirq steal; guest (7) is not added again.
        assert_eq!(t, CpuTimes { busy_ns: 220, idle_ns: 1000, iowait_ns: 40, total_ns: 1260, steal_ns: 10 });
        // A kernel without the steal field: none.
        assert_eq!(parse_cpu_times("cpu 1 2 3 4 5 6 7\n", 10).unwrap().steal_ns, 0);
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
