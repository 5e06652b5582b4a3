//! Where the I/O threads run, relative to the CPUs that take the device's completion
//! interrupts.
//!
//! On a device with one completion queue (virtio-blk in a VM, a SATA HBA) every completion
//! interrupt lands on the same CPU. A spinner on that CPU sees its completion as soon as the
//! interrupt is taken; a spinner elsewhere waits until that CPU has been woken (in a VM: a
//! halted vCPU scheduled again by the host, tens of microseconds) and has passed the
//! completion on. A blocked thread is woken by the CPU that took the interrupt, and the
//! scheduler tends to move it there. So an unpinned comparison of block and spin is
//! confounded: block drifts to the interrupt's CPU, a spinner stays where it started, and
//! the gain of spinning changes from run to run with where the spinner happened to start.
//! Pinning every strategy's I/O threads to the same CPUs removes that.
//!
//! [`Placement`] names the choice; [`completion_cpus`] reads the interrupt's CPUs from
//! sysfs and procfs (the device's MSI vectors and their effective affinity);
//! [`pin_current_thread`] applies a CPU set.
//!
//! Non-goals: changing interrupt affinity (the host's business), NUMA placement.

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};

/// Where a job's I/O threads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Wherever the scheduler puts them.
    Any,
    /// On the CPUs that take the device's completion interrupts.
    Irq,
    /// On the CPUs that do not.
    Away,
    /// On these CPUs.
    Cpus(Vec<usize>),
}

impl Placement {
    /// `any`, `irq`, `away` or a CPU list (`1`, `0,2`, `0-3`).
    pub fn parse(text: &str) -> Result<Placement, Error> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Usage,
                format!("bad CPU placement {text:?}: {why}; use any, irq, away or a CPU list such as 0,2-3"),
            )
        };
        match text.trim() {
            "any" => Ok(Placement::Any),
            "irq" => Ok(Placement::Irq),
            "away" => Ok(Placement::Away),
            list => {
                let cpus = parse_cpu_list(list).ok_or_else(|| bad("not a CPU list"))?;
                let online = online_cpu_ids();
                if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
                    return Err(bad(&format!("CPU {c} is not online (online: {})", format_cpu_list(&online))));
                }
                Ok(Placement::Cpus(cpus))
            }
        }
    }

    pub fn name(&self) -> String {
        match self {
            Placement::Any => "any".into(),
            Placement::Irq => "irq".into(),
            Placement::Away => "away".into(),
            Placement::Cpus(c) => format_cpu_list(c),
        }
    }

    /// The CPU set for a device (`blk:vda`, `emu:optane`), or `None` for "do not pin". The
    /// string says why when the placement cannot be honoured (no interrupt found, or it
    /// covers every CPU) and the threads run unpinned instead.
    pub fn resolve(&self, device_id: &str) -> (Option<Vec<usize>>, Option<String>) {
        let online = online_cpu_ids();
        match self {
            Placement::Any => (None, None),
            Placement::Cpus(c) => (Some(c.clone()), None),
            Placement::Irq | Placement::Away => {
                let Some(irq) = device_id.strip_prefix("blk:").and_then(completion_cpus) else {
                    return (None, Some(format!("{device_id}: no completion interrupt found (emulated, loop and zram devices complete without one); I/O threads not pinned")));
                };
                let set: Vec<usize> = match self {
                    Placement::Irq => irq.iter().copied().filter(|c| online.contains(c)).collect(),
                    _ => online.iter().copied().filter(|c| !irq.contains(c)).collect(),
                };
                if set.is_empty() || set.len() == online.len() {
                    let why = format!(
                        "{device_id}: its completion interrupts go to CPUs {} of {}, so {} leaves nothing to choose; I/O threads not pinned",
                        format_cpu_list(&irq),
                        format_cpu_list(&online),
                        self.name()
                    );
                    return (None, Some(why));
                }
                (Some(set), None)
            }
        }
    }
}

/// Parses a kernel CPU list (`0-2,5`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?),
            None => {
                let a = part.trim().parse::<usize>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= 4096 {
            return None;
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

pub fn format_cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// The CPUs this process may run on now.
pub fn online_cpu_ids() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpu_list(&t))
        .unwrap_or_else(|| (0..crate::profile::online_cpus() as usize).collect())
}

/// The CPUs that take the completion interrupts of block device `disk` (`vda`,
/// `nvme0n1`): the effective affinity of the MSI vectors of the device's bus device,
/// leaving out configuration and admin vectors. `None` when no vector is found.
pub fn completion_cpus(disk: &str) -> Option<Vec<usize>> {
    completion_cpus_in(Path::new("/sys"), Path::new("/proc"), disk)
}

fn completion_cpus_in(sys: &Path, proc: &Path, disk: &str) -> Option<Vec<usize>> {
    let names = irq_names(&std::fs::read_to_string(proc.join("interrupts")).ok()?);
    let mut dev: PathBuf = std::fs::canonicalize(sys.join("block").join(disk).join("device")).ok()?;
    // Walk up from the disk's device to the bus device that owns the MSI vectors.
    let irqs: Vec<u32> = loop {
        if let Ok(rd) = std::fs::read_dir(dev.join("msi_irqs")) {
            let mut v: Vec<u32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
            v.sort_unstable();
            break v;
        }
        if !dev.pop() || dev.as_os_str().len() <= sys.as_os_str().len() {
            return None;
        }
    };
    let mut cpus = Vec::new();
    for irq in irqs {
        let name = names.iter().find(|(n, _)| *n == irq).map(|(_, s)| s.as_str()).unwrap_or("");
        if is_control_vector(name) {
            continue;
        }
        let dir = proc.join("irq").join(irq.to_string());
        let list = std::fs::read_to_string(dir.join("effective_affinity_list"))
            .or_else(|_| std::fs::read_to_string(dir.join("smp_affinity_list")))
            .ok();
        if let Some(c) = list.as_deref().and_then(parse_cpu_list) {
            cpus.extend(c);
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// Configuration, admin and unused vectors do not carry I/O completions.
fn is_control_vector(name: &str) -> bool {
    name.is_empty() || name.ends_with("-config") || name.ends_with("q0") || name.ends_with("-admin")
}

/// (irq number, action name) for each numbered line of /proc/interrupts.
fn irq_names(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq: u32 = num.parse().ok()?;
            Some((irq, rest.split_whitespace().last().unwrap_or("").to_string()))
        })
        .collect()
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), Error> {
    if let Some(c) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(Error::new(ErrorKind::Usage, format!("CPU {c} is beyond the CPU set size")));
    }
    smartcon_util::affinity::pin_current_thread(cpus).map_err(|e| {
        Error::new(ErrorKind::Usage, format!("cannot pin the I/O thread to CPUs {}: {e}", format_cpu_list(cpus)))
    })
}

/// The CPUs the calling thread may run on.
pub fn current_affinity() -> Option<Vec<usize>> {
    smartcon_util::affinity::allowed_cpus().ok()
}

/// For a thread pinned to part of the machine: (its CPUs, the other online CPUs). `None`
/// when it may run on every online CPU.
pub fn pinned_split() -> Option<(Vec<usize>, Vec<usize>)> {
    let mine = current_affinity()?;
    let others: Vec<usize> = online_cpu_ids().into_iter().filter(|c| !mine.contains(c)).collect();
    (!others.is_empty()).then_some((mine, others))
}

pub use smartcon_util::affinity::cpu_set;

/// The CPU the calling thread is on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns -1 on error.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-2,5\n"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3,1,1"), Some(vec![1, 3]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn placement_words_and_bad_input() {
        assert_eq!(Placement::parse("irq").unwrap(), Placement::Irq);
        assert_eq!(Placement::parse("any").unwrap(), Placement::Any);
        assert_eq!(Placement::parse("0").unwrap(), Placement::Cpus(vec![0]));
        assert!(Placement::parse("fast").is_err());
        assert!(Placement::parse("4095").is_err(), "an offline CPU is refused");
        // Emulated devices have no interrupt: unpinned, with the reason.
        let (set, why) = Placement::Irq.resolve("emu:optane");
        assert!(set.is_none() && why.unwrap().contains("no completion interrupt"));
    }

    /// A fake sysfs/procfs tree: virtio-blk with a config vector on CPU 0 and one request
    /// queue on CPU 1, as on the VMs this was written on.
    #[test]
    fn completion_cpus_follow_the_request_vectors() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-placement-").tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let (sys, proc) = (root.join("sys"), root.join("proc"));
        let pci = sys.join("devices/pci0000:00/0000:00:02.0");
        std::fs::create_dir_all(pci.join("virtio1/block/vda")).unwrap();
        std::fs::create_dir_all(pci.join("msi_irqs/35")).unwrap();
        std::fs::create_dir_all(pci.join("msi_irqs/36")).unwrap();
        std::fs::create_dir_all(sys.join("block/vda")).unwrap();
        std::os::unix::fs::symlink(pci.join("virtio1"), sys.join("block/vda/device")).unwrap();
        for (irq, cpus) in [(35, "0"), (36, "1")] {
            let d = proc.join(format!("irq/{irq}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("effective_affinity_list"), format!("{cpus}\n")).unwrap();
        }
        std::fs::write(
            proc.join("interrupts"),
            "           CPU0       CPU1\n 35:   0   1  PCI-MSIX-0000:00:02.0   0-edge      virtio1-config\n 36:   0   17906517  PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n",
        )
        .unwrap();
        assert_eq!(completion_cpus_in(&sys, &proc, "vda"), Some(vec![1]));
        assert_eq!(completion_cpus_in(&sys, &proc, "vdb"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
