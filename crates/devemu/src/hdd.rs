//! Hard-disk mechanics: seek by distance, rotational position as a function of time, zoned
//! transfer rates.
//!
//! - Seek: the datasheet gives three figures per op (single-track, average and full-stroke
//!   seek). Short seeks are dominated by acceleration, so time grows with the square root
//!   of the distance; long seeks coast at top speed, so time grows linearly (Ruemmler and
//!   Wilkes, "An introduction to disk drive modeling", IEEE Computer 1994). The curve goes
//!   through all three figures: square root from 1 cylinder (single-track) to one third of
//!   the stroke (where the average seek lies: the mean distance between two uniformly random
//!   cylinders is a third of the stroke), linear from there to the full stroke.
//! - Rotation: the platter angle is `t mod revolution`; a sector's angle is its offset within
//!   its track. After the seek the head waits until the sector comes under it.
//! - Transfer: at the zone's media rate, falling linearly from the outer zone to the inner.
//! - A sequential continuation (the request starts where the head's last transfer ended, and
//!   starts when that transfer finished) pays neither seek nor rotation.
//!
//! The emulated capacity (1 GiB by default) is stretched over the whole stroke, so random
//! requests over the emulated span see the datasheet's average seek, as a full-disk random
//! workload would. Non-goals: head and cylinder switches inside a transfer, on-disk caches,
//! command queue reordering inside the drive (the device's queue discipline does that).

use serde::Serialize;

use crate::model::Op;

/// Single-track, average and full-stroke seek of one op, from a datasheet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SeekCurve {
    pub track_to_track_ns: u64,
    pub average_ns: u64,
    pub full_stroke_ns: u64,
}

impl SeekCurve {
    /// Seek time over `distance` cylinders of `cylinders` (0 for no move).
    pub fn seek_ns(&self, distance: u64, cylinders: u64) -> u64 {
        if distance == 0 {
            return 0;
        }
        let full = cylinders.saturating_sub(1).max(2);
        let knee = (full / 3).max(2);
        let d = distance.min(full);
        let ns = if d <= knee {
            let frac = ((d - 1) as f64 / (knee - 1) as f64).sqrt();
            self.track_to_track_ns as f64 + (self.average_ns as f64 - self.track_to_track_ns as f64) * frac
        } else {
            let frac = (d - knee) as f64 / (full - knee) as f64;
            self.average_ns as f64 + (self.full_stroke_ns as f64 - self.average_ns as f64) * frac
        };
        ns.round() as u64
    }
}

/// A drive's mechanics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HddGeometry {
    pub cylinders: u64,
    pub rpm: u64,
    pub read_seek: SeekCurve,
    pub write_seek: SeekCurve,
    /// Media rate of the outermost zone and of the innermost.
    pub outer_rate_bytes_per_s: u64,
    pub inner_rate_bytes_per_s: u64,
    pub zones: u64,
    /// Controller command overhead paid by every request that is not a continuation.
    pub overhead_ns: u64,
}

/// Where a head (one per channel) is and what it last did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadState {
    pub cylinder: u64,
    /// The byte after the last transfer, and the instant that transfer ended (None before
    /// the first request).
    pub last_end: Option<(u64, u64)>,
}

impl HddGeometry {
    pub fn revolution_ns(&self) -> u64 {
        60_000_000_000 / self.rpm
    }

    pub fn cylinder_of(&self, offset: u64, capacity_bytes: u64) -> u64 {
        ((offset as u128 * self.cylinders as u128) / capacity_bytes.max(1) as u128).min(self.cylinders as u128 - 1)
            as u64
    }

    pub fn zone_rate_bytes_per_s(&self, cylinder: u64) -> u64 {
        let zone = cylinder * self.zones / self.cylinders;
        let span = self.outer_rate_bytes_per_s - self.inner_rate_bytes_per_s;
        self.outer_rate_bytes_per_s - span * zone / (self.zones - 1).max(1)
    }

    fn seek(&self, op: Op) -> &SeekCurve {
        match op {
            Op::Read => &self.read_seek,
            Op::Write => &self.write_seek,
        }
    }

    /// The same drive `s` times faster: seeks, overhead and a turn take 1/s, media rates x s.
    pub fn scaled(&self, s: f64) -> HddGeometry {
        if s == 1.0 {
            return *self;
        }
        let t = |ns: u64| ((ns as f64 / s).round() as u64).max(1);
        let c = |c: &SeekCurve| SeekCurve {
            track_to_track_ns: t(c.track_to_track_ns),
            average_ns: t(c.average_ns),
            full_stroke_ns: t(c.full_stroke_ns),
        };
        HddGeometry {
            rpm: ((self.rpm as f64 * s).round() as u64).max(1),
            read_seek: c(&self.read_seek),
            write_seek: c(&self.write_seek),
            outer_rate_bytes_per_s: ((self.outer_rate_bytes_per_s as f64 * s).round() as u64).max(1),
            inner_rate_bytes_per_s: ((self.inner_rate_bytes_per_s as f64 * s).round() as u64).max(1),
            overhead_ns: t(self.overhead_ns),
            ..*self
        }
    }

    /// Service time of a request that starts at `start_ns`; moves the head.
    pub fn service_ns(
        &self,
        op: Op,
        offset: u64,
        bytes: u64,
        start_ns: u64,
        capacity_bytes: u64,
        head: &mut HeadState,
    ) -> u64 {
        let cylinder = self.cylinder_of(offset, capacity_bytes);
        let rate = self.zone_rate_bytes_per_s(cylinder);
        let transfer_ns = (bytes as u128 * 1_000_000_000).div_ceil(rate as u128) as u64;
        let continuation = head.last_end == Some((offset, start_ns));
        let service = if continuation {
            transfer_ns
        } else {
            let seek = self.seek(op).seek_ns(cylinder.abs_diff(head.cylinder), self.cylinders);
            let rev = self.revolution_ns();
            let track_bytes = (rate as u128 * rev as u128 / 1_000_000_000).max(1) as u64;
            let sector_angle_ns = ((offset % track_bytes) as u128 * rev as u128 / track_bytes as u128) as u64;
            let ready = start_ns + self.overhead_ns + seek;
            let rotation = (sector_angle_ns + rev - ready % rev) % rev;
            self.overhead_ns + seek + rotation + transfer_ns
        };
        head.cylinder = cylinder;
        head.last_end = Some((offset + bytes, start_ns + service));
        service
    }

    /// The service a random request costs on average: overhead, average seek, half a turn
    /// and the transfer at the middle zone's rate. For listings and threshold rules.
    pub fn nominal_service_ns(&self, op: Op, bytes: u64) -> u64 {
        let rate = (self.outer_rate_bytes_per_s + self.inner_rate_bytes_per_s) / 2;
        let transfer_ns = (bytes as u128 * 1_000_000_000).div_ceil(rate as u128) as u64;
        self.overhead_ns + self.seek(op).average_ns + self.revolution_ns() / 2 + transfer_ns
    }
}

/// Hitachi Deskstar 7K320 (7200 rpm) OEM specification, Sec. 4.4.2: average seek 12 ms,
/// full stroke 20.0 ms read / 22.0 ms write, single track 1.0 ms read / 1.1 ms write, 8.3 ms
/// per revolution. The specification quotes one average for both ops; writes take the read
/// average plus the write settle difference of its single-track figures (0.1 ms). Media rate:
/// 160 MB/s outer (the previous emu:hdd figure, Seagate Barracuda 7200) falling to 80 MB/s
/// inner (zoned recording halves the rate from outer to inner diameter on drives of that
/// generation). 90,000 cylinders and 16 zones are assumptions the datasheet does not give;
/// only the seek curve's shape depends on them. 0.1 ms controller overhead (same source
/// family's command overhead class).
pub const DESKSTAR_7K320: HddGeometry = HddGeometry {
    cylinders: 90_000,
    rpm: 7_200,
    read_seek: SeekCurve { track_to_track_ns: 1_000_000, average_ns: 12_000_000, full_stroke_ns: 20_000_000 },
    write_seek: SeekCurve { track_to_track_ns: 1_100_000, average_ns: 12_100_000, full_stroke_ns: 22_000_000 },
    outer_rate_bytes_per_s: 160_000_000,
    inner_rate_bytes_per_s: 80_000_000,
    zones: 16,
    overhead_ns: 100_000,
};

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1 << 30;

    #[test]
    fn seek_curve_passes_through_the_datasheet_figures() {
        let c = DESKSTAR_7K320.read_seek;
        let n = DESKSTAR_7K320.cylinders;
        assert_eq!(c.seek_ns(0, n), 0);
        assert_eq!(c.seek_ns(1, n), 1_000_000);
        assert_eq!(c.seek_ns((n - 1) / 3, n), 12_000_000);
        assert_eq!(c.seek_ns(n - 1, n), 20_000_000);
        // Square root below the knee: a quarter of the knee distance costs about half of the
        // rise, well above a linear quarter.
        let quarter = c.seek_ns((n - 1) / 12, n);
        assert!((6_000_000..7_000_000).contains(&quarter), "{quarter}");
        // Monotone.
        let mut prev = 0;
        for d in (0..n).step_by(997) {
            let s = c.seek_ns(d, n);
            assert!(s >= prev);
            prev = s;
        }
    }

    #[test]
    fn rotation_depends_on_time_and_continuations_skip_it() {
        let g = DESKSTAR_7K320;
        let rev = g.revolution_ns();
        let mut head = HeadState::default();
        // Cylinder 0, same cylinder as the head: no seek, only overhead + rotation + transfer.
        let a = g.service_ns(Op::Read, 0, 4096, 0, CAP, &mut head);
        let transfer = (4096u128 * 1_000_000_000).div_ceil(160_000_000) as u64;
        // Sector at angle 0; ready at 0.1 ms: waits for the rest of the turn.
        assert_eq!(a, g.overhead_ns + (rev - g.overhead_ns) + transfer);
        // A continuation right at the end: transfer only.
        let b = g.service_ns(Op::Read, 4096, 4096, a, CAP, &mut head);
        assert_eq!(b, transfer);
        // The same request after an idle gap pays overhead and rotation again, and the
        // rotation depends on the start instant.
        let mut h1 = head;
        let mut h2 = head;
        let c1 = g.service_ns(Op::Read, 8192, 4096, a + b + 1_000_000, CAP, &mut h1);
        let c2 = g.service_ns(Op::Read, 8192, 4096, a + b + 3_000_000, CAP, &mut h2);
        assert!(c1 > transfer && c2 > transfer);
        assert_eq!(c1 - c2, 2_000_000);
    }

    #[test]
    fn zones_slow_down_inward_and_nominal_matches_the_average() {
        let g = DESKSTAR_7K320;
        assert_eq!(g.zone_rate_bytes_per_s(0), 160_000_000);
        assert_eq!(g.zone_rate_bytes_per_s(g.cylinders - 1), 80_000_000);
        let nominal = g.nominal_service_ns(Op::Read, 4096);
        assert!((16_000_000..16_500_000).contains(&nominal), "{nominal}");
    }
}
