//! Device presets and the `emu:PRESET[,key=value...]` spec.
//!
//! Each preset stands for a device class the SmartCon paper talks about. Its numbers come
//! from public datasheets or from the papers in shared/seeds; the source is named beside
//! each one. They are round numbers on purpose: the point is the class (how the device's
//! latency compares with a context switch), not one product.

use serde::Serialize;

use crate::device::Discipline;
use crate::hdd::{HddGeometry, HeadState, DESKSTAR_7K320};
use crate::model::{DeviceModel, Op, OpTiming};
use crate::table::{LatencyTable, Pattern, SDCARD_ROWS};
use smartcon_util::error::Error;
use smartcon_util::units::{parse_duration_ns, parse_size};

use crate::usage;

/// How a device computes a request's service time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mechanism {
    /// `DeviceModel`: per-op fixed latency plus transfer at a bandwidth.
    Fixed,
    /// Per op x pattern x size, interpolated ([`LatencyTable`]).
    Table(LatencyTable),
    /// Seek, rotation and zoned transfer ([`HddGeometry`]).
    Hdd(HddGeometry),
}

impl Mechanism {
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Fixed => "fixed",
            Mechanism::Table(_) => "table",
            Mechanism::Hdd(_) => "hdd",
        }
    }
}

/// A named device model with its class hint and default capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    pub summary: &'static str,
    /// Where the numbers come from.
    pub source: &'static str,
    /// Fixed + bandwidth figures; for table and HDD presets an approximation used where
    /// only such figures fit (listings, the merge study's page transfers).
    pub model: DeviceModel,
    pub mechanism: Mechanism,
    pub capacity_bytes: u64,
}

const GB: u64 = 1_000_000_000;
const MB: u64 = 1_000_000;

/// The built-in presets, fastest first.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "nvram",
        summary: "memory-class NVRAM on the memory bus (about 1 us)",
        // SmartCon Sec. 6 and 7.6 (Table III): NVRAM devices with DRAM-like access times
        // (DDR, PCRAM 70 ns, FRAM 68 ns, MRAM 35 ns per access), so a 4 KiB request is
        // about a microsecond of fixed cost plus a memory-speed transfer; 8 GB/s is a DDR3
        // channel's sustained copy rate.
        source: "SmartCon (ACM TOS) Sec. 6-7.6, Table III: DRAM-like NVRAM; DDR3 copy rate",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 1_000, bandwidth_bytes_per_s: 8 * GB },
            write: OpTiming { fixed_ns: 1_000, bandwidth_bytes_per_s: 8 * GB },
            channels: 4,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Fixed,
        capacity_bytes: 1 << 30,
    },
    Preset {
        name: "optane",
        summary: "3D XPoint (Optane-class) NVMe SSD (about 10 us 4 KiB read)",
        // Intel Optane SSD DC P4800X product brief: 10 us read and write latency (QD1,
        // 4 KiB), 2400 MB/s sequential read, 2000 MB/s write; 7 channels on its controller.
        // fixed + 4096 B / 2.4 GB/s = 8.3 us + 1.7 us = 10 us.
        source: "Intel Optane SSD DC P4800X product brief: 10 us QD1 latency, 2.4/2.0 GB/s",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 8_300, bandwidth_bytes_per_s: 2_400 * MB },
            write: OpTiming { fixed_ns: 8_000, bandwidth_bytes_per_s: 2_000 * MB },
            channels: 7,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Fixed,
        capacity_bytes: 1 << 30,
    },
    Preset {
        name: "nvme",
        summary: "NAND flash NVMe SSD (about 80 us read, buffered writes faster)",
        // Samsung 970 PRO / Intel DC P3700 class datasheets: about 80-90 us QD1 4 KiB
        // random read (NAND page read tR plus controller), writes land in the controller's
        // DRAM buffer and complete in about 20 us; 3.5 GB/s read, 2.7 GB/s write; 8 channels.
        source: "Samsung 970 PRO / Intel DC P3700 datasheets: ~80 us read, ~20 us buffered write",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 78_800, bandwidth_bytes_per_s: 3_500 * MB },
            write: OpTiming { fixed_ns: 18_500, bandwidth_bytes_per_s: 2_700 * MB },
            channels: 8,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Fixed,
        capacity_bytes: 1 << 30,
    },
    Preset {
        name: "sata-ssd",
        summary: "SATA SSD (about 120 us read, link-limited to 550 MB/s)",
        // Intel X25-M G1 (the SmartCon paper's low-end SSD, Sec. 7.4) and later SATA SSDs:
        // about 85 us read + SATA protocol overhead, 520-550 MB/s on a 6 Gb/s link; writes
        // buffered at about 60 us. 4 channels stand in for NCQ parallelism.
        source: "Intel X25-M G1 datasheet (SmartCon Sec. 7.4) and SATA-III link rate 550 MB/s",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 112_000, bandwidth_bytes_per_s: 550 * MB },
            write: OpTiming { fixed_ns: 60_000, bandwidth_bytes_per_s: 520 * MB },
            channels: 4,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Fixed,
        capacity_bytes: 1 << 30,
    },
    Preset {
        name: "hdd",
        summary: "7200 rpm hard disk: seek by distance, rotation by time, zoned transfer (milliseconds)",
        // Hitachi Deskstar 7K320 OEM specification Sec. 4.4.2: 1.0/1.1 ms single-track,
        // 12 ms average, 20/22 ms full-stroke seek, 8.3 ms per turn; 160 MB/s outer zone
        // (Seagate Barracuda 7200) to 80 MB/s inner. The fixed figures below are the
        // average random request (seek + half a turn), for listings only.
        source: "Hitachi Deskstar 7K320 spec Sec. 4.4.2: seek 1.0/12/20 ms, 7200 rpm; 160-80 MB/s zones",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 100_000 + 12_000_000 + 4_166_666, bandwidth_bytes_per_s: 120 * MB },
            write: OpTiming { fixed_ns: 100_000 + 12_100_000 + 4_166_666, bandwidth_bytes_per_s: 120 * MB },
            channels: 1,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Hdd(DESKSTAR_7K320),
        capacity_bytes: 1 << 30,
    },
    Preset {
        name: "sdcard",
        summary: "SD card of the fifth seed's emulator (table-driven: op x pattern x size)",
        // Wu and Tsai (seed 004), "Performance Numbers Used for the Baseline Storage
        // Device": Transcend UHS Class 1 SD card, 512 B to 64 KiB, random and sequential.
        // The fixed figures below are the 512 B row plus the 64 KiB row's bandwidth, for
        // listings only; the table decides every request.
        source: "Wu and Tsai (seed 004), baseline device table: Transcend UHS Class 1 SD card",
        model: DeviceModel {
            read: OpTiming { fixed_ns: 5_100, bandwidth_bytes_per_s: 4_340 * MB },
            write: OpTiming { fixed_ns: 1_113_600, bandwidth_bytes_per_s: 24 * MB },
            channels: 1,
            poll_cost_ns: 0,
        },
        mechanism: Mechanism::Table(LatencyTable::builtin(&SDCARD_ROWS)),
        capacity_bytes: 1 << 30,
    },
];

/// The capacity limit of an emulated device: it lives in RAM (pages are only touched when
/// written, but a span this large is a mistake on a 24 GiB machine).
pub const CAPACITY_BYTES_MAX: u64 = smartcon_util::units::DEVICE_SIZE.max_bytes;

/// Looks up a preset by name.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// A parsed `emu:` spec: the preset it started from and the model after overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct EmuSpec {
    pub preset: &'static str,
    pub model: DeviceModel,
    pub capacity_bytes: u64,
    pub mechanism: Mechanism,
    /// The S of ChN-xS: service times are divided by it.
    pub speedup: f64,
    /// How queued requests are served (virtual time; real time is FCFS).
    pub discipline: Discipline,
    /// The canonical text, e.g. `emu:optane` or `emu:optane,channels=1`.
    pub label: String,
    /// `faults=FILE`: the fault scenario (crate::fault) the device injects (shared: specs
    /// are cloned per target and per replay).
    pub faults: Option<std::sync::Arc<crate::fault::FaultPlan>>,
}

impl EmuSpec {
    #[inline]
    fn scaled(&self, ns: u64) -> u64 {
        if self.speedup == 1.0 {
            ns
        } else {
            ((ns as f64 / self.speedup).round() as u64).max(1)
        }
    }

    /// The service time of a request of `bytes` with the given pattern, ignoring queueing
    /// and, for a disk, its position (a random request costs the average seek and half a turn).
    #[inline]
    pub fn pattern_service_ns(&self, op: Op, pattern: Pattern, bytes: u64) -> u64 {
        let ns = match &self.mechanism {
            Mechanism::Fixed => self.model.service_ns(op, bytes),
            Mechanism::Table(t) => t.service_ns(op, pattern, bytes),
            // The geometry is already scaled by the speedup (parse_spec).
            Mechanism::Hdd(g) => return g.nominal_service_ns(op, bytes),
        };
        self.scaled(ns)
    }

    /// The nominal (random) service time: what the device "takes" for listings and rules.
    pub fn service_ns(&self, op: Op, bytes: u64) -> u64 {
        self.pattern_service_ns(op, Pattern::Random, bytes)
    }

    /// The service time of a request starting at `start_ns` on a channel whose head is
    /// `head` (moved by the call; only a disk looks at it).
    #[inline]
    pub fn service_at_ns(
        &self,
        op: Op,
        offset: u64,
        bytes: u64,
        pattern: Pattern,
        head: &mut HeadState,
        start_ns: u64,
    ) -> u64 {
        match &self.mechanism {
            Mechanism::Hdd(g) => g.service_ns(op, offset, bytes, start_ns, self.capacity_bytes, head),
            _ => self.pattern_service_ns(op, pattern, bytes),
        }
    }
}

/// The largest request a job makes (the engine's block size limit, 64 MiB).
pub const REQUEST_BYTES_MAX: u64 = smartcon_util::units::IO_SIZE.max_bytes;
/// The longest one request of [`REQUEST_BYTES_MAX`] may take on a model: beyond it the
/// parameters describe no storage device, and one I/O would outlast any run.
pub const REQUEST_NS_MAX: u64 = 10_000_000_000;

/// Refuses a model on which one request of the largest size takes over [`REQUEST_NS_MAX`]
/// (`bw=1`: 4 KiB took 4096 s), naming the key to change: the latency key where the fixed
/// part alone is too long, else the bandwidth key, as the user wrote it.
fn check_request_time(model: &DeviceModel, keys: &[&str], text: &str) -> Result<(), Error> {
    for (op, t) in [("read", &model.read), ("write", &model.write)] {
        let transfer_ns = (REQUEST_BYTES_MAX as u128 * 1_000_000_000).div_ceil(t.bandwidth_bytes_per_s.max(1) as u128);
        if t.fixed_ns as u128 + transfer_ns <= REQUEST_NS_MAX as u128 {
            continue;
        }
        let (own, both, what) = if t.fixed_ns > REQUEST_NS_MAX / 2 {
            (format!("{op}_lat"), "lat", "latency")
        } else {
            (format!("{op}_bw"), "bw", "bandwidth")
        };
        let key = if keys.contains(&own.as_str()) || !keys.contains(&both) { own.as_str() } else { both };
        return Err(usage(format!(
            "{key} in {text:?}: a {} MiB {op} would take over {} s ({what} out of range); this is not a storage device",
            REQUEST_BYTES_MAX >> 20,
            REQUEST_NS_MAX / 1_000_000_000
        )));
    }
    Ok(())
}

/// Parses `emu:PRESET[,key=value...]`.
///
/// Keys: `lat` (both ops' fixed latency), `read_lat`, `write_lat`, `bw` (both),
/// `read_bw`, `write_bw` (bytes per second, with size suffixes: `2g` = 2 GiB/s),
/// `channels`, `size` (capacity), `poll_cost` (time a status poll holds a channel),
/// `speedup` (S of ChN-xS: divides service times), `queue` (fcfs, sjf, priority),
/// `table` (a latency table file, see [`crate::table`]: the device becomes table-driven).
/// A latency or bandwidth key turns a table or HDD preset into the fixed model.
pub fn parse_spec(text: &str) -> Result<EmuSpec, Error> {
    let rest = text
        .strip_prefix("emu:")
        .ok_or_else(|| usage(format!("{text:?} is not an emulated device (expected emu:PRESET)")))?;
    let mut parts = rest.split(',');
    let name = parts.next().unwrap_or("");
    let base = preset(name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        usage(format!("unknown preset {name:?} in {text:?}; known presets: {}", names.join(", ")))
    })?;
    let mut model = base.model.clone();
    let mut mechanism = base.mechanism.clone();
    let mut speedup = 1.0;
    let mut discipline = Discipline::Fcfs;
    let mut capacity_bytes = base.capacity_bytes;
    let mut keys: Vec<&str> = Vec::new();
    let mut faults = None;
    for part in parts {
        let (key, value) =
            part.split_once('=').ok_or_else(|| usage(format!("{part:?} in {text:?} is not key=value")))?;
        if keys.contains(&key) {
            return Err(usage(format!("key {key:?} is given twice in {text:?}; give each key once")));
        }
        keys.push(key);
        let dur = || parse_duration_ns(value).map_err(|e| usage(format!("{key}: {e}")));
        let bw = || -> Result<u64, Error> {
            let v = parse_size(value).map_err(|e| usage(format!("{key}: {e} (bytes per second)")))?;
            if v == 0 {
                return Err(usage(format!("{key} must be positive")));
            }
            Ok(v)
        };
        if matches!(key, "lat" | "read_lat" | "write_lat" | "bw" | "read_bw" | "write_bw") {
            mechanism = Mechanism::Fixed;
        }
        match key {
            "lat" => {
                let v = dur()?;
                model.read.fixed_ns = v;
                model.write.fixed_ns = v;
            }
            "read_lat" => model.read.fixed_ns = dur()?,
            "write_lat" => model.write.fixed_ns = dur()?,
            "bw" => {
                let v = bw()?;
                model.read.bandwidth_bytes_per_s = v;
                model.write.bandwidth_bytes_per_s = v;
            }
            "read_bw" => model.read.bandwidth_bytes_per_s = bw()?,
            "write_bw" => model.write.bandwidth_bytes_per_s = bw()?,
            "channels" => {
                let v: u32 = value.parse().map_err(|_| usage(format!("channels: {value:?} is not a whole number")))?;
                if v == 0 || v > crate::model::CHANNELS_MAX {
                    return Err(usage(format!("channels must be 1..={}", crate::model::CHANNELS_MAX)));
                }
                model.channels = v;
            }
            "size" => {
                capacity_bytes = smartcon_util::units::parse_size_in(value, smartcon_util::units::DEVICE_SIZE)
                    .map_err(|e| usage(format!("size: {e}")))?;
            }
            "poll_cost" => model.poll_cost_ns = dur()?,
            "speedup" => {
                let v: f64 = value.parse().map_err(|_| usage(format!("speedup: {value:?} is not a number")))?;
                if !(v.is_finite() && (0.001..=1_000_000.0).contains(&v)) {
                    return Err(usage("speedup must be between 0.001 and 1000000"));
                }
                speedup = v;
            }
            "queue" => {
                discipline = Discipline::parse(value)
                    .ok_or_else(|| usage(format!("queue: {value:?} is not one of fcfs, sjf, priority")))?;
            }
            "table" => mechanism = Mechanism::Table(LatencyTable::load(value)?),
            "faults" => faults = Some(std::sync::Arc::new(crate::fault::load_scenario(std::path::Path::new(value))?)),
            _ => {
                return Err(usage(format!(
                    "unknown key {key:?} in {text:?}; keys: lat, read_lat, write_lat, bw, read_bw, write_bw, \
                     channels, size, poll_cost, speedup, queue, table, faults"
                )))
            }
        }
    }
    check_request_time(&model, &keys, text)?;
    if let Mechanism::Hdd(g) = &mechanism {
        // A disk S times faster: every mechanical phase and the media rate scaled.
        mechanism = Mechanism::Hdd(g.scaled(speedup));
    }
    Ok(EmuSpec {
        preset: base.name,
        model,
        mechanism,
        speedup,
        discipline,
        capacity_bytes,
        label: text.to_string(),
        faults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Op;

    #[test]
    fn presets_match_their_headline_latencies() {
        let lat = |name: &str, op| preset(name).unwrap().model.service_ns(op, 4096);
        // nvram about 1 us, optane about 10 us, nvme about 80 us read, hdd milliseconds.
        assert!((1_000..2_000).contains(&lat("nvram", Op::Read)));
        assert!((9_500..10_500).contains(&lat("optane", Op::Read)));
        assert!((78_000..82_000).contains(&lat("nvme", Op::Read)));
        assert!(lat("nvme", Op::Write) < lat("nvme", Op::Read) / 2);
        assert!(lat("sata-ssd", Op::Read) > lat("nvme", Op::Read));
        assert!(lat("hdd", Op::Read) > 10_000_000);
        let spec = |t: &str| parse_spec(t).unwrap();
        // The listed fixed figures of the HDD match its mechanics' average request.
        assert_eq!(spec("emu:hdd").service_ns(Op::Read, 4096), lat("hdd", Op::Read));
        assert_eq!(spec("emu:sdcard").service_ns(Op::Write, 4096), 1_160_100);
    }

    #[test]
    fn chn_xs_keys() {
        let s = parse_spec("emu:sdcard,channels=4,speedup=2,queue=sjf").unwrap();
        assert_eq!(s.model.channels, 4);
        assert_eq!(s.discipline, Discipline::Sjf);
        assert_eq!(s.service_ns(Op::Write, 4096), 580_050);
        assert_eq!(s.pattern_service_ns(Op::Read, Pattern::Sequential, 512), 950);
        assert!(parse_spec("emu:sdcard,speedup=0").is_err());
        assert!(parse_spec("emu:sdcard,queue=lifo").is_err());
        assert!(parse_spec("emu:sdcard,table=/nonexistent.csv").unwrap_err().message.contains("cannot read"));
        // A latency override turns the table device into the fixed model.
        assert_eq!(parse_spec("emu:sdcard,lat=1us").unwrap().mechanism, Mechanism::Fixed);
    }

    #[test]
    fn spec_overrides_and_errors() {
        let s = parse_spec("emu:optane,channels=1,read_lat=5us,size=64m").unwrap();
        assert_eq!(s.model.channels, 1);
        assert_eq!(s.model.read.fixed_ns, 5_000);
        assert_eq!(s.capacity_bytes, 64 << 20);
        assert!(parse_spec("emu:floppy").unwrap_err().message.contains("unknown preset"));
        assert!(parse_spec("emu:nvme,speed=9").unwrap_err().message.contains("unknown key"));
        assert!(parse_spec("emu:nvme,channels=0").is_err());
        assert!(parse_spec("emu:nvme,lat=fast").is_err());
        assert!(parse_spec("emu:nvme,size=100").is_err());
        assert!(parse_spec("nvme").is_err());
    }

    /// Issue 16: a repeated key is a mistake (which one counts?), and a model on which one
    /// request takes hours is refused naming the key, as `lat` over 10 s always was.
    #[test]
    fn duplicate_keys_and_absurd_request_times_are_refused_naming_the_key() {
        let e = parse_spec("emu:optane,lat=1us,lat=2us").unwrap_err().message;
        assert!(e.contains("\"lat\"") && e.contains("twice"), "{e}");
        let e = parse_spec("emu:optane,bw=1").unwrap_err().message;
        assert!(e.starts_with("read_bw") || e.starts_with("bw"), "{e}");
        assert!(e.contains("bw") && e.contains("not a storage device"), "{e}");
        assert!(parse_spec("emu:optane,write_bw=1k").unwrap_err().message.starts_with("write_bw"));
        assert!(parse_spec("emu:optane,lat=11s").unwrap_err().message.starts_with("lat in"));
        assert!(parse_spec("emu:optane,read_lat=11s").unwrap_err().message.starts_with("read_lat"));
        // Slow but sane models stay accepted: 5 s per request, a 16 MB/s disk.
        assert!(parse_spec("emu:optane,lat=5s").is_ok());
        assert!(parse_spec("emu:hdd,bw=16m").is_ok());
        for p in PRESETS {
            assert!(parse_spec(&format!("emu:{}", p.name)).is_ok(), "{}", p.name);
        }
    }
}
