//! SVG charts for reports: line charts (optionally log-scaled) and grouped bar charts.
//!
//! One small API so every subcommand's plots look alike: a title, axis labels with units,
//! a legend, and series names that say what a reader needs without the text around it.
//! Text is written as SVG <text> elements, so no fonts are needed at build time.

use std::path::Path;

use plotters::prelude::*;

use crate::{Error, ErrorKind, Result};

/// One named curve.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart's frame.
#[derive(Debug, Clone)]
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    /// Vertical marker lines with a label (for example "busy-waiting stops paying").
    pub markers: Vec<(f64, String)>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The colour of the n-th series, so tables and plots can refer to the same order.
pub fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        low = low.min(v);
        high = high.max(v);
    }
    if !low.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (low / 1.5, high * 1.5)
    } else {
        let pad = ((high - low) * 0.05).max(high.abs() * 0.05).max(1e-9);
        (if low >= 0.0 { 0.0f64.min(low) } else { low - pad }, high + pad)
    }
}

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::new(ErrorKind::Io, format!("cannot draw the plot: {e}"))
}

/// The path into a plot's error, which plotters does not know.
fn named(path: &Path, result: Result<()>) -> Result<()> {
    result.map_err(|e| Error::new(e.kind, format!("{}: {}", smartcon_util::paths::escape(path), e.message)))
}

/// Draws a line chart with points to `path` (an .svg file).
pub fn line_chart(path: &Path, chart: &LineChart<'_>, series: &[Series]) -> Result<()> {
    named(path, line_chart_unnamed(path, chart, series))
}

fn line_chart_unnamed(path: &Path, chart: &LineChart<'_>, series: &[Series]) -> Result<()> {
    let (x0, x1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)), chart.log_x);
    let (y0, y1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), chart.log_y);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(chart.title, ("sans-serif", 22)).margin(16).x_label_area_size(48).y_label_area_size(72);
    // The four scale combinations are four different types in plotters.
    macro_rules! draw {
        ($xr:expr, $yr:expr) => {{
            let mut c = builder.build_cartesian_2d($xr, $yr).map_err(err)?;
            c.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            for (i, s) in series.iter().enumerate() {
                let col = color(i);
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| {
                        x.is_finite() && y.is_finite() && (!chart.log_x || *x > 0.0) && (!chart.log_y || *y > 0.0)
                    })
                    .collect();
                c.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
                    .map_err(err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3)));
                c.draw_series(pts.iter().map(|p| Circle::new(*p, 3, col.filled()))).map_err(err)?;
            }
            for (x, label) in &chart.markers {
                let style = ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(1);
                c.draw_series(std::iter::once(PathElement::new(vec![(*x, y0), (*x, y1)], style))).map_err(err)?;
                c.draw_series(std::iter::once(Text::new(label.clone(), (*x, y1), ("sans-serif", 13).into_font())))
                    .map_err(err)?;
            }
            c.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(err)?;
        }};
    }
    match (chart.log_x, chart.log_y) {
        (false, false) => draw!(x0..x1, y0..y1),
        (true, false) => draw!((x0..x1).log_scale(), y0..y1),
        (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
        (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A grouped bar chart: one group per category, one bar per series in each group.
#[derive(Debug, Clone)]
pub struct BarChart<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub categories: Vec<String>,
    /// (series name, one value per category)
    pub series: Vec<(String, Vec<f64>)>,
    /// A horizontal reference line (for example 1.0 for "same as block").
    pub reference: Option<f64>,
}

/// Draws a grouped bar chart to `path`.
pub fn bar_chart(path: &Path, chart: &BarChart<'_>) -> Result<()> {
    named(path, bar_chart_unnamed(path, chart))
}

fn bar_chart_unnamed(path: &Path, chart: &BarChart<'_>) -> Result<()> {
    let groups = chart.categories.len().max(1);
    let bars = chart.series.len().max(1);
    let mut high =
        chart.series.iter().flat_map(|s| s.1.iter().copied()).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if let Some(r) = chart.reference {
        high = high.max(r);
    }
    let high = if high > 0.0 { high * 1.12 } else { 1.0 };
    let width = (160 + groups * (bars * 22 + 24)).max(700) as u32;
    let root = SVGBackend::new(path, (width, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let slots = groups * (bars + 1);
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(70)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..slots as f64, 0f64..high)
        .map_err(err)?;
    let categories = chart.categories.clone();
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(slots * 2)
        .x_label_formatter(&move |x| {
            let slot = x.floor() as usize;
            let group = slot / (bars + 1);
            let within = slot % (bars + 1);
            // The whole slot nearest the group's centre: the ticks fall on whole and half
            // slots, so with an odd number of bars the exact centre (a half slot past a
            // quarter) may get no tick and the category would go unlabelled.
            let centre = (bars / 2) as f64;
            if (x - (group * (bars + 1)) as f64 - centre).abs() < 0.26 && within < bars + 1 {
                categories.get(group).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (i, (name, values)) in chart.series.iter().enumerate() {
        let col = color(i);
        c.draw_series(values.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(g, v)| {
            let x = (g * (bars + 1) + i) as f64;
            Rectangle::new([(x + 0.08, 0.0), (x + 0.92, *v)], col.filled())
        }))
        .map_err(err)?
        .label(name.clone())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], col.filled()));
    }
    if let Some(r) = chart.reference {
        c.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, r), (slots as f64, r)],
            ShapeStyle::from(&BLACK).stroke_width(1),
        )))
        .map_err(err)?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A scatter chart's frame: points only, with reference lines.
#[derive(Debug, Clone)]
pub struct ScatterChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Vertical reference lines with a label (for example x = 1, "same as smart").
    pub x_refs: Vec<(f64, String)>,
    /// Horizontal reference lines with a label.
    pub y_refs: Vec<(f64, String)>,
    /// A region from this corner to the top right, shaded and labelled (for example where
    /// a point beats the reference on both axes).
    pub shade: Option<((f64, f64), String)>,
}

/// Draws one point per (x, y), a colour and shape per series, to `path`.
pub fn scatter_chart(path: &Path, chart: &ScatterChart<'_>, series: &[Series]) -> Result<()> {
    named(path, scatter_chart_unnamed(path, chart, series))
}

fn scatter_chart_unnamed(path: &Path, chart: &ScatterChart<'_>, series: &[Series]) -> Result<()> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).chain(chart.x_refs.iter().map(|r| r.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(chart.y_refs.iter().map(|r| r.0));
    let (x0, x1) = padded(xs);
    let (y0, y1) = padded(ys);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    if let Some(((x, y), label)) = &chart.shade {
        let corner = (x.max(x0), y.max(y0));
        if corner.0 < x1 && corner.1 < y1 {
            let fill = RGBColor(214, 39, 40).mix(0.08).filled();
            c.draw_series(std::iter::once(Rectangle::new([corner, (x1, y1)], fill))).map_err(err)?;
            let at = (corner.0 + (x1 - corner.0) * 0.05, y1 - (y1 - corner.1) * 0.1);
            c.draw_series(std::iter::once(Text::new(label.clone(), at, ("sans-serif", 14).into_font())))
                .map_err(err)?;
        }
    }
    let line = ShapeStyle::from(&BLACK.mix(0.5)).stroke_width(1);
    for (x, label) in &chart.x_refs {
        c.draw_series(std::iter::once(PathElement::new(vec![(*x, y0), (*x, y1)], line))).map_err(err)?;
        c.draw_series(std::iter::once(Text::new(label.clone(), (*x, y1), ("sans-serif", 13).into_font())))
            .map_err(err)?;
    }
    for (y, label) in &chart.y_refs {
        c.draw_series(std::iter::once(PathElement::new(vec![(x0, *y), (x1, *y)], line))).map_err(err)?;
        c.draw_series(std::iter::once(Text::new(label.clone(), (x0, *y), ("sans-serif", 13).into_font())))
            .map_err(err)?;
    }
    for (i, s) in series.iter().enumerate() {
        let col = color(i);
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        // Shapes differ per series too, so the picture reads without colour; the legend
        // shows the same shape (one macro arm per shape: each is its own type).
        macro_rules! points {
            ($shape:expr) => {
                c.draw_series(pts.iter().map(|p| $shape(*p)))
                    .map_err(err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| $shape((x + 8, y)))
            };
        }
        match i % 3 {
            0 => points!(|p| Circle::new(p, 4, col.filled())),
            1 => points!(|p| TriangleMarker::new(p, 5, col.filled())),
            _ => points!(|p| Cross::new(p, 4, col.stroke_width(2))),
        };
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A linear range around every finite value with 5% room on each side.
fn padded(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        low = low.min(v);
        high = high.max(v);
    }
    if !low.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((high - low) * 0.05).max(1e-3);
    (low - pad, high + pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_every_series_named() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-plot-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let line = dir.join("line.svg");
        let series = vec![
            Series { name: "block".into(), points: vec![(4096.0, 10.0), (65536.0, 20.0)] },
            Series { name: "spin".into(), points: vec![(4096.0, 5.0), (65536.0, 18.0)] },
        ];
        let chart = LineChart {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: false,
            markers: vec![(8192.0, "threshold".into())],
        };
        line_chart(&line, &chart, &series).unwrap();
        let text = std::fs::read_to_string(&line).unwrap();
        assert!(text.starts_with("<svg"));
        assert!(text.contains(">\nblock\n<") || text.contains("block"));
        assert!(text.contains("spin") && text.contains("threshold"));
        let bar = dir.join("bar.svg");
        bar_chart(
            &bar,
            &BarChart {
                title: "b",
                y_label: "gain",
                categories: vec!["4k".into(), "16k".into()],
                series: vec![("smart".into(), vec![1.2, 1.0]), ("spin".into(), vec![1.3, 1.01])],
                reference: Some(1.0),
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(&bar).unwrap();
        assert!(text.contains("smart") && text.contains("16k"));
        let scatter = dir.join("scatter.svg");
        let chart = ScatterChart {
            title: "s",
            x_label: "x",
            y_label: "y",
            x_refs: vec![(1.0, "same work".into())],
            y_refs: vec![(1.05, "5% more IOPS".into())],
            shade: Some(((0.97, 1.05), "dominates".into())),
        };
        let points = vec![Series { name: "spin".into(), points: vec![(0.98, 2.6), (1.0, 1.0), (f64::NAN, 1.0)] }];
        scatter_chart(&scatter, &chart, &points).unwrap();
        let text = std::fs::read_to_string(&scatter).unwrap();
        assert!(text.contains("spin") && text.contains("same work") && text.contains("5% more IOPS"));
        assert!(text.contains("dominates"), "the shaded region is labelled");
        assert!(text.matches("<circle").count() >= 2, "one point per finite cell");
    }
}

/// A grid of coloured, labelled cells: column groups side by side (each with its own
/// columns), one row per name. The verdict map is drawn with it.
#[derive(Debug, Clone)]
pub struct GridChart<'a> {
    pub title: &'a str,
    /// (group name, its column names), left to right.
    pub groups: Vec<(String, Vec<String>)>,
    pub rows: Vec<String>,
    /// Per row, per column over all groups: the fill and the label, or `None` (no cell).
    pub cells: Vec<Vec<Option<(RGBColor, String)>>>,
    /// Fill colours and what they mean.
    pub legend: Vec<(RGBColor, String)>,
}

/// Draws a grid chart to `path`.
pub fn grid_chart(path: &Path, chart: &GridChart<'_>) -> Result<()> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    // Sizes in pixels from the longest texts (about 7 px per character at 12 px).
    let chars = |s: &str| s.chars().count() as u32;
    let label_w = chart.rows.iter().map(|r| chars(r)).max().unwrap_or(8) * 7 + 16;
    let longest_cell = chart.cells.iter().flatten().flatten().map(|(_, l)| chars(l)).max().unwrap_or(5);
    let longest_col = chart.groups.iter().flat_map(|g| g.1.iter()).map(|c| chars(c)).max().unwrap_or(5);
    let col_w = (longest_cell.max(longest_col) * 7 + 12).max(70);
    let columns: u32 = chart.groups.iter().map(|g| g.1.len() as u32).sum();
    let (row_h, top, legend_h) = (22u32, 96u32, 34u32);
    let width = (label_w + columns * col_w + 24).max(640);
    let height = top + chart.rows.len() as u32 * row_h + legend_h + 16;
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let at = |x: u32, y: u32| (x as i32, y as i32);
    let text = |size: u32, h: HPos| TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(h, VPos::Center));
    root.draw(&Text::new(chart.title.to_string(), at(12, 18), text(18, HPos::Left))).map_err(err)?;
    let mut x = label_w;
    for (name, cols) in &chart.groups {
        let w = cols.len() as u32 * col_w;
        root.draw(&Text::new(name.clone(), at(x + w / 2, 50), text(15, HPos::Center))).map_err(err)?;
        for (i, c) in cols.iter().enumerate() {
            let cx = x + i as u32 * col_w + col_w / 2;
            root.draw(&Text::new(c.clone(), at(cx, 76), text(11, HPos::Center))).map_err(err)?;
        }
        root.draw(&PathElement::new(vec![at(x, 40), at(x, top + chart.rows.len() as u32 * row_h)], BLACK))
            .map_err(err)?;
        x += w;
    }
    for (r, name) in chart.rows.iter().enumerate() {
        let y = top + r as u32 * row_h;
        root.draw(&Text::new(name.clone(), at(8, y + row_h / 2), text(12, HPos::Left))).map_err(err)?;
        for (c, cell) in chart.cells.get(r).into_iter().flatten().enumerate() {
            let x = label_w + c as u32 * col_w;
            let (fill, label) = match cell {
                Some((fill, label)) => (*fill, label.clone()),
                None => (RGBColor(245, 245, 245), "-".to_string()),
            };
            root.draw(&Rectangle::new([at(x + 1, y + 1), at(x + col_w - 1, y + row_h - 1)], fill.filled()))
                .map_err(err)?;
            root.draw(&Text::new(label, at(x + col_w / 2, y + row_h / 2), text(12, HPos::Center))).map_err(err)?;
        }
    }
    let mut x = 12;
    let y = top + chart.rows.len() as u32 * row_h + legend_h / 2 + 8;
    for (fill, name) in &chart.legend {
        root.draw(&Rectangle::new([at(x, y - 7), at(x + 18, y + 7)], fill.filled())).map_err(err)?;
        root.draw(&Text::new(name.clone(), at(x + 24, y), text(12, HPos::Left))).map_err(err)?;
        x += 24 + chars(name) * 7 + 20;
    }
    root.present().map_err(err)?;
    Ok(())
}
