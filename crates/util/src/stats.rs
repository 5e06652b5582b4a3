//! Summary statistics of a small sample (turns of a benchmark, runs of a probe).

/// The mean; `None` for an empty sample.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The mean and the population standard deviation; `None` for an empty sample.
pub fn mean_sd(values: &[f64]) -> Option<(f64, f64)> {
    let m = mean(values)?;
    let var = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len() as f64;
    Some((m, var.sqrt()))
}

/// The mean and the sample standard deviation (n - 1); `None` with fewer than two values.
pub fn mean_sample_sd(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values)?;
    let var = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64;
    Some((m, var.sqrt()))
}

/// The median (the mean of the middle two for an even count); sorts `values` in place;
/// 0 for an empty sample.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Student's t quantile for a two-sided 90% interval (the 95th percentile) with `df`
/// degrees of freedom; the normal 1.645 beyond 30.
pub fn t90(df: usize) -> f64 {
    const T: [f64; 30] = [
        6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753, 1.746,
        1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= T.len() => T[d - 1],
        _ => 1.645,
    }
}

/// Student's t quantile for a two-sided 95% interval (the 97.5th percentile) with `df`
/// degrees of freedom; 1.96 beyond 30 (2.04 at 30 and falling).
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= T.len() => T[d - 1],
        _ => 1.96,
    }
}

/// The mean and the half-width of its two-sided 95% interval (Student's t on the sample
/// standard deviation); `None` with fewer than two values.
pub fn mean_ci95(values: &[f64]) -> Option<(f64, f64)> {
    let (m, sd) = mean_sample_sd(values)?;
    Some((m, t95(values.len() - 1) * sd / (values.len() as f64).sqrt()))
}

/// A ratio of two things measured in the same rounds, taken round by round: round `i` of
/// both shared the machine's state, so a swing that hits both alike cancels in their ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedRatio {
    /// Rounds with both figures positive.
    pub rounds: usize,
    /// The geometric mean of the per-round ratios.
    pub gmean: f64,
    /// The two-sided 90% interval of the geometric mean (Student's t on the log ratios).
    /// With one round there is no yardstick: both ends are the ratio itself.
    pub lo: f64,
    pub hi: f64,
}

impl PairedRatio {
    /// `a[i] / b[i]` over the rounds where both are positive; `None` if there is none.
    pub fn of(a: &[f64], b: &[f64]) -> Option<PairedRatio> {
        let logs: Vec<f64> =
            a.iter().zip(b).filter(|(x, y)| **x > 0.0 && **y > 0.0).map(|(x, y)| (x / y).ln()).collect();
        let m = mean(&logs)?;
        let half = match mean_sample_sd(&logs) {
            Some((_, sd)) => t90(logs.len() - 1) * sd / (logs.len() as f64).sqrt(),
            None => 0.0,
        };
        Some(PairedRatio { rounds: logs.len(), gmean: m.exp(), lo: (m - half).exp(), hi: (m + half).exp() })
    }

    /// At least `bound` and surely above 1: the geometric mean is `>= bound` and the lower
    /// end of the interval is above 1.
    pub fn surely_at_least(&self, bound: f64) -> bool {
        self.gmean >= bound && self.lo > 1.0
    }
}

/// How far rounds swing for every strategy alike: per round, the geometric mean over the
/// strategies of each one's figure over its own geometric mean across rounds; then (max -
/// min) / median of those round factors. `turns[s][r]` is strategy `s`'s figure in round
/// `r`; rounds where any strategy has no positive figure are left out. 0 with fewer than
/// two such rounds.
pub fn common_swing(turns: &[Vec<f64>]) -> f64 {
    let rounds = turns.iter().map(Vec::len).min().unwrap_or(0);
    let usable: Vec<usize> = (0..rounds).filter(|&r| turns.iter().all(|t| t[r] > 0.0)).collect();
    if usable.len() < 2 || turns.is_empty() {
        return 0.0;
    }
    let own: Vec<f64> =
        turns.iter().map(|t| usable.iter().map(|&r| t[r].ln()).sum::<f64>() / usable.len() as f64).collect();
    let mut factors: Vec<f64> = usable
        .iter()
        .map(|&r| (turns.iter().zip(&own).map(|(t, o)| t[r].ln() - o).sum::<f64>() / turns.len() as f64).exp())
        .collect();
    let med = median(&mut factors);
    (factors[factors.len() - 1] - factors[0]) / med
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_known_samples() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
        let (m, sd) = mean_sample_sd(&[1.0, 3.0]).unwrap();
        assert_eq!((m, sd), (2.0, 2.0f64.sqrt()));
        assert_eq!(mean_sample_sd(&[5.0]), None);
        let (m, sd) = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!((m, sd), (5.0, 2.0));
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn paired_ratios_cancel_a_common_swing() {
        // Both halve and double together: every round's ratio is 1.1, so the interval is
        // tight around 1.1 although each side's turns range over 4x.
        let b = [100.0, 50.0, 200.0, 100.0];
        let a: Vec<f64> = b.iter().map(|x| x * 1.1).collect();
        let p = PairedRatio::of(&a, &b).unwrap();
        assert_eq!(p.rounds, 4);
        assert!((p.gmean - 1.1).abs() < 1e-9 && (p.lo - 1.1).abs() < 1e-9, "{p:?}");
        assert!(p.surely_at_least(1.05));
        // Ratios that straddle 1: not surely above it.
        let p = PairedRatio::of(&[110.0, 90.0, 112.0, 95.0], &[100.0; 4]).unwrap();
        assert!(p.lo < 1.0 && p.hi > 1.0 && !p.surely_at_least(1.0), "{p:?}");
        // One round: the ratio itself, no interval.
        let p = PairedRatio::of(&[120.0], &[100.0]).unwrap();
        assert_eq!((p.rounds, p.lo, p.hi), (1, p.gmean, p.gmean));
        // Rounds with a zero are left out; none left is None.
        assert_eq!(PairedRatio::of(&[0.0, 5.0], &[1.0, 0.0]), None);
        assert_eq!(t90(0), f64::INFINITY);
        assert_eq!(t90(1), 6.314);
        assert_eq!(t90(100), 1.645);
        assert_eq!((t95(0), t95(1), t95(200)), (f64::INFINITY, 12.706, 1.96));
        // Two values 1 and 3: mean 2, sd sqrt(2), half-width 12.706 * sqrt(2) / sqrt(2).
        let (m, half) = mean_ci95(&[1.0, 3.0]).unwrap();
        assert!((m - 2.0).abs() < 1e-12 && (half - 12.706).abs() < 1e-9, "{m} {half}");
        assert_eq!(mean_ci95(&[1.0]), None);
    }

    #[test]
    fn the_common_swing_is_what_all_strategies_share() {
        // Two strategies, rounds swinging 2x together: the swing is 1 ((2 - 1) / 1).
        let s = common_swing(&[vec![100.0, 200.0, 100.0], vec![50.0, 100.0, 50.0]]);
        assert!((s - 1.0).abs() < 1e-9, "{s}");
        // Opposite swings cancel: nothing common.
        let s = common_swing(&[vec![100.0, 200.0], vec![200.0, 100.0]]);
        assert!(s.abs() < 1e-9, "{s}");
        assert_eq!(common_swing(&[vec![1.0]]), 0.0);
        assert_eq!(common_swing(&[]), 0.0);
    }
}
