//! `smartcon devices`: the emulated presets, their parameters and where they come from.

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use smartcon_devemu::PRESETS;
use smartcon_emutarget::{emu::EmuTarget, target::Target};
use smartcon_util::units::{format_ns, format_size};
use smartcon_util::Op;

use crate::common::emit_json;
use crate::table::Table;

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// JSON Lines output (one "device" record per preset).
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct DeviceRecord {
    #[serde(rename = "type")]
    record_type: &'static str,
    name: String,
    summary: &'static str,
    source: &'static str,
    read_fixed_ns: u64,
    read_bw_bytes_per_s: u64,
    write_fixed_ns: u64,
    write_bw_bytes_per_s: u64,
    channels: u32,
    capacity_bytes: u64,
    read_4k_ns: u64,
    class: &'static str,
    size_threshold_bytes: u64,
}

pub fn run(args: DevicesArgs) -> Result<()> {
    let mut table = Table::new(&[
        "preset",
        "4k read",
        "4k write",
        "read bw",
        "write bw",
        "channels",
        "class",
        "size threshold",
        "what it is",
    ]);
    for p in PRESETS {
        let spec = smartcon_devemu::parse_spec(&format!("emu:{}", p.name)).expect("preset parses");
        let t = EmuTarget::new(spec)?;
        let prof = t.builtin_profile().expect("emulated devices have built-in profiles");
        let m = &p.model;
        if args.json {
            emit_json(&DeviceRecord {
                record_type: "device",
                name: format!("emu:{}", p.name),
                summary: p.summary,
                source: p.source,
                read_fixed_ns: m.read.fixed_ns,
                read_bw_bytes_per_s: m.read.bandwidth_bytes_per_s,
                write_fixed_ns: m.write.fixed_ns,
                write_bw_bytes_per_s: m.write.bandwidth_bytes_per_s,
                channels: m.channels,
                capacity_bytes: p.capacity_bytes,
                read_4k_ns: t.model_service_ns(Op::Read, 4096).unwrap_or(0),
                class: prof.class.name(),
                size_threshold_bytes: prof.size_threshold_bytes,
            })?;
        } else {
            table.row(vec![
                format!("emu:{}", p.name),
                format_ns(t.model_service_ns(Op::Read, 4096).unwrap_or(0) as f64),
                format_ns(t.model_service_ns(Op::Write, 4096).unwrap_or(0) as f64),
                format!("{:.0} MB/s", m.read.bandwidth_bytes_per_s as f64 / 1e6),
                format!("{:.0} MB/s", m.write.bandwidth_bytes_per_s as f64 / 1e6),
                m.channels.to_string(),
                prof.class.name().to_string(),
                // The size threshold only matters to a device decided per I/O.
                if prof.class == smartcon_engine::decision::DeviceClass::Fast {
                    format_size(prof.size_threshold_bytes)
                } else {
                    "-".into()
                },
                p.summary.to_string(),
            ]);
        }
    }
    if !args.json {
        print!("{}", table.render());
        println!("\nSources of the numbers:");
        for p in PRESETS {
            println!("  emu:{:<9} {}", p.name, p.source);
        }
        println!("\nOverride any parameter: emu:PRESET,key=value,... with keys lat, read_lat, write_lat, bw, read_bw,");
        println!("write_bw, channels, size, poll_cost, speedup, queue, table (e.g. emu:sdcard,channels=4,speedup=2).");
        println!("Thresholds are computed from the model assuming a 20 us wake-up and 5 us of CPU per blocking I/O;");
        println!("`smartcon probe` measures them.");
    }
    Ok(())
}
