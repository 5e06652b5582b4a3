//! `smartcon fleet --ray ADDRESS [--quick|--tiny] [-- EVALUATE FLAGS]`: `evaluate` (with
//! its Device Monitor probe of every target that has no profile yet) once on every node of
//! a Ray cluster, one task pinned to each node, on the node's own devices and `tmp:`; one
//! report with a table per host. The driver is python/smartcon_ray (see crate::ray); each
//! task runs `smartcon evaluate --fleet-host NODE_ID`, which prints the `fleet_host` record.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use crate::ray::{run_driver, RayArgs};

#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(flatten)]
    pub ray: RayArgs,
    /// evaluate --quick on every host (about 100 s each on 2 cores).
    #[arg(long, conflicts_with = "tiny")]
    pub quick: bool,
    /// evaluate --tiny on every host (seconds; a check that the fleet works, not a survey).
    #[arg(long)]
    pub tiny: bool,
    /// The report directory (must not exist or be empty).
    #[arg(long, default_value = "smartcon-report-fleet", value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: PathBuf,
    /// More evaluate flags for every host (e.g. --targets tmp:64m@/var/tmp --skip-polling).
    #[arg(last = true, value_name = "EVALUATE FLAGS")]
    pub evaluate: Vec<String>,
}

pub fn run(args: FleetArgs) -> Result<()> {
    // Claimed before anything runs (crate::paths).
    let out = crate::paths::out_dir("--out", &args.out)?;
    if args.ray.ray.is_none() {
        bail!("fleet runs on a Ray cluster: give --ray ADDRESS (host:port or auto; docs/distributed.md)");
    }
    for f in &args.evaluate {
        if ["--out", "--fleet-host", "--json"].contains(&f.as_str()) || f.starts_with("--out=") {
            bail!("fleet sets {f} for every host itself; leave it out of the evaluate flags");
        }
    }
    let mut evaluate = Vec::new();
    if args.quick {
        evaluate.push("--quick".to_string());
    }
    if args.tiny {
        evaluate.push("--tiny".to_string());
    }
    evaluate.extend(args.evaluate);
    run_driver("fleet", &args.ray, out, None, &evaluate)
}
