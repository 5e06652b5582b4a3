//! The engine's SmartPort over the emulated target: the same glue as on files, with every
//! strategy choice (moved here from the engine's unit tests when the emulated target left
//! the engine).

use std::sync::Arc;

use smartcon_emutarget::target;
use smartcon_engine::decision::Strategy;
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPortOptions, SmartTargetPort, StrategyChoice};

#[test]
fn an_emulated_target_goes_through_the_same_glue_with_every_choice() {
    let spec = target::parse_target("emu:optane,size=1m").unwrap();
    let target = target::open(&spec, target::OpenOptions::default()).unwrap();
    for name in StrategyChoice::names() {
        let choice = StrategyChoice::parse(name).unwrap();
        let options = SmartPortOptions {
            strategy: choice,
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("test")),
            ..Default::default()
        };
        let mut port = SmartTargetPort::on_target(target.as_ref(), options).unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(port.write_at(&[5u8; 4096], 8192).unwrap(), 4096, "{name}");
        assert_eq!(port.read_at(&mut buf, 8192).unwrap(), 4096, "{name}");
        assert!(buf.iter().all(|&b| b == 5), "{name}");
        // Past the end of the device: a short read, then nothing.
        assert_eq!(port.read_at(&mut buf, (1 << 20) - 512).unwrap(), 512, "{name}");
        assert_eq!(port.read_at(&mut buf, 1 << 20).unwrap(), 0, "{name}");
        let c = port.finish();
        assert_eq!(c.ios, 4, "{name}");
        // smart-hybrid's first waits of a size block to measure (smartcon_engine::learn): only a
        // fixed choice is sure to poll in four I/Os.
        if matches!(choice, StrategyChoice::Fixed(_)) || !choice.polls() {
            assert_eq!(c.polled_ios > 0, choice.polls(), "{name}: polls exactly when its choice polls");
        }
        if let StrategyChoice::Fixed(f) = choice {
            assert_eq!(c.by_strategy[f.index()], 4, "{name}");
        } else {
            assert_eq!(c.by_reason.iter().sum::<u64>(), 4, "{name}: every I/O was decided");
        }
    }
}

#[test]
fn paper_takes_the_class_the_device_type_declares_whatever_the_profile_measured() {
    use smartcon_engine::decision::{DeviceClass, Reason};
    for (spec, strategy, reason) in [
        ("emu:nvram,size=1m", Strategy::Sync, Reason::VeryFastDevice),
        ("emu:hdd,size=1m", Strategy::Block, Reason::MainstreamDevice),
        ("emu:optane,size=1m", Strategy::Spin, Reason::CpuAvailable),
    ] {
        let target = target::open(&target::parse_target(spec).unwrap(), Default::default()).unwrap();
        // A profile that measured every device fast, and a machine that reads idle.
        let profile = Profile { class: DeviceClass::Fast, ..Profile::paper_default("test") };
        let options = SmartPortOptions {
            strategy: StrategyChoice::Paper,
            profile: Some(profile),
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            ..Default::default()
        };
        let mut port = SmartTargetPort::on_target(target.as_ref(), options).unwrap();
        let mut buf = vec![0u8; 4096];
        port.read_at(&mut buf, 0).unwrap();
        let c = port.finish();
        assert_eq!((c.by_strategy[strategy.index()], c.by_reason[reason.index()]), (1, 1), "{spec}");
    }
}

#[test]
fn a_reference_block_wait_replaces_the_kernel_wake_up_and_nothing_else() {
    use smartcon_engine::clock::now_ns;
    use smartcon_engine::smartport::BlockWait;
    // paper blocks on a device whose type is declared mainstream (the test above).
    for (spec, choice, block_wait, reference_waits) in [
        ("emu:nvme,size=1m", StrategyChoice::Fixed(Strategy::Block), BlockWait::Reference, 4),
        ("emu:nvme,size=1m", StrategyChoice::Fixed(Strategy::Block), BlockWait::Kernel, 0),
        ("emu:nvme,size=1m", StrategyChoice::Fixed(Strategy::Spin), BlockWait::Reference, 0),
        ("emu:nvme,size=1m", StrategyChoice::Fixed(Strategy::Hybrid), BlockWait::Reference, 0),
        ("emu:hdd,size=1m", StrategyChoice::Paper, BlockWait::Reference, 4),
    ] {
        let target = target::open(&target::parse_target(spec).unwrap(), Default::default()).unwrap();
        let options = SmartPortOptions {
            strategy: choice,
            block_wait,
            monitor: Some(Arc::new(SystemMonitor::fixed(0))),
            profile: Some(Profile::paper_default("test")),
            ..Default::default()
        };
        let mut port = SmartTargetPort::on_target(target.as_ref(), options).unwrap();
        assert_eq!(port.block_wait(), block_wait);
        let mut buf = vec![0u8; 4096];
        for i in 0..4 {
            if i % 2 == 0 {
                port.write_at(&[3u8; 4096], i * 4096).unwrap();
            } else {
                port.read_at(&mut buf, (i - 1) * 4096).unwrap();
                assert!(buf.iter().all(|&b| b == 3), "{spec} {choice:?} {block_wait:?}");
            }
            // Whatever the wait, the thread has control back no earlier than the model's instant.
            assert!(port.last_seen_ns() >= port.last_done_ns(), "{spec} {choice:?} {block_wait:?}");
            assert!(now_ns() >= port.last_seen_ns());
        }
        let c = port.finish();
        let name = choice.name();
        assert_eq!(c.ios, 4, "{spec} {name}");
        assert_eq!(c.reference_waits, reference_waits, "{spec} {name} {block_wait:?}");
        // Only `block` I/Os are waited for the reference way.
        assert!(c.reference_waits <= c.by_strategy[Strategy::Block.index()], "{spec} {name}");
    }
}
