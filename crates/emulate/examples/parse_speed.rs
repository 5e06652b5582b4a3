//! Trace parsing alone, in records per second, for every format the readers take: a
//! generated trace of N records (default 2 M) per format is written to a temporary
//! directory, then read back with `TraceReader::open` in the replay's batches (no model).
//! Times are CPU time of the reading thread (the host is shared) and wall time; the best of
//! the passes is printed. Run:
//!
//! `cargo run --release -p smartcon-emulate --example parse_speed -- [RECORDS] [PASSES] [FORMAT...]`

use std::io::Write;
use std::time::Instant;

use smartcon_emulate::replay::{thread_cpu_ns, BATCH_IOS};
use smartcon_emulate::trace::{TraceFormat, TraceOptions, TraceReader};

/// `n` records of `format` (4 KiB to 128 KiB, 70% reads, two devices, about 100 k/s), as the
/// tools write them; blkparse has a queue, an issue and a completion line per request.
fn write_trace(format: TraceFormat, n: u64, out: &mut impl Write) -> std::io::Result<()> {
    match format {
        TraceFormat::FioV2 => out.write_all(b"fio version 2 iolog\n/dev/nvme0n1 add\n/dev/nvme1n1 add\n")?,
        TraceFormat::FioV3 => out.write_all(b"fio version 3 iolog\n0 /dev/nvme0n1 add\n")?,
        TraceFormat::Msr => out.write_all(b"Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n")?,
        _ => {}
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let (mut us, mut seq) = (1u64, 0u64);
    for _ in 0..n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let step = state % 20;
        us += step;
        let read = state % 10 < 7;
        let second = (state >> 8).is_multiple_of(4);
        let bytes = 4096u64 << ((state >> 12) % 6);
        let offset = (state >> 20) % (1 << 24) * 4096;
        match format {
            TraceFormat::Blkparse => {
                let (dev, pid) = if second { ("259,1", 4163) } else { ("259,0", 4162) };
                let rwbs = if read { "R" } else { "WS" };
                let (sector, count) = (offset / 512, bytes / 512);
                for (action, delay) in [("Q", 0), ("D", 1_200), ("C", 80_000)] {
                    seq += 1;
                    let t = us * 1_000 + delay;
                    let (s, ns) = (t / 1_000_000_000, t % 1_000_000_000);
                    let who = if action == "C" { "[0]".to_string() } else { "[fio]".to_string() };
                    writeln!(
                        out,
                        "{dev:>5} {:>4} {seq:>8} {s:>5}.{:09} {pid:>5}  {action} {rwbs:>3} {sector} + {count} {who}",
                        seq % 2,
                        ns,
                    )?;
                }
            }
            TraceFormat::FioV2 => {
                let file = if second { "/dev/nvme1n1" } else { "/dev/nvme0n1" };
                if step > 12 {
                    writeln!(out, "{file} wait {step}")?;
                }
                writeln!(out, "{file} {} {offset} {bytes}", if read { "read" } else { "write" })?;
            }
            TraceFormat::FioV3 => {
                let file = if second { "/dev/nvme1n1" } else { "/dev/nvme0n1" };
                writeln!(out, "{us} {file} {} {offset} {bytes}", if read { "read" } else { "write" })?;
            }
            TraceFormat::Msr => writeln!(
                out,
                "{},hm,{},{},{offset},{bytes},{}",
                128_166_372_000_000_000 + us * 10,
                u8::from(second),
                if read { "Read" } else { "Write" },
                1398 + step * 37
            )?,
            TraceFormat::Alibaba => writeln!(
                out,
                "{},{},{offset},{bytes},{}",
                if second { 7 } else { 419 },
                if read { 'R' } else { 'W' },
                1_577_808_000_000_000 + us
            )?,
            TraceFormat::Tencent => writeln!(
                out,
                "{},{},{},{},{}",
                1_538_323_200 + us / 1_000,
                offset / 512,
                bytes / 512,
                u8::from(!read),
                if second { 27 } else { 1283 }
            )?,
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(2_000_000, |a| a.parse().expect("RECORDS"));
    let passes: usize = args.get(1).map_or(3, |a| a.parse().expect("PASSES"));
    let formats: Vec<TraceFormat> = if args.len() > 2 {
        args[2..].iter().map(|a| TraceFormat::parse(a).expect("a format name")).collect()
    } else {
        TraceFormat::ALL.to_vec()
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    println!("format         records   lines      MB     best M records/s (CPU)  (wall)   passes");
    for format in formats {
        let path = dir.path().join(format!("trace.{}", format.name()));
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        write_trace(format, n, &mut file).expect("write");
        file.flush().expect("flush");
        drop(file);
        let size = std::fs::metadata(&path).expect("metadata").len();
        let (mut best_cpu, mut best_wall, mut ios, mut lines) = (f64::MAX, f64::MAX, 0, 0);
        for _ in 0..passes {
            let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
            let options = TraceOptions { format: Some(format), ..TraceOptions::default() };
            let mut reader = TraceReader::open(&path, options).expect("open");
            let (mut batch, mut sum) = (Vec::with_capacity(BATCH_IOS), 0u64);
            loop {
                reader.next_batch(&mut batch, BATCH_IOS).expect("parse");
                if batch.is_empty() {
                    break;
                }
                sum = sum.wrapping_add(batch.iter().map(|io| io.offset ^ io.arrival_ns).sum::<u64>());
            }
            std::hint::black_box(sum);
            best_cpu = best_cpu.min((thread_cpu_ns() - cpu0) as f64 / 1e9);
            best_wall = best_wall.min(wall0.elapsed().as_secs_f64());
            (ios, lines) = (reader.stats().ios, reader.stats().lines);
        }
        assert_eq!(ios, n, "{}: every generated record is an I/O", format.name());
        println!(
            "{:<13} {:>8} {:>8} {:>7.0} {:>12.2} {:>20.2} {:>8}",
            format.name(),
            ios,
            lines,
            size as f64 / 1e6,
            ios as f64 / best_cpu / 1e6,
            ios as f64 / best_wall / 1e6,
            passes
        );
        std::fs::remove_file(&path).expect("remove");
    }
}
