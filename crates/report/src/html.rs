//! `report.html`: a report folder's summary and every plot in one self-contained page.
//!
//! The page is a first screen the caller writes (for evaluate: the paired headline, the
//! host's figures and the verdict map), then the summary's sections folded into
//! `<details>`, the plots, and a bottom part for long lists.
//!
//! The summary (summary.md) is turned into HTML by a tiny renderer for the subset smartcon
//! writes: `#`/`##`/`###` headings, paragraphs, `- ` lists, fenced code blocks, pipe tables,
//! and inline `code` and **bold**. Each SVG plot is inlined (no external files, so the page
//! can be mailed or attached to CI) with a caption saying which figure of the paper it
//! reproduces and what to look for. Non-goals: general Markdown (links, nesting, emphasis
//! with `_`), JavaScript, or any dependency beyond std.

use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// Inline markup: `code` spans first (their content is literal), then **bold**.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let ticks = text.matches('`').count();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 && i < ticks {
            out.push_str(&format!("<code>{}</code>", escape(part)));
        } else {
            // An unmatched backtick (an odd count) stays as it was written.
            if i % 2 == 1 {
                out.push('`');
            }
            let mut bold = false;
            for (j, piece) in escape(part).split("**").enumerate() {
                if j > 0 {
                    out.push_str(if bold { "</strong>" } else { "<strong>" });
                    bold = !bold;
                }
                out.push_str(piece);
            }
            if bold {
                out.push_str("</strong>");
            }
        }
    }
    out
}

fn table_cells(line: &str) -> Vec<&str> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(str::trim).collect()
}

fn is_rule(line: &str) -> bool {
    let cells = table_cells(line);
    !cells.is_empty() && cells.iter().all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
}

/// Renders the Markdown subset described in the module header to an HTML fragment.
pub fn markdown(md: &str) -> String {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = String::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let flush = |paragraph: &mut Vec<&str>, out: &mut String| {
        if !paragraph.is_empty() {
            out.push_str(&format!("<p>{}</p>\n", inline(&paragraph.join(" "))));
            paragraph.clear();
        }
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            flush(&mut paragraph, &mut out);
            let mut code = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                code.push_str(lines[i]);
                code.push('\n');
                i += 1;
            }
            out.push_str(&format!("<pre><code>{}</code></pre>\n", escape(&code)));
        } else if let Some(level) = (1..=3).find(|&n| trimmed.starts_with(&format!("{} ", "#".repeat(n)))) {
            flush(&mut paragraph, &mut out);
            out.push_str(&format!("<h{level}>{}</h{level}>\n", inline(trimmed[level + 1..].trim())));
        } else if trimmed.starts_with('|') && i + 1 < lines.len() && is_rule(lines[i + 1]) {
            flush(&mut paragraph, &mut out);
            out.push_str("<table>\n<thead><tr>");
            for c in table_cells(trimmed) {
                out.push_str(&format!("<th>{}</th>", inline(c)));
            }
            out.push_str("</tr></thead>\n<tbody>\n");
            i += 2;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                out.push_str("<tr>");
                for c in table_cells(lines[i]) {
                    out.push_str(&format!("<td>{}</td>", inline(c)));
                }
                out.push_str("</tr>\n");
                i += 1;
            }
            out.push_str("</tbody>\n</table>\n");
            continue;
        } else if trimmed.starts_with("- ") {
            flush(&mut paragraph, &mut out);
            out.push_str("<ul>\n");
            while i < lines.len() && lines[i].trim_start().starts_with("- ") {
                out.push_str(&format!("<li>{}</li>\n", inline(&lines[i].trim_start()[2..])));
                i += 1;
            }
            out.push_str("</ul>\n");
            continue;
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut out);
        } else {
            paragraph.push(trimmed);
        }
        i += 1;
    }
    flush(&mut paragraph, &mut out);
    out
}

/// What a plot shows and what to look for, by its file name (the names evaluate writes).
pub fn caption(file_name: &str) -> String {
    let stem = file_name.trim_end_matches(".svg");
    let rest = |prefix: &str| stem.strip_prefix(prefix).unwrap_or(stem).to_string();
    if stem.starts_with("fig8-cpu-") {
        "Fig. 8: CPU of the I/O thread per strategy by request size, no load. Look for: spin and sync near \
             100% of one CPU, block far below; smart should pay spin's CPU only where spinning is faster."
            .into()
    } else if stem.starts_with("fig9-gain-") {
        "Fig. 9 (and 12, 15 under load): IOPS against block by request size. Look for: above 1.0 is faster \
             than block; smart should follow the better of block and spin, and fall back to block as sizes grow."
            .into()
    } else if stem.starts_with("fig10-csw-") {
        "Fig. 10: context switches per I/O, no load. Look for: block about one or more per I/O, spin and \
             sync near zero; smart's count says how often it chose to sleep."
            .into()
    } else if stem.starts_with("fig11-workloads-") {
        "Fig. 11 (13, 16): IOPS against block per workload, geometric mean over sizes. Look for: bars \
             above the 1.0 line; smart should not fall below block on any workload."
            .into()
    } else if stem == "table6-corunner" {
        "Table VI: the CPU benchmark's work rate beside each strategy, relative to beside block. Look for: below \
         1.0 means the strategy took CPU from the co-runner; smart should stay near block."
            .into()
    } else if stem == "verdict-map" {
        "Not in the paper: the verdict map, per load every target and (workload, size) cell by the paired \
         rule. Green: smart on the front; otherwise the fixed strategy that beats it, by how much and on which \
         axis. The table at the top of this page is the same map."
            .into()
    } else if stem.starts_with("pareto-") {
        format!(
            "Not in the paper: each fixed strategy against smart, one point per cell, load {}. x: what the others \
             kept beside the strategy relative to beside smart (co-runner work; CPU in bm-only), y: IOPS relative \
             to smart. Look for: points at x >= 0.97 and y >= 1.05 (up and right of the labelled lines) are cells \
             where a fixed strategy beat smart on both axes.",
            rest("pareto-")
        )
    } else if stem == "polling-interval" {
        "Fig. 1 of the dynamic-interval-polling paper (Shin et al.): mean latency against a fixed polling interval, \
         block and spin as flat references. Look for: a best interval near the device time, and latency rising on \
         both sides of it."
            .into()
    } else if stem == "hybrid" {
        "Hybrid waiting against spin and block (Shin et al.). Look for: IOPS / spin near 1.0 at a CPU / spin well \
         below 1.0."
            .into()
    } else if stem == "merge" {
        "Paper 002, Fig. 4: temporal merge, IOPS by polling and post-I/O processing. Look for: pipelined above \
         serialized."
            .into()
    } else {
        format!("{stem}.")
    }
}

/// The order a reader meets the plots in: the paper's figures in order, then the rest.
fn plot_rank(file_name: &str) -> usize {
    const ORDER: [&str; 10] = [
        "verdict-map",
        "fig8-",
        "fig9-",
        "fig10-",
        "fig11-",
        "table6-",
        "pareto-",
        "polling-interval",
        "hybrid",
        "merge",
    ];
    ORDER.iter().position(|p| file_name.starts_with(p)).unwrap_or(ORDER.len())
}

/// An SVG file's markup to inline: without an XML prolog, scaled to the column's width.
fn inline_svg(svg: &str) -> String {
    let start = svg.find("<svg").unwrap_or(0);
    svg[start..].replacen("<svg", "<svg class=\"plot\" role=\"img\"", 1)
}

const STYLE: &str = "body{font-family:sans-serif;margin:0;color:#222;background:#fff}\
header{padding:8px 24px;background:#2c3e50;color:#fff}header h1{margin:0;font-size:20px;display:inline}\
header p{display:inline;margin:0 0 0 16px;font-size:13px;color:#dde}\
main{padding:8px 24px}\
section.top p.headline{font-size:16px;margin:8px 0}\
ul.host{display:flex;flex-wrap:wrap;gap:6px;list-style:none;padding:0;margin:6px 0;font-size:13px}\
ul.host li{border:1px solid #ccc;border-radius:3px;padding:3px 8px;background:#f8f8f8}\
p.legend{font-size:12px;margin:4px 0}p.legend .key{padding:1px 6px;border:1px solid #bbb}\
p.warn{background:#fdd;padding:4px 8px;font-weight:bold}p.notes{font-size:13px;color:#444}\
section.summary{font-size:14px;line-height:1.45}\
h2{font-size:17px;border-bottom:1px solid #ccc;padding-bottom:3px;margin:14px 0 6px 0}\
details.section>summary{font-size:16px;font-weight:bold;padding:4px 0;border-bottom:1px solid #ddd;cursor:pointer}\
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}\
table.map{font-size:11px}table.map td,table.map th{padding:2px 4px}table.map tbody th{white-space:nowrap}\
table.map thead th{white-space:normal;font-weight:normal;text-align:center}table.map th.load{font-weight:bold}\
table.map .first{border-left:2px solid #555}table.map a{color:#111;text-decoration:none}\
table.map td.none{color:#aaa;text-align:center}\
table.criteria td.met{color:#176117}table.criteria td.missed{color:#b00;font-weight:bold}\
details.cell,details.criterion{font-size:13px}details:target{outline:2px solid #2c3e50}table.rounds{font-size:12px}\
section.plots{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:24px}\
@media(max-width:1100px){section.plots{grid-template-columns:1fr}}\
figure{margin:0 0 24px 0}svg.plot{width:100%;height:auto;border:1px solid #ddd}\
figcaption{font-size:13px;color:#444;margin-top:4px}";

/// Renders `md` (the subset of [`markdown`]) with every `## ` section folded into a
/// `<details>` whose summary is the heading; what comes before the first section stays open.
pub fn folded(md: &str) -> String {
    let mut out = String::new();
    let mut part = String::new();
    let mut heading: Option<String> = None;
    let flush = |heading: &Option<String>, part: &str, out: &mut String| match heading {
        Some(h) => out.push_str(&format!(
            "<details class=\"section\"><summary>{}</summary>\n{}</details>\n",
            inline(h),
            markdown(part)
        )),
        None => out.push_str(&markdown(part)),
    };
    let mut in_code = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with("## ") {
            flush(&heading, &part, &mut out);
            part.clear();
            heading = Some(line[3..].trim().to_string());
            continue;
        }
        part.push_str(line);
        part.push('\n');
    }
    flush(&heading, &part, &mut out);
    out
}

/// What a report page holds besides its folder's plots.
pub struct Page<'a> {
    pub title: &'a str,
    /// One line beside the title (the machine, the run's size).
    pub subtitle: &'a str,
    /// HTML of the first screen and what follows it directly.
    pub top: &'a str,
    /// Markdown of the rest, each `## ` section folded.
    pub body_md: &'a str,
    /// HTML after the plots (long lists a reader opens from a link).
    pub bottom: &'a str,
}

/// Writes `report.html` into `dir`: the page's top, its folded body, every `*.svg` of the
/// folder with its caption, and its bottom; returns the page's path. One file, no script,
/// nothing fetched. Fails (kind `Io`) when a plot cannot be read or the page cannot be
/// written.
pub fn write_report_html(dir: &Path, page: &Page) -> Result<PathBuf> {
    let read = |path: &Path| std::fs::read_to_string(path).map_err(|e| Error::io(ErrorKind::Io, path, e));
    let mut plots: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(ErrorKind::Io, dir, e))?
        .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        .filter(|name| name.ends_with(".svg"))
        .collect();
    plots.sort_by(|a, b| plot_rank(a).cmp(&plot_rank(b)).then(a.cmp(b)));
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header><h1>{}</h1><p>{}</p></header>\n<main>\n<section class=\"top\">\n",
        escape(page.title),
        escape(page.title),
        escape(page.subtitle)
    );
    html.push_str(page.top);
    html.push_str("</section>\n<section class=\"summary\">\n");
    html.push_str(&folded(page.body_md));
    html.push_str("</section>\n<h2>Plots</h2>\n<section class=\"plots\">\n");
    for name in &plots {
        let svg = read(&dir.join(name))?;
        html.push_str(&format!(
            "<figure id=\"{}\">\n{}\n<figcaption><strong>{}</strong>: {}</figcaption>\n</figure>\n",
            escape(name),
            inline_svg(&svg),
            escape(name),
            escape(&caption(name))
        ));
    }
    html.push_str("</section>\n");
    html.push_str(page.bottom);
    html.push_str("</main>\n</body>\n</html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|e| Error::io(ErrorKind::Io, &path, e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_subset_renders() {
        let md = "# smartcon evaluate\n\nNote: a <b> & **bold** `x|y`.\nsecond line\n\n## Criteria\n\n| a | b |\n|---|---|\n| 1 | **miss** |\n\n- one `two`\n- three\n\n```\nt  <x>\n```\n";
        let html = markdown(md);
        assert!(html.contains("<h1>smartcon evaluate</h1>"));
        assert!(html.contains("<p>Note: a &lt;b&gt; &amp; <strong>bold</strong> <code>x|y</code>. second line</p>"));
        assert!(html.contains("<h2>Criteria</h2>"));
        assert!(html.contains("<th>a</th><th>b</th>") && html.contains("<td>1</td><td><strong>miss</strong></td>"));
        assert!(html.contains("<li>one <code>two</code></li>\n<li>three</li>"));
        assert!(html.contains("<pre><code>t  &lt;x&gt;\n</code></pre>"));
    }

    #[test]
    fn sections_fold_under_their_headings_but_not_inside_code() {
        let html = folded("lead\n\n## One\n\na\n\n```\n## not a heading\n```\n\n## Two `x`\n\nb\n");
        assert!(html.starts_with("<p>lead</p>"), "{html}");
        assert_eq!(html.matches("<details class=\"section\">").count(), 2, "{html}");
        assert!(html.contains("<summary>Two <code>x</code></summary>"), "{html}");
        assert!(html.contains("## not a heading"), "{html}");
    }

    #[test]
    fn an_unclosed_marker_stays_text_and_closes() {
        assert_eq!(inline("a `b"), "a `b");
        assert_eq!(inline("`a` `b"), "<code>a</code> `b");
        assert_eq!(inline("**x"), "<strong>x</strong>");
    }

    #[test]
    fn every_evaluate_plot_has_a_figure_caption() {
        for name in ["fig8-cpu-t.svg", "fig9-gain-t-bm-only.svg", "fig10-csw-t.svg", "fig11-workloads-t.svg"] {
            assert!(caption(name).starts_with("Fig."), "{name}");
        }
        assert!(caption("table6-corunner.svg").starts_with("Table VI"));
        assert!(caption("pareto-io-intensive.svg").contains("io-intensive"));
        assert!(plot_rank("fig8-cpu-x.svg") < plot_rank("pareto-bm-only.svg"));
    }

    #[test]
    fn the_page_inlines_every_plot_with_its_caption() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-html-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let svg = "<?xml version=\"1.0\"?>\n<svg width=\"10\" height=\"10\" viewBox=\"0 0 10 10\"><rect/></svg>\n";
        std::fs::write(dir.join("table6-corunner.svg"), svg).unwrap();
        std::fs::write(dir.join("fig8-cpu-x.svg"), svg).unwrap();
        let page = Page {
            title: "smartcon <evaluate>",
            subtitle: "2 CPUs",
            top: "<p class=\"headline\">first</p>",
            body_md: "open\n\n## Gain\n\ntext\n",
            bottom: "<p>last</p>",
        };
        let path = write_report_html(&dir, &page).unwrap();
        let html = std::fs::read_to_string(&path).unwrap();
        assert!(html.contains("<title>smartcon &lt;evaluate&gt;</title>"));
        assert_eq!(html.matches("<svg class=\"plot\"").count(), 2);
        assert!(!html.contains("<?xml"));
        assert!(html.find("fig8-cpu-x.svg").unwrap() < html.find("table6-corunner.svg").unwrap());
        assert!(html.contains("<details class=\"section\"><summary>Gain</summary>") && html.contains("Table VI"));
        let order = ["class=\"headline\"", "<p>open</p>", "<summary>Gain", "fig8-cpu-x.svg", "<p>last</p>"];
        let at: Vec<usize> = order.iter().map(|s| html.find(s).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "top, body, plots, bottom in that order: {at:?}");
        assert!(!html.contains("<script") && !html.contains("<link"), "nothing to run or fetch");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(write_report_html(&dir, &page).is_err(), "a missing folder is an error, not a panic");
    }
}
